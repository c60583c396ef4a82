"""Route YAML text → validated Routes (and ReferenceGrants), or Problems that name file,
line, field and reason."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol

import yaml
from pydantic import ValidationError

from control_plane.errors import Problem
from control_plane.model.reference_grants import grant_from_document, is_grant_document
from control_plane.model.references import ReferenceGrant
from control_plane.model.route import Origin, Route
from control_plane.model.schema import RouteDocument
from servicekit.config_file import field_path
from servicekit.yaml_documents import Document, load_documents


def _reason(error: dict[str, object]) -> str:
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    if error["type"] == "extra_forbidden":
        return "unknown field"
    if error["type"] == "missing":
        return "required field is missing"
    return message


_FIELD_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9]*(?:\[\d+\])?(?:\.[A-Za-z][A-Za-z0-9]*(?:\[\d+\])?)*): (.+)$", re.S)


def _sub_location(reason: str) -> tuple[tuple[str | int, ...], str]:
    """Cross-field checks name their field first ("backends[1]: listed twice"); turn that
    into a location, so the problem points at the field's own line."""
    match = _FIELD_PREFIX.match(reason)
    if match is None:
        return (), reason
    loc: list[str | int] = []
    for part in match.group(1).split("."):
        name, _, index = part.partition("[")
        loc.append(name)
        if index:
            loc.append(int(index.rstrip("]")))
    return tuple(loc), match.group(2)


def validation_problems(exc: ValidationError, location: str, document: Document | None) -> list[Problem]:
    problems = []
    for error in exc.errors(include_url=False):
        loc: tuple[str | int, ...] = tuple(p for p in error["loc"] if isinstance(p, (str, int)))
        sub, reason = _sub_location(_reason(dict(error)))
        loc += sub
        where = f"{location}:{document.line_of(loc)}" if document is not None else location
        problems.append(Problem(where, field_path(loc), reason))
    return problems


def route_from_document(data: object, origin: Origin, document: Document | None = None) -> Route:
    """Validate one parsed document; raises ValidationError (or ValueError for non-objects)."""
    if not isinstance(data, dict):
        raise ValueError(f"a route document must be a mapping, not {type(data).__name__}")
    parsed = RouteDocument.model_validate(data)
    return Route(
        namespace=parsed.metadata.namespace,
        name=parsed.metadata.name,
        spec=parsed.spec,
        origin=origin,
    )


@dataclass
class Documents:
    """What one YAML stream (or a tree of them) holds: Routes, ReferenceGrants, problems."""

    routes: list[Route] = field(default_factory=list)
    grants: list[ReferenceGrant] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    refused: list[Problem] = field(default_factory=list)
    """Valid documents left out for the namespace they claim (``namespace_binding.py``):
    unlike ``problems``, they do not stop the rest from being served."""


def parse_documents(text: str | bytes, origin: Origin) -> Documents:
    """Every Route and ReferenceGrant in one YAML stream of a route source (grants found
    there count for that source's routes only), plus every problem found (all at once)."""
    found = Documents()
    try:
        documents = list(load_documents(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{origin.location}:{mark.line + 1}" if mark is not None else origin.location
        reason = getattr(exc, "problem", None) or str(exc)
        found.problems.append(Problem(where, "", f"invalid YAML: {reason}"))
        return found
    for document in documents:
        doc_origin = replace(origin, line=document.line)
        try:
            if is_grant_document(document.data):
                found.grants.append(grant_from_document(document.data, doc_origin, cluster=False))
            else:
                found.routes.append(route_from_document(document.data, doc_origin, document))
        except ValidationError as exc:
            found.problems.extend(validation_problems(exc, origin.location, document))
        except ValueError as exc:
            found.problems.append(Problem(f"{origin.location}:{document.line}", "", str(exc)))
    return found


def parse_route_file(text: str | bytes, origin: Origin) -> tuple[list[Route], list[Problem]]:
    """The Routes in one YAML stream and every problem found in it (grants are checked,
    not returned: see ``parse_documents``)."""
    found = parse_documents(text, origin)
    return found.routes, found.problems


class _Defined(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def origin(self) -> Origin: ...


def duplicate_problems(defined: Iterable[_Defined], what: str = "route") -> list[Problem]:
    """Two documents may not define the same namespace/name (of a route, or of a ReferenceGrant)."""
    first: dict[str, _Defined] = {}
    problems = []
    for item in defined:
        other = first.setdefault(item.id, item)
        if other is not item:
            problems.append(
                Problem(
                    str(item.origin),
                    "metadata.name",
                    f"{what} {item.id} is already defined at {other.origin}",
                )
            )
    return problems
