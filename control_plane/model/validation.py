"""A route's ``validate:`` block: what a request must carry before any upstream sees it.

Checked by the Authorization service in the route's one HTTP check (docs/validation.md):
required headers, typed query parameters, and a JSON Schema for the body, with a size
limit and an ``allowedFields`` list against mass assignment. Every schema here (the
body's, and the one each header or parameter rule becomes) is compiled with the library
the service uses (``servicekit.json_schema``), so a schema that does not compile is this
route's error at ``gatehouse validate`` time, naming the field inside the schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator

from servicekit.json_schema import SchemaProblem, compile_schema, dotted
from servicekit.model import Model
from control_plane.model.shared_types import HEADER_NAME_PATTERN, cel

MAX_BODY_BYTES = 1024 * 1024
"""The most a validated route may have Envoy buffer per request (the service's read bound too)."""
DEFAULT_BODY_BYTES = 64 * 1024
MAX_RULES = 32
_QUERY_NAME = r"^[A-Za-z0-9._~\[\]-]+$"
_FIELD_NAME = r"^[^\x00-\x1f]+$"

ValueType = Literal["string", "integer", "number", "boolean"]
Format = Literal["uuid", "date", "date-time", "email", "ipv4", "ipv6", "uri"]

JsonSchema = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
"""Free-form: the CRD keeps it as written; ``compile_schema`` is its validation."""


def _unique_names(rules: list[Any]) -> list[Any]:
    seen: set[str] = set()
    for rule in rules:
        if rule.name in seen:
            raise ValueError(f"{rule.name!r} is listed twice")
        seen.add(rule.name)
    return rules


class _ValueRule(Model):
    """What one header or query parameter's text must be (JSON Schema keywords)."""

    required: bool = False
    format: Format | None = None
    enum: Annotated[list[Annotated[str, Field(max_length=256)]], Field(min_length=1, max_length=64)] | None = None
    pattern: Annotated[str, Field(max_length=1024)] | None = None
    """ECMA 262 regex (as JSON Schema), searched, not anchored: write ``^...$``."""
    min_length: Annotated[int, Field(ge=0)] | None = None
    max_length: Annotated[int, Field(ge=0)] | None = None

    def value_schema(self) -> dict[str, Any]:
        """The JSON Schema the value (read as its ``type``) is checked against."""
        schema: dict[str, Any] = {"type": getattr(self, "type", "string")}
        for key, value in (
            ("format", self.format),
            ("enum", self.enum),
            ("pattern", self.pattern),
            ("minLength", self.min_length),
            ("maxLength", self.max_length),
            ("minimum", getattr(self, "minimum", None)),
            ("maximum", getattr(self, "maximum", None)),
        ):
            if value is not None:
                schema[key] = value
        return schema

    @model_validator(mode="after")
    def _compiles(self) -> _ValueRule:
        try:
            compile_schema(self.value_schema())
        except SchemaProblem as exc:
            raise ValueError(f"{dotted(exc.path) or 'schema'}: {exc.reason}") from None
        return self


class HeaderRule(_ValueRule):
    name: Annotated[str, Field(pattern=HEADER_NAME_PATTERN, max_length=256)]
    required: bool = True


class QueryRule(_ValueRule):
    model_config = cel(
        (
            "!has(self.enum) && !has(self.pattern) && !has(self.format) || !has(self.type) || self.type == 'string'",
            "enum, pattern and format apply to type string",
        ),
        (
            "!has(self.minimum) && !has(self.maximum) || has(self.type) && self.type in ['integer', 'number']",
            "minimum and maximum apply to type integer or number",
        ),
    )

    name: Annotated[str, Field(pattern=_QUERY_NAME, max_length=128)]
    type: ValueType = "string"
    """How the text is read: ``integer`` (``-?[0-9]+``), ``number``, ``boolean`` (``true``/``false``)."""
    minimum: float | None = None
    maximum: float | None = None

    @model_validator(mode="after")
    def _keywords_fit_type(self) -> QueryRule:
        if self.type != "string" and (self.enum is not None or self.pattern is not None or self.format is not None):
            raise ValueError(f"enum, pattern and format apply to type string, not {self.type}")
        if self.type not in ("integer", "number") and (self.minimum is not None or self.maximum is not None):
            raise ValueError(f"minimum and maximum apply to type integer or number, not {self.type}")
        return self


class BodyRule(Model):
    json_schema: JsonSchema | None = Field(default=None, alias="schema")
    """The body must be JSON valid against it (draft 2020-12 unless ``$schema`` says another)."""
    max_bytes: Annotated[int, Field(ge=1, le=MAX_BODY_BYTES)] = DEFAULT_BODY_BYTES
    """Envoy buffers at most this much for the check; a longer body is 413, never forwarded."""
    allowed_fields: Annotated[list[Annotated[str, Field(pattern=_FIELD_NAME, max_length=256)]], Field(max_length=256)] | None = None
    """The body's top-level fields; any other is refused (against mass assignment)."""
    required: bool = True
    """False: an empty body passes (it is not JSON, so it is otherwise refused)."""

    @model_validator(mode="after")
    def _compiles(self) -> BodyRule:
        if self.json_schema is None and self.allowed_fields is None:
            raise ValueError("give a schema, allowedFields, or both")
        if self.json_schema is not None:
            try:
                compile_schema(self.json_schema)
            except SchemaProblem as exc:
                where = f"schema.{dotted(exc.path)}" if exc.path and isinstance(exc.path[0], str) else "schema"
                raise ValueError(f"{where}: {exc.reason}") from None
        return self


class Validation(Model):
    """``validate:``; a request failing any rule gets 400 ``invalid_request`` naming the field."""

    model_config = cel(
        (
            "has(self.body) || has(self.headers) && size(self.headers) > 0 || has(self.query) && size(self.query) > 0",
            "give headers, query or body",
        ),
    )

    headers: Annotated[list[HeaderRule], AfterValidator(_unique_names), Field(max_length=MAX_RULES)] = []
    query: Annotated[list[QueryRule], AfterValidator(_unique_names), Field(max_length=MAX_RULES)] = []
    body: BodyRule | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> Validation:
        if self.body is None and not self.headers and not self.query:
            raise ValueError("give headers, query or body")
        return self
