"""The `match.path` mini-language: literal paths, `{var}` segments and a trailing `/**`.

A path is classified once, here, so that validation, ordering and translation agree on
what it means:

- ``/api/v2/orders/bulk``  → exact
- ``/api/v2/orders/{id}``  → template (Envoy's ``uri_template`` matcher)
- ``/api/v2/orders/**``    → segment prefix: ``/api/v2/orders`` and everything below it
- ``/users/{id}/**``       → template with a trailing glob
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

import re2

# RFC 3986 pchar minus the characters Envoy's uri_template reserves ("{", "}", "*", "=").
_LITERAL = re.compile(r"^[A-Za-z0-9\-._~!$&'()+,;:@%]+$")
_VARIABLE = re.compile(r"^\{([A-Za-z][A-Za-z0-9_]*)\}$")
# Limits of Envoy's uri_template matcher (source/extensions/path/uri_template_lib).
MAX_VARIABLES = 5
MAX_VARIABLE_NAME = 16
GLOB_VARIABLE = "gh_rest"


class PathKind(Enum):
    EXACT = "exact"
    TEMPLATE = "template"
    SEGMENT_PREFIX = "segmentPrefix"


@dataclass(frozen=True, slots=True)
class PathPattern:
    kind: PathKind
    text: str
    literal_segments: int
    segments: int
    variables: tuple[str, ...]
    glob: bool
    literal_prefix: str
    """The path up to the first variable or glob, without a trailing slash ("" for root)."""

    def template_with_named_glob(self) -> str:
        """The template with ``**`` named, as Envoy's rewrite needs every part named."""
        if not self.glob:
            return self.text
        return self.text[: -len("**")] + "{" + GLOB_VARIABLE + "=**}"

    def rewrite_template(self, new_prefix: str) -> str:
        """The uri_template rewrite that swaps ``literal_prefix`` for ``new_prefix``."""
        rest = self.template_with_named_glob()[len(self.literal_prefix) :]
        rest = re.sub(r"\{([A-Za-z][A-Za-z0-9_]*)(=\*\*)?\}", r"{\1}", rest)
        return new_prefix.rstrip("/") + rest


@lru_cache(maxsize=65536)
def parse_path(text: str) -> PathPattern:
    """Classify a `match.path`; ValueError names the offending segment. Pure, so cached:
    validation, ordering and translation all ask about the same paths."""
    if not text.startswith("/"):
        raise ValueError(f"{text!r} must start with '/'")
    if "?" in text or "#" in text:
        raise ValueError(f"{text!r} must not contain a query or fragment")
    if text == "/":
        return PathPattern(PathKind.EXACT, text, 0, 0, (), False, "")
    parts = text[1:].split("/")
    variables: list[str] = []
    literal_segments = 0
    glob = False
    prefix_parts: list[str] = []
    in_prefix = True
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "":
            if last:
                raise ValueError(f"{text!r} must not end with '/' (use '/**' to match below it)")
            raise ValueError(f"{text!r} has an empty segment ('//')")
        if part == "**":
            if not last:
                raise ValueError(f"{text!r}: '**' may only be the last segment")
            glob = True
            in_prefix = False
            continue
        variable = _VARIABLE.match(part)
        if variable:
            name = variable.group(1)
            if len(name) > MAX_VARIABLE_NAME:
                raise ValueError(f"{text!r}: variable {{{name}}} is longer than {MAX_VARIABLE_NAME} characters")
            if name in variables:
                raise ValueError(f"{text!r}: variable {{{name}}} appears twice")
            if name == GLOB_VARIABLE:
                raise ValueError(f"{text!r}: variable name {GLOB_VARIABLE} is reserved")
            variables.append(name)
            in_prefix = False
            continue
        if "{" in part or "}" in part:
            raise ValueError(f"{text!r}: segment {part!r} must be a literal or a whole {{name}} variable")
        if "*" in part:
            raise ValueError(f"{text!r}: segment {part!r}: '*' is only allowed as a trailing '/**'")
        if not _LITERAL.match(part):
            raise ValueError(f"{text!r}: segment {part!r} has characters not allowed in a URL path")
        literal_segments += 1
        if in_prefix:
            prefix_parts.append(part)
    if len(variables) > MAX_VARIABLES:
        raise ValueError(f"{text!r} has {len(variables)} variables; Envoy allows at most {MAX_VARIABLES}")
    literal_prefix = "".join("/" + p for p in prefix_parts)
    segments = len(parts)
    if variables:
        kind = PathKind.TEMPLATE
    elif glob:
        kind = PathKind.SEGMENT_PREFIX
    else:
        kind = PathKind.EXACT
    return PathPattern(kind, text, literal_segments, segments, tuple(variables), glob, literal_prefix)


# Envoy refuses a regex whose RE2 program is bigger than this (runtime key
# re2.max_program_size.error_level, default 100). Checking here turns a NACK into a
# validation error that names the file and field.
ENVOY_MAX_PROGRAM_SIZE = 100

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
# Envoy hands RE2 the pattern's UTF-8 bytes and compiles them as Latin-1, which is what
# its program sizes (and its refusal of escapes above \x{ff}) correspond to.
_RE2_OPTIONS.encoding = re2.Options.Encoding.LATIN1


def check_re2(pattern: str) -> None:
    """Compile with RE2 itself, the way Envoy does, and apply Envoy's size limit."""
    try:
        compiled = re2.compile(pattern.encode("utf-8"), _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(f"{pattern!r} is not a valid RE2 regex: {reason}") from None
    size = compiled.programsize
    if size > ENVOY_MAX_PROGRAM_SIZE:
        raise ValueError(
            f"{pattern!r} is too complex for Envoy: RE2 program size {size} exceeds {ENVOY_MAX_PROGRAM_SIZE}"
        )
