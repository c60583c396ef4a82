"""Reading the services' Prometheus text (``/metrics``) and Envoy's counters: samples by name
prefix, the check's decisions, sums by label, and what changed between two readings."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterator, Mapping

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def samples(text: str, prefix: str = "") -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample whose name starts with ``prefix``."""
    for match in _SAMPLE.finditer(text):
        if match["name"].startswith(prefix):
            yield match["name"], dict(_LABEL.findall(match["labels"] or "")), float(match["value"])


def authz_decisions(text: str, separator: str = "/") -> Counter[str]:
    """``<result><separator><reason>`` → count, from ``gatehouse_authz_decisions_total``
    (summed over workers)."""
    counts: Counter[str] = Counter()
    for name, labels, value in samples(text, "gatehouse_authz_decisions_total"):
        if name == "gatehouse_authz_decisions_total":
            counts[f"{labels.get('result')}{separator}{labels.get('reason')}"] += int(value)
    return counts


def labelled_sums(text: str, names: Collection[str]) -> dict[str, float]:
    """``name{label=value,…}`` → value for the samples of ``names``, summed over workers
    (the ``worker`` label dropped)."""
    out: dict[str, float] = {}
    for name, labels, value in samples(text):
        if name not in names:
            continue
        key = f"{name}{{{','.join(f'{k}={v}' for k, v in sorted(labels.items()) if k != 'worker')}}}"
        out[key] = out.get(key, 0.0) + value
    return out


def metric_sum(sums: Mapping[str, float], name: str, **labels: str) -> float:
    """The total of ``name`` in ``labelled_sums`` output, over the samples that carry ``labels``."""
    total = 0.0
    for key, value in sums.items():
        metric, _, rest = key.partition("{")
        if metric != name:
            continue
        found = dict(part.split("=", 1) for part in rest.rstrip("}").split(",") if "=" in part)
        if all(found.get(k) == v for k, v in labels.items()):
            total += value
    return total


def delta(before: Mapping[str, float], after: Mapping[str, float], digits: int | None = None) -> dict[str, float]:
    """What moved between two readings of counters: ``after − before``, the non-zero ones,
    sorted by name (rounded to ``digits`` when given)."""
    moved: dict[str, float] = {}
    for key, value in sorted(after.items()):
        change = value - before.get(key, 0)
        if change:
            moved[key] = round(change, digits) if digits is not None else change
    return moved
