"""A request body read as JSON the one way every parser reads it, for request validation.

Validation is only worth something if the upstream reads the document the check
validated. So a body is refused (``BodyRefused``: the rule, the JSON Pointer, a message
with no client value in it) where parsers disagree or where reading it would fail here:

- ``json``: not UTF-8 (Python would guess UTF-16/32 from bytes; the upstream reads
  UTF-8), a byte order mark, ``NaN``/``Infinity`` (Python reads them, RFC 8259 has no
  such values), an unpaired UTF-16 surrogate escape such as ``"\\ud800"`` (no UTF-8 form:
  each parser mangles it its own way; the Rust validator could not take it), or any
  syntax error;
- ``duplicate``: a key twice in one object (Python keeps the last, many parsers the
  first: the guard would have seen the other value);
- ``maxDepth``: nested more than ``MAX_DEPTH`` arrays/objects (the validator gives up at
  255, Python's parser near its recursion limit; both raised, so the check answered 500);
- ``number``: a number literal longer than ``MAX_NUMBER_CHARS`` (Python refuses integers
  above 4,300 digits with a ValueError, and what a long number means differs between
  parsers: float64, big integers) or one beyond a double's range (``1e400``).

Cost on a passing body (bench/validation.py, ``strict_reading``): the duplicate-key hook
builds each object in Python; the depth and surrogate checks cost two ``count`` calls and
a substring search unless the body has more than ``MAX_DEPTH`` brackets (then a few
C-speed passes) or a ``\\u`` escape.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterator
from typing import Any

MAX_DEPTH = 64
MAX_NUMBER_CHARS = 100


class BodyRefused(ValueError):
    """Why a body is not read: ``rule``, ``path`` (keys and indices to the place, empty
    for the whole body) and ``message`` (no client value in it: a sentence about the body,
    or, with a path, what is wrong there: "is given more than once")."""

    def __init__(self, rule: str, message: str, path: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.rule, self.path, self.message = rule, path, message


class _Duplicate(Exception):
    """Raised from inside the decoder; mapped to BodyRefused once its place is known."""


class _Number(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


class _Constant(Exception):
    pass


class _Marked(dict[str, Any]):
    """An object that had a duplicate key (``duplicate``: the name), on the slow path only."""

    duplicate = ""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise _Duplicate
    return found


def _marked_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) == len(pairs):
        return found
    marked = _Marked(found)
    seen: set[str] = set()
    for name, _ in pairs:
        if name in seen:
            marked.duplicate = name
            break
        seen.add(name)
    return marked


def _integer(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Number(f"the body has a number longer than {MAX_NUMBER_CHARS} characters")
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Number(f"the body has a number longer than {MAX_NUMBER_CHARS} characters")
    value = float(text)
    if math.isinf(value):
        raise _Number("the body has a number beyond the range of a double")
    return value


def _constant(text: str) -> Any:
    raise _Constant


_HOOKS: dict[str, Any] = {"parse_int": _integer, "parse_float": _float, "parse_constant": _constant}
_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, **_HOOKS)
_MARKING_DECODER = json.JSONDecoder(object_pairs_hook=_marked_pairs, **_HOOKS)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_BRACKET_OR_QUOTE = bytes(c for c in range(256) if chr(c) not in '"[]{}')
_PARENS = bytes.maketrans(b"[]{}", b"()()")
_STEPS = bytes.maketrans(b"()", b"\x01\xff")
"""Opening +1, closing -1 (as signed bytes)."""
_PEELED = 4


def decode(body: bytes) -> Any:
    """The document in ``body``; BodyRefused if it is not one every parser reads alike."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyRefused("json", f"the body is not valid JSON: not UTF-8 (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        raise BodyRefused("json", "the body is not valid JSON: it starts with a byte order mark")
    try:
        document = _decoded(_DECODER, text)
    except _Duplicate:
        raise _duplicate(text, body) from None
    # No deeper than its count of opening brackets: most bodies need no closer look.
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and _depth(body) > MAX_DEPTH:
        raise _too_deep()
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        where = _surrogate(document)
        if where is not None:
            raise BodyRefused("json", "holds an unpaired UTF-16 surrogate escape, which is not text", where)
    return document


def _too_deep() -> BodyRefused:
    return BodyRefused("maxDepth", f"the body is nested more than {MAX_DEPTH} levels deep")


def _depth(body: bytes) -> int:
    """The nesting depth of a valid JSON text, from its brackets outside strings (escaped
    quotes and backslashes dropped, then all but brackets and quotes, then what lies
    between quotes): a few passes peel the innermost levels (a shallow body ends there),
    then a running count over what is left. C-speed steps: 3 ms for 64 KiB nested 64 deep."""
    kept = body.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_BRACKET_OR_QUOTE)
    brackets = b"".join(kept.split(b'"')[::2]).translate(_PARENS)
    for peeled in range(_PEELED):
        if not brackets:
            return peeled
        brackets = brackets.replace(b"()", b"")
    if not brackets:
        return _PEELED
    # Each pass took one level off every branch: what is left is that much shallower.
    return _PEELED + max(itertools.accumulate(memoryview(brackets.translate(_STEPS)).cast("b")))


def _decoded(decoder: json.JSONDecoder, text: str) -> Any:
    try:
        return decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise BodyRefused("json", f"the body is not valid JSON: {exc.msg} (byte {exc.pos})") from None
    except _Number as exc:
        raise BodyRefused("number", exc.message) from None
    except _Constant:
        raise BodyRefused("json", "the body is not valid JSON: NaN and Infinity are not JSON values") from None
    except RecursionError:
        raise _too_deep() from None


def _duplicate(text: str, body: bytes) -> BodyRefused:
    """The slow path (a refused body only): decode again, marking, to name the key's place.
    Whatever else is wrong with the text is named instead (BodyRefused raised), as the
    first decode would have, had it got that far."""
    document = _decoded(_MARKING_DECODER, text)
    if _depth(body) > MAX_DEPTH:
        return _too_deep()
    for node, path in _walk(document):
        if isinstance(node, _Marked):
            return BodyRefused("duplicate", "is given more than once; each key once", (*path, node.duplicate))
    return BodyRefused("duplicate", "has a key given more than once; each key once")  # not reached: the marks find it


def _walk(document: Any) -> Iterator[tuple[Any, tuple[str | int, ...]]]:
    """Every value with its path, in document order (iterative: a body may nest deeply)."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(document, ())]
    while stack:
        node, path = stack.pop()
        yield node, path
        if isinstance(node, dict):
            stack.extend((value, (*path, name)) for name, value in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((node[i], (*path, i)) for i in range(len(node) - 1, -1, -1))


def _surrogate(document: Any) -> tuple[str | int, ...] | None:
    """The path of the first string (or key) holding a lone surrogate."""
    for node, path in _walk(document):
        if isinstance(node, str) and _SURROGATE.search(node):
            return path
        if isinstance(node, dict):
            for name in node:
                if _SURROGATE.search(name):
                    return (*path, name)
    return None
