"""JSON Schemas compiled the one way both sides use them: the control plane's model
(``gatehouse validate``) and the Authorization service's request validation.

The library is ``jsonschema_rs`` (Rust): bench/validation.py measured it at 0.8 µs per
valid 0.6 KB body against 13 µs for fastjsonschema and 196 µs for jsonschema, and it
compiles a schema in about 40 µs (fastjsonschema generates and ``exec``s Python source:
about 5 ms). Compiling here is what the service does when a policy arrives, so a schema
that compiles at ``gatehouse validate`` time compiles in the service too.

Rules beyond the JSON Schema meta-schema: the schema is JSON (no YAML-only values), at
most ``MAX_SCHEMA_BYTES`` as compact JSON, every ``$ref`` points into the schema itself
(``#...``: nothing is fetched, ever; ``offline=True`` makes sure), and an unknown
``format`` is an error, not silently ignored. The draft is the one ``$schema`` names,
else 2020-12.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import jsonschema_rs

MAX_SCHEMA_BYTES = 64 * 1024


class SchemaProblem(ValueError):
    """A schema that cannot be used: ``path`` is where in the schema (keys and indices)."""

    def __init__(self, path: Sequence[str | int], reason: str) -> None:
        self.path = tuple(path)
        self.reason = reason
        super().__init__(f"{dotted(self.path)}: {reason}" if self.path else reason)


def dotted(path: Sequence[str | int]) -> str:
    """``("properties", "items", 0)`` → ``properties.items[0]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _refs(node: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield (*path, key), value
            yield from _refs(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _refs(value, (*path, index))


def compile_schema(schema: Any) -> jsonschema_rs.Validator:
    """The validator for ``schema``; SchemaProblem naming where and why if it cannot be one."""
    try:
        text = json.dumps(schema, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SchemaProblem((), f"not JSON: {exc}") from None
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise SchemaProblem((), f"{len(text.encode())} bytes as JSON; at most {MAX_SCHEMA_BYTES}")
    if not isinstance(schema, (dict, bool)):
        raise SchemaProblem((), f"a schema is an object or a boolean, not {type(schema).__name__}")
    for where, ref in _refs(schema):
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise SchemaProblem(where, f"{str(ref)[:100]!r}: only references into this schema (#...) are allowed; nothing is fetched")
    try:
        return jsonschema_rs.validator_for(schema, validate_formats=True, ignore_unknown_formats=False, offline=True)
    except jsonschema_rs.ValidationError as exc:
        raise SchemaProblem(list(exc.instance_path), exc.message.splitlines()[0][:300]) from None
    except (ValueError, jsonschema_rs.ReferencingError) as exc:  # a ref it cannot resolve, a bad option
        raise SchemaProblem((), str(exc).splitlines()[0][:300]) from None
