"""A route's request validation (``RoutePolicy.validation``), in the HTTP check.

Compiled once, when the policy arrives (``compile_rules``; a schema text seen before
reuses its validator), never per request. Per request, ``RequestRules.check`` looks at
what the route has rules for and nothing else: the named headers, the query string only
when there are query rules, the body (which Envoy sends only for routes with a body
rule, at most their ``maxBytes``) only when there is a body rule. The first failure is
the answer: 400 ``invalid_request`` in the gateway's error shape, naming where
(``location``: header, query or body), the ``field`` (a header or parameter name, or a
JSON Pointer into the body) and the ``rule`` (a JSON Schema keyword, or ``required``,
``json``, ``duplicate``, ``maxDepth``, ``number``, ``allowedFields``). A body not sent as
JSON is 415 ``unsupported_media_type`` (rule ``contentType``, ``json_media_type``), and
the body is read strictly (``strict_json``), so the upstream reads what was validated.
No input makes the check fail: a client can only be answered 4xx. Messages are built
from the rule and the schema, never from the client's values: the only client text
echoed is a field name, cut to ``MAX_ECHOED``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import jsonschema_rs
import structlog

from ext_authz import metrics
from ext_authz.check import json_media_type as json_media_type, strict_json
from servicekit.http1_server import response
from servicekit.json_schema import compile_schema
from servicekit.protos.gatehouse.policy.v1 import policy_pb2

if TYPE_CHECKING:
    from ext_authz.check.steps import Call, CheckParts

log = structlog.get_logger(component="ext_authz")

MAX_ECHOED = 64
MAX_FIELD = 200
MAX_QUERY_FIELDS = 256
_INTEGER = re.compile(r"-?(0|[1-9][0-9]{0,18})")
_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
CONTENT_TYPE = "content-type"
_HEADERS = ((CONTENT_TYPE, "application/json"), ("cache-control", "no-store"))
_CODES = {400: "invalid_request", 413: "request_body_too_large", 415: "unsupported_media_type"}


def _integer(text: str) -> int:
    if not _INTEGER.fullmatch(text):
        raise ValueError
    return int(text)


def _number(text: str) -> float:
    if not _NUMBER.fullmatch(text):
        raise ValueError
    return float(text)


def _boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError
    return text == "true"


READERS: dict[str, Callable[[str], Any]] = {"string": str, "integer": _integer, "number": _number, "boolean": _boolean}


@dataclass(frozen=True, slots=True)
class Invalid:
    """One failed rule, as the client is told."""

    location: str
    field: str
    rule: str
    message: str
    status: int = 400

    def answer(self, request_id: str) -> bytes:
        code = _CODES[self.status]
        error = {"code": code, "message": self.message, "request_id": request_id, "location": self.location, "field": self.field, "rule": self.rule}
        return response(self.status, _HEADERS, json.dumps({"error": error}, separators=(",", ":")).encode())


def _echo(text: str) -> str:
    text = text if len(text) <= MAX_ECHOED else text[:MAX_ECHOED] + "…"
    # A lone surrogate (from a JSON escape) could not be written to a log or a response.
    return text.encode("utf-8", "replace").decode("utf-8")


def _pointer(path: Any) -> str:
    """RFC 6901, cut to ``MAX_FIELD``; property names are the client's, so each is cut too."""
    out = "".join("/" + _echo(str(p)).replace("~", "~0").replace("/", "~1") for p in path)
    return out if len(out) <= MAX_FIELD else out[:MAX_FIELD] + "…"


def _schema_failure(error: jsonschema_rs.ValidationError) -> tuple[str, str, str]:
    """(field pointer, rule, message) from the first error, with no client value in it."""
    kind = error.kind
    rule = kind.name
    detail = kind.as_dict()
    field = _pointer(error.instance_path)
    if rule == "required":
        name = str(detail.get("property", ""))
        return _pointer([*error.instance_path, name]), rule, "is required"
    if rule == "additionalProperties":
        unexpected = detail.get("unexpected") or [""]
        return _pointer([*error.instance_path, unexpected[0]]), rule, "is not an allowed field"
    messages: dict[str, Callable[[], str]] = {
        "type": lambda: "must be of type " + " or ".join(map(str, detail.get("types", []))),
        "enum": lambda: "must be one of the allowed values",
        "format": lambda: f"must be a valid {detail.get('format')}",
        "minimum": lambda: f"must be at least {detail.get('limit')}",
        "maximum": lambda: f"must be at most {detail.get('limit')}",
        "exclusiveMinimum": lambda: f"must be above {detail.get('limit')}",
        "exclusiveMaximum": lambda: f"must be below {detail.get('limit')}",
        "minLength": lambda: f"must have at least {detail.get('limit')} characters",
        "maxLength": lambda: f"must have at most {detail.get('limit')} characters",
        "minItems": lambda: f"must have at least {detail.get('limit')} items",
        "maxItems": lambda: f"must have at most {detail.get('limit')} items",
        "pattern": lambda: "does not match the required pattern",
    }
    text = messages[rule]() if rule in messages else f"fails the schema's {rule} rule"
    return field, rule, text


@dataclass(frozen=True, slots=True)
class ValueRule:
    name: str
    required: bool
    read: Callable[[str], Any]
    type: str
    validator: jsonschema_rs.Validator

    def check(self, location: str, value: str | None) -> Invalid | None:
        label = f"{location} {_echo(self.name)}"
        if value is None:
            return Invalid(location, self.name, "required", f"{label} is required") if self.required else None
        try:
            typed = self.read(value)
        except ValueError:
            return Invalid(location, self.name, "type", f"{label} must be of type {self.type}")
        try:
            self.validator.validate(typed)
        except jsonschema_rs.ValidationError as error:
            _, rule, message = _schema_failure(error)
            return Invalid(location, self.name, rule, f"{label} {message}")
        return None


@dataclass(frozen=True, slots=True)
class BodyRule:
    validator: jsonschema_rs.Validator | None
    max_bytes: int
    allowed: frozenset[str] | None
    optional: bool

    def check(self, body: bytes, content_type: str | None) -> Invalid | None:
        if not body:
            return None if self.optional else Invalid("body", "", "required", "a JSON body is required")
        if len(body) > self.max_bytes:
            # Envoy refuses these itself (with_request_body); here only if it did not.
            return Invalid("body", "", "maxBytes", f"the body is larger than {self.max_bytes} bytes", status=413)
        wrong_type = json_media_type.refusal(content_type)
        if wrong_type is not None:
            return Invalid("header", CONTENT_TYPE, "contentType", wrong_type, status=415)
        try:
            document = strict_json.decode(body)
        except strict_json.BodyRefused as refused:
            field = _pointer(refused.path)
            return Invalid("body", field, refused.rule, f"body {field} {refused.message}" if refused.path else refused.message)
        if self.allowed is not None:
            if not isinstance(document, dict):
                return Invalid("body", "", "type", "the body must be a JSON object")
            for name in document:
                if name not in self.allowed:
                    field = _pointer([name])
                    return Invalid("body", field, "allowedFields", f"body {field} is not an allowed field")
        if self.validator is not None:
            try:
                self.validator.validate(document)
            except jsonschema_rs.ValidationError as error:
                field, rule, message = _schema_failure(error)
                return Invalid("body", field, rule, f"body {field or 'document'} {message}")
            except (ValueError, RecursionError) as exc:
                # strict_json refuses every input known to do this; should another, the
                # request is refused as unchecked (a 500 would pass it under failOpen).
                log.warning("request_validation_failed", error=type(exc).__name__)
                return Invalid("body", "", "json", "the body could not be validated")
        return None


@dataclass(frozen=True, slots=True)
class RequestRules:
    headers: tuple[ValueRule, ...]
    query: tuple[ValueRule, ...]
    body: BodyRule | None

    def check(self, path: str, headers: Mapping[str, str], body: bytes) -> Invalid | None:
        for rule in self.headers:
            failed = rule.check("header", headers.get(rule.name))
            if failed is not None:
                return failed
        if self.query:
            failed = self._query(path.partition("?")[2])
            if failed is not None:
                return failed
        return self.body.check(body, headers.get(CONTENT_TYPE)) if self.body is not None else None

    def _query(self, text: str) -> Invalid | None:
        try:
            pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS)
        except ValueError:
            return Invalid("query", "", "maxFields", f"the query string has more than {MAX_QUERY_FIELDS} parameters")
        values: dict[str, str] = {}
        for name, value in pairs:
            if name in values:
                # The upstream may read the other copy: one value, or none, per checked name.
                if any(rule.name == name for rule in self.query):
                    return Invalid("query", name, "duplicate", f"query {_echo(name)} must be given once")
                continue
            values[name] = value
        for rule in self.query:
            failed = rule.check("query", values.get(rule.name))
            if failed is not None:
                return failed
        return None


class Compiler:
    """Validators by schema text: a policy update compiles only schemas it has not seen
    (about 40 µs each, bench/validation.py), and drops the ones no route uses any more."""

    def __init__(self) -> None:
        self._cache: dict[str, jsonschema_rs.Validator] = {}
        self._used: dict[str, jsonschema_rs.Validator] = {}

    def validator(self, text: str) -> jsonschema_rs.Validator:
        found = self._used.get(text) or self._cache.get(text)
        if found is None:
            try:
                found = compile_schema(json.loads(text))
            except json.JSONDecodeError as exc:
                raise ValueError(f"schema is not JSON: {exc}") from None
        self._used[text] = found
        return found

    def rules(self, route: str, message: policy_pb2.RequestValidation) -> RequestRules:
        """ValueError naming the route and the rule (the update is NACKed) if one cannot be used."""
        try:
            headers = tuple(self._value(rule, lowercase=True) for rule in message.headers)
            query = tuple(self._value(rule, lowercase=False) for rule in message.query)
            body = None
            if message.HasField("body"):
                check = message.body
                body = BodyRule(
                    validator=self.validator(check.schema_json) if check.schema_json else None,
                    max_bytes=check.max_bytes,
                    allowed=frozenset(check.allowed_fields) if check.allowed_fields else None,
                    optional=check.optional,
                )
        except ValueError as exc:
            raise ValueError(f"route {route}: validation: {exc}") from None
        return RequestRules(headers, query, body)

    def _value(self, rule: policy_pb2.ValueCheck, *, lowercase: bool) -> ValueRule:
        kind = rule.type or "string"
        if kind not in READERS:
            raise ValueError(f"{rule.name}: unknown type {kind!r}")
        name = rule.name.lower() if lowercase else rule.name
        return ValueRule(name, rule.required, READERS[kind], kind, self.validator(rule.schema_json or "{}"))

    def begin(self) -> None:
        """Before a table: what a failed one compiled is forgotten."""
        self._used = {}

    def done(self) -> None:
        """After a whole table: keep only what it uses."""
        self._cache, self._used = self._used, {}


class ValidationStep:
    """A route's ``validate`` rules, after its limits and its caller passed (so a caller
    denied its token or its quota learns nothing about the rules). A failure is 400 (415)
    naming the field and the rule; the request still counted against its limits."""

    gives_back = False

    def __init__(self, route: str, rules: RequestRules) -> None:
        self._route = route
        self._rules = rules

    @classmethod
    def for_route(cls, policy: policy_pb2.RoutePolicy, parts: CheckParts) -> ValidationStep | None:
        if not policy.HasField("validation"):
            return None
        compiler = parts.get(Compiler) or Compiler()  # the process's, kept across tables
        return cls(policy.route, compiler.rules(policy.route, policy.validation))

    async def run(self, call: Call) -> bytes | None:
        request = call.request
        invalid = self._rules.check(request.path, request.headers, request.body)
        if invalid is None:
            return None
        metrics.DECISIONS.labels("deny", "invalid_request").inc()
        log.info("request_invalid", route=self._route, location=invalid.location, field=invalid.field, rule=invalid.rule)
        return invalid.answer(call.request_id)
