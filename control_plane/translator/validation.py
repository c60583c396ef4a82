"""A route's ``validate:`` in Envoy and in its policy: the checks ride on the route's one
HTTP ext_authz call (docs/validation.md says why each runs there).

- The rules travel in the route's ``RoutePolicy.validation`` (schemas as JSON text); the
  Authorization service compiles them when the policy arrives.
- A body rule makes Envoy send the body with the check for this route only: the
  per-route ``check_settings.with_request_body`` with the route's ``maxBytes`` and
  ``allow_partial_message: false``, so a longer body is Envoy's own 413 (the gateway's
  ``request_body_too_large`` JSON) and reaches neither the service nor the upstream. Other
  routes buffer nothing.
- A public route with ``validate`` takes the main ext_authz filter (``auth.public`` in its
  policy; no token is read), which also decides its limits: one call, and the filter's
  fail-closed policy (``extAuthz.failOpen``), since a request that cannot be checked
  must not pass as checked.

A route whose rules Envoy could not deliver is refused with the reason: validation
needs ``extAuthz.protocol: http``, and a header rule needs its header forwarded to the
check (``extAuthz.forwardHeaders``), as a ``header:`` rate-limit key does.
"""

from __future__ import annotations

import json
from typing import Any

from control_plane.model.route import Route
from control_plane.model.validation import Validation
from control_plane.translator.check_headers import HTTP_FORWARDED_HEADERS, forwarded_to_check
from control_plane.translator.check_plan import CheckPlan
from control_plane.translator.feature import HttpFeature
from control_plane.translator.settings import GatewaySettings
from servicekit.protos.gatehouse.policy.v1 import policy_pb2

ALWAYS_FORWARDED = (*HTTP_FORWARDED_HEADERS, "host", "content-length")
"""Headers the HTTP check always receives: what the filter forwards, and what Envoy always sends."""


def _json(schema: dict[str, Any]) -> str:
    return json.dumps(schema, separators=(",", ":"), sort_keys=True)


def rules_of(route: Route) -> Validation | None:
    """The rules that apply: none on a disabled route (it answers without an upstream)."""
    return route.spec.validate_ if route.spec.disabled is None else None


def validation_policy(rules: Validation) -> policy_pb2.RequestValidation:
    message = policy_pb2.RequestValidation()
    for header in rules.headers:
        message.headers.add(name=header.name, required=header.required, type="string", schema_json=_json(header.value_schema()))
    for param in rules.query:
        message.query.add(name=param.name, required=param.required, type=param.type, schema_json=_json(param.value_schema()))
    if rules.body is not None:
        body = rules.body
        message.body.SetInParent()
        message.body.schema_json = _json(body.json_schema) if body.json_schema is not None else ""
        message.body.max_bytes = body.max_bytes
        message.body.allowed_fields.extend(body.allowed_fields or ())
        message.body.optional = not body.required
    return message


def body_check_settings(route: Route) -> dict[str, Any]:
    """The per-route ``check_settings`` fields for the route's body (none without a body rule)."""
    rules = rules_of(route)
    if rules is None or rules.body is None:
        return {}
    return {"with_request_body": {"max_request_bytes": rules.body.max_bytes, "allow_partial_message": False}}


def refusals(route: Route, settings: GatewaySettings) -> list[str]:
    """Why the route's rules could not be enforced here (the route is then refused)."""
    rules = rules_of(route)
    if rules is None:
        return []
    authz = settings.ext_authz
    if authz is None or authz.protocol != "http":
        why = "the gateway has no extAuthz" if authz is None else f"extAuthz.protocol is {authz.protocol}"
        return [
            f"validate: request validation runs in the HTTP authorization check, and {why}; "
            "set extAuthz.protocol: http (Helm: extAuthz.enabled=true, extAuthz.protocol=http)"
        ]
    forwarded = forwarded_to_check(authz, ALWAYS_FORWARDED)
    return [
        f"validate.headers[{index}].name: {header.name}: the authorization check would never see this header; "
        f"add {header.name} to extAuthz.forwardHeaders"
        for index, header in enumerate(rules.headers)
        if header.name not in forwarded
    ]


class RequestValidation(HttpFeature):
    """No filter of its own (the checks ride on ext_authz's, see ``ext_authz.per_route``):
    this hook only refuses a route whose rules Envoy could not deliver."""

    name = "gatehouse.request_validation"

    def check_policy(self, route: Route, settings: GatewaySettings, plan: CheckPlan, policy: policy_pb2.RoutePolicy) -> None:
        rules = rules_of(route)
        if rules is not None:
            policy.validation.CopyFrom(validation_policy(rules))

    def refusals(self, route: Route, settings: GatewaySettings) -> list[str]:
        return refusals(route, settings)
