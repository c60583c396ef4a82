"""Whether a request's ``content-type`` makes the upstream read its body as JSON.

A body rule validates JSON. An upstream picks its parser by the media type, so a
JSON-valid body sent as ``application/x-www-form-urlencoded`` (or ``text/plain``, or
with no type) would be read as something the check never validated: a form's fields
are not the JSON document's. So a validated body must say JSON, strictly:

- ``application/json`` or ``application/<name>+json`` (RFC 6839), any case;
- at most one parameter, ``charset=utf-8`` (any case, quoted or not): RFC 8259 defines
  no parameter for JSON, and a parser that honours another charset (``utf-16``,
  ``latin1``) reads other text than the check decoded;
- the RFC 9110 syntax and nothing else: no second type joined by a comma (two
  ``content-type`` lines, merged), no empty or repeated parameters, no stray characters.

Anything else is 415 (``refusal`` says why, without echoing the client's value).
"""

from __future__ import annotations

import re

_TCHARS = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_TYPE = re.compile(rf"({_TCHARS})/({_TCHARS})")
_PARAMETER = re.compile(rf'[ \t]*;[ \t]*({_TCHARS})=(?:({_TCHARS})|"((?:[^"\\\x00-\x08\x0a-\x1f\x7f]|\\[\t\x20-\x7e])*)")')
EXPECTED = "application/json or application/*+json, with no parameter but charset=utf-8"


def refusal(value: str | None) -> str | None:
    """None when ``value`` names JSON this check reads as the upstream will; else why not."""
    text = (value or "").strip(" \t")
    if not text:
        return f"a body needs a content-type: {EXPECTED}"
    found = _TYPE.match(text)
    if found is None:
        return f"the content-type is not one media type: {EXPECTED}"
    parameters: list[tuple[str, str]] = []
    at = found.end()
    while (parameter := _PARAMETER.match(text, at)) is not None:
        name, token, quoted = parameter.groups()
        parameters.append((name.lower(), token if token is not None else quoted))
        at = parameter.end()
    if at != len(text):
        return f"the content-type is not one media type: {EXPECTED}"
    kind, subtype = found[1].lower(), found[2].lower()
    if kind != "application" or not (subtype == "json" or (subtype.endswith("+json") and len(subtype) > len("+json"))):
        return f"the content-type is not JSON: {EXPECTED}"
    if len(parameters) > 1 or any(name != "charset" for name, _ in parameters):
        return f"the content-type has a parameter JSON does not define: {EXPECTED}"
    if parameters and parameters[0][1].lower() != "utf-8":
        return f"the content-type's charset is not utf-8: {EXPECTED}"
    return None
