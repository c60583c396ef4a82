"""Routes → Envoy route entries: matches, actions, retries, headers (virtual_hosts.py groups them).

A route becomes one Envoy route entry per path variant and method group:

- a template ending in ``/**`` also matches its base (``/users/{id}/**`` takes
  ``/users/1``), as ``/a/**`` takes ``/a``;
- with retries, methods are split: idempotent ones get the retry policy, others don't;
  with ``retries.idempotencyKeyHeader``, POST and PATCH carrying that header get it too
  (an entry matching the header's presence, ahead of the unretried rest).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from servicekit.durations import format_duration_ms
from control_plane.model.paths import PathKind, PathPattern, parse_path
from control_plane.model.route import Route
from control_plane.model.match import HeaderMatch
from control_plane.model.retries import IDEMPOTENT_METHODS, KEYED_METHODS, Retries
from control_plane.model.timeouts import PER_TRY_TIMEOUT_MS, REQUEST_TIMEOUT_MS
from control_plane.breakers.board import BreakerState
from control_plane.translator.breaker_phases import breaker_entry, half_open_fallback
from control_plane.translator.http_filters import HTTP_FEATURES
from control_plane.translator.messages import RouteEntry, parse
from control_plane.translator.names import METADATA_NAMESPACE, ClusterRef
from control_plane.translator.settings import GatewaySettings

URI_TEMPLATE_MATCHER = "envoy.path.match.uri_template.uri_template_matcher"
URI_TEMPLATE_MATCH_TYPE = "type.googleapis.com/envoy.extensions.path.match.uri_template.v3.UriTemplateMatchConfig"
URI_TEMPLATE_REWRITER = "envoy.path.rewrite.uri_template.uri_template_rewriter"
URI_TEMPLATE_REWRITE_TYPE = (
    "type.googleapis.com/envoy.extensions.path.rewrite.uri_template.v3.UriTemplateRewriteConfig"
)
PREVIOUS_HOSTS_TYPE = "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"
RETRY_BASE_INTERVAL = "0.025s"
RETRY_MAX_INTERVAL = "0.250s"
_DEFAULT_SETTINGS = GatewaySettings()


def cluster_refs(route: Route) -> list[ClusterRef]:
    """The clusters a route sends traffic to (none for a disabled route)."""
    if route.spec.disabled is not None:
        return []
    return [ClusterRef(route.backend_namespace(b.namespace), b.service, b.port) for b in route.spec.backends]


@dataclass(frozen=True, slots=True)
class _PathVariant:
    match: dict[str, Any]
    rewrite: dict[str, Any]


def _template_match(template: str) -> dict[str, Any]:
    return {
        "path_match_policy": {
            "name": URI_TEMPLATE_MATCHER,
            "typed_config": {"@type": URI_TEMPLATE_MATCH_TYPE, "path_template": template},
        }
    }


def _template_rewrite(template: str) -> dict[str, Any]:
    return {
        "path_rewrite_policy": {
            "name": URI_TEMPLATE_REWRITER,
            "typed_config": {"@type": URI_TEMPLATE_REWRITE_TYPE, "path_template_rewrite": template},
        }
    }


def _segment_prefix(pattern: PathPattern, new_prefix: str | None) -> _PathVariant:
    """``/a/**``: ``/a`` and everything below it; a prefix rewrite swaps ``/a``."""
    if not pattern.literal_prefix:
        rewrite = {"prefix_rewrite": new_prefix.rstrip("/") + "/"} if new_prefix is not None else {}
        return _PathVariant({"prefix": "/"}, rewrite)
    match = {"path_separated_prefix": pattern.literal_prefix}
    if new_prefix is None:
        return _PathVariant(match, {})
    stripped = new_prefix.rstrip("/")
    if stripped:
        return _PathVariant(match, {"prefix_rewrite": stripped})
    # To the root: "/a/x" → "/x" and "/a" → "/"; prefix_rewrite "/" would give "//x".
    pattern_text = "^" + re.escape(pattern.literal_prefix) + "/?"
    return _PathVariant(match, {"regex_rewrite": {"pattern": {"regex": pattern_text}, "substitution": "/"}})


def _path_variants(route: Route) -> list[_PathVariant]:
    spec = route.spec
    new_prefix = spec.rewrite.prefix if spec.rewrite is not None else None
    regex_rewrite: dict[str, Any] = {}
    if spec.rewrite is not None and spec.rewrite.regex is not None:
        regex_rewrite = {
            "regex_rewrite": {"pattern": {"regex": spec.rewrite.regex}, "substitution": spec.rewrite.substitution}
        }
    pattern = route.path
    if pattern is None:
        if spec.match.path_regex is not None:
            return [_PathVariant({"safe_regex": {"regex": spec.match.path_regex}}, regex_rewrite)]
        assert spec.match.path_prefix is not None
        prefix_rewrite = {"prefix_rewrite": new_prefix} if new_prefix is not None else regex_rewrite
        return [_PathVariant({"prefix": spec.match.path_prefix}, prefix_rewrite)]
    if pattern.kind is PathKind.EXACT:
        return [_PathVariant({"path": pattern.text}, {"prefix_rewrite": new_prefix} if new_prefix else regex_rewrite)]
    if pattern.kind is PathKind.SEGMENT_PREFIX:
        variant = _segment_prefix(pattern, new_prefix)
        return [variant if new_prefix is not None else _PathVariant(variant.match, regex_rewrite)]
    templates = [pattern]
    if pattern.glob:
        templates.insert(0, parse_path(pattern.text[: -len("/**")]))
    variants = []
    for template in templates:
        if new_prefix is None:
            variants.append(_PathVariant(_template_match(template.text), regex_rewrite))
        else:
            variants.append(
                _PathVariant(
                    _template_match(template.template_with_named_glob()),
                    _template_rewrite(template.rewrite_template(new_prefix)),
                )
            )
    return variants


def request_timeout_ms(route: Route) -> int:
    """``timeouts.request``, or the gateway's default (10 s) instead of Envoy's 15 s."""
    request = route.spec.timeouts.request
    return request if request is not None else REQUEST_TIMEOUT_MS


def per_try_timeout_ms(route: Route, retried: bool) -> int | None:
    """``timeouts.perTry``; on retried entries without one, 8 s when the request timeout
    leaves room for it (a shorter request timeout bounds the one attempt anyway)."""
    per_try = route.spec.timeouts.per_try
    if per_try is not None or not retried:
        return per_try
    return PER_TRY_TIMEOUT_MS if request_timeout_ms(route) > PER_TRY_TIMEOUT_MS else None


def _header_matcher(header: HeaderMatch) -> dict[str, Any]:
    out: dict[str, Any] = {"name": header.name}
    if header.exact is not None:
        out["string_match"] = {"exact": header.exact}
    elif header.prefix is not None:
        out["string_match"] = {"prefix": header.prefix}
    elif header.regex is not None:
        out["string_match"] = {"safe_regex": {"regex": header.regex}}
    else:
        out["present_match"] = bool(header.present)
    if header.invert:
        out["invert_match"] = True
    return out


def _method_matcher(methods: list[str]) -> dict[str, Any]:
    if len(methods) == 1:
        return {"name": ":method", "string_match": {"exact": methods[0]}}
    return {"name": ":method", "string_match": {"safe_regex": {"regex": "|".join(methods)}}}


def _retry_policy(retries: Retries | None, per_try_ms: int | None) -> dict[str, Any]:
    """A retry policy; with ``retries`` None, only the per-try timeout of the one attempt."""
    policy: dict[str, Any] = {}
    if retries is not None:
        codes = sorted(int(c) for c in retries.retry_on if c.isdigit())
        conditions = [c for c in retries.retry_on if not c.isdigit()]
        if codes:
            conditions.append("retriable-status-codes")
            policy["retriable_status_codes"] = codes
        policy.update(
            {
                "retry_on": ",".join(conditions),
                "num_retries": retries.attempts,
                # Envoy's back-off is exponential with full jitter between these bounds.
                "retry_back_off": {"base_interval": RETRY_BASE_INTERVAL, "max_interval": RETRY_MAX_INTERVAL},
                "retry_host_predicate": [
                    {"name": "envoy.retry_host_predicates.previous_hosts", "typed_config": {"@type": PREVIOUS_HOSTS_TYPE}}
                ],
                "host_selection_retry_max_attempts": "3",
            }
        )
    else:
        policy["num_retries"] = 0
    if per_try_ms is not None:
        policy["per_try_timeout"] = format_duration_ms(per_try_ms)
    return policy


def _headers_to_add(values: dict[str, str]) -> list[dict[str, Any]]:
    # keep_empty_value: `set: {x-user-id: ""}` must blank a client's value, not skip it.
    return [
        {
            "header": {"key": key, "value": value},
            "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
            "keep_empty_value": True,
        }
        for key, value in sorted(values.items())
    ]


def _action(route: Route, rewrite: dict[str, Any], settings: GatewaySettings) -> dict[str, Any]:
    spec = route.spec
    if spec.disabled is not None:
        response: dict[str, Any] = {"status": spec.disabled.status}
        if spec.disabled.body:
            response["body"] = {"inline_string": spec.disabled.body}
        return {"direct_response": response}
    refs = cluster_refs(route)
    action: dict[str, Any] = dict(rewrite)
    if len(refs) == 1:
        action["cluster"] = refs[0].name
    else:
        # Weight-0 backends are left out: no traffic is what the author asked for, and
        # their clusters stay warm for when the weight goes up again.
        action["weighted_clusters"] = {
            "clusters": [{"name": ref.name, "weight": b.weight} for ref, b in zip(refs, spec.backends) if b.weight > 0]
        }
    action["timeout"] = format_duration_ms(request_timeout_ms(route))
    if spec.timeouts.idle is not None:
        action["idle_timeout"] = format_duration_ms(spec.timeouts.idle)
    for feature in HTTP_FEATURES:
        action.update(feature.route_action(route, settings))
    return {"route": action}


@dataclass(frozen=True, slots=True)
class _MethodGroup:
    methods: list[str] | None
    """None matches every method."""
    retried: bool
    key_header: str | None = None
    """Only requests carrying this header (the idempotency key)."""


def _entry(
    route: Route,
    variant: _PathVariant,
    group: _MethodGroup,
    settings: GatewaySettings,
    breaker: BreakerState | None,
    now: float,
) -> list[dict[str, Any]]:
    """The entry, and ahead of it a HALF_OPEN non-probe's fallback entry if it has one."""
    spec = route.spec
    methods, retries = group.methods, group.retried
    match = dict(variant.match)
    headers = [_method_matcher(methods)] if methods else []
    if group.key_header is not None:
        headers.append({"name": group.key_header, "present_match": True})
    headers.extend(_header_matcher(h) for h in spec.match.headers)
    if headers:
        match["headers"] = headers
    entry: dict[str, Any] = {
        "name": route.id,
        "match": match,
        "metadata": {"filter_metadata": {METADATA_NAMESPACE: {"route": route.id, "origin": str(route.origin)}}},
    }
    entry.update(_action(route, variant.rewrite, settings))
    if settings.route_stats:
        # Per-route golden signals (vhost.<host>.route.<namespace>.<name>.upstream_rq_*):
        # every entry of a route shares them.
        entry["stat_prefix"] = route_stat_prefix(route)
    per_filter: dict[str, Any] = {}
    for feature in HTTP_FEATURES:
        config = feature.per_route(route, settings)
        if config is not None:
            per_filter[feature.name] = config
    if per_filter:
        entry["typed_per_filter_config"] = per_filter
    per_try = per_try_timeout_ms(route, retries)
    if "route" in entry and (retries or per_try is not None):
        entry["route"]["retry_policy"] = _retry_policy(spec.retries if retries else None, per_try)
    rules = spec.headers
    if rules.request.set:
        entry["request_headers_to_add"] = _headers_to_add(rules.request.set)
    removed = [*rules.request.remove, *(name for feature in HTTP_FEATURES for name in feature.removed_upstream(route, settings))]
    if removed:
        entry["request_headers_to_remove"] = removed
    if rules.response.set:
        entry["response_headers_to_add"] = _headers_to_add(rules.response.set)
    if rules.response.remove:
        entry["response_headers_to_remove"] = list(rules.response.remove)
    if breaker is None:
        return [entry]
    fallback = half_open_fallback(route, breaker, now, entry)
    breaker_entry(route, breaker, now, entry)
    return [entry] if fallback is None else [fallback, entry]


def route_stat_prefix(route: Route) -> str:
    """The route id with no '.', which Envoy's stat tag extraction would split at."""
    return route.id.replace(".", "_")


def _method_groups(route: Route) -> list[_MethodGroup]:
    """The method groups of a route, in match order."""
    spec = route.spec
    methods: list[str] = list(spec.match.methods)
    if spec.disabled is not None or spec.retries is None or spec.retries.attempts == 0:
        return [_MethodGroup(methods or None, False)]
    key_header = spec.retries.idempotency_key_header
    idempotent = [m for m in (methods or IDEMPOTENT_METHODS) if m in IDEMPOTENT_METHODS]
    keyed = [m for m in (methods or KEYED_METHODS) if m in KEYED_METHODS] if key_header is not None else []
    groups: list[_MethodGroup] = []
    if idempotent:
        groups.append(_MethodGroup(idempotent, True))
    if keyed:
        groups.append(_MethodGroup(keyed, True, key_header))
    if not methods:
        groups.append(_MethodGroup(None, False))
    else:
        other = [m for m in methods if m not in idempotent]
        if other:
            groups.append(_MethodGroup(other, False))
    return groups


def route_entries(
    route: Route,
    settings: GatewaySettings = _DEFAULT_SETTINGS,
    breaker: BreakerState | None = None,
    now: float = 0.0,
) -> list[RouteEntry]:
    """The Envoy route entries for one route, in match order; ``breaker`` is an OPEN or
    HALF_OPEN breaker's state (see breaker_phases.effective_phase), ``now`` the time of translation."""
    return [
        parse(RouteEntry, entry)
        for variant in _path_variants(route)
        for group in _method_groups(route)
        for entry in _entry(route, variant, group, settings, breaker, now)
    ]
