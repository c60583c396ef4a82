"""Verified claims → upstream headers, never letting a claim smuggle bytes into a header.

A claim value with a control character (C0 but tab, DEL, C1) or longer than 4 KiB is
dropped rather than cleaned; the service denies a token whose user id would be dropped:
a subject that needs cleaning is not one to trust.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_HEADER_VALUE = 4096


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return " ".join(value)
    return None


def _safe(text: str) -> bool:
    return len(text.encode()) <= MAX_HEADER_VALUE and not any(
        (ord(ch) < 0x20 and ch != "\t") or 0x7F <= ord(ch) <= 0x9F for ch in text
    )


def claim_headers(claims: Mapping[str, Any], mapping: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """(headers to set, names of claims that were unsafe and dropped)."""
    headers: dict[str, str] = {}
    dropped: list[str] = []
    for header, claim in mapping.items():
        if claim not in claims:
            continue
        text = _text(claims[claim])
        if text is None or not _safe(text):
            dropped.append(claim)
            continue
        headers[header] = text
    return headers, dropped
