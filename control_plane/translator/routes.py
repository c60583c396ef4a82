"""Routes → Envoy route entries, virtual hosts and the one RouteConfiguration.

A route becomes one Envoy route entry, or two when it has retries and can match
non-idempotent methods: the idempotent methods get the retry policy, the rest do not.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from control_plane.model.durations import format_duration_ms
from control_plane.model.paths import PathKind
from control_plane.model.route import Route
from control_plane.model.schema import IDEMPOTENT_METHODS, HeaderMatch, Retries
from control_plane.translator.messages import RouteConfiguration, RouteEntry, parse
from control_plane.translator.names import METADATA_NAMESPACE, ROUTE_CONFIG_NAME, ClusterRef

URI_TEMPLATE_MATCHER = "envoy.path.match.uri_template.uri_template_matcher"
URI_TEMPLATE_MATCH_TYPE = "type.googleapis.com/envoy.extensions.path.match.uri_template.v3.UriTemplateMatchConfig"
URI_TEMPLATE_REWRITER = "envoy.path.rewrite.uri_template.uri_template_rewriter"
URI_TEMPLATE_REWRITE_TYPE = (
    "type.googleapis.com/envoy.extensions.path.rewrite.uri_template.v3.UriTemplateRewriteConfig"
)
PREVIOUS_HOSTS_TYPE = "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"
RETRY_BASE_INTERVAL = "0.025s"
RETRY_MAX_INTERVAL = "0.250s"
ANY_HOST = "*"


def cluster_refs(route: Route) -> list[ClusterRef]:
    return [ClusterRef(route.backend_namespace(b.namespace), b.service, b.port) for b in route.spec.backends]


def _path_match(route: Route) -> dict[str, Any]:
    match = route.spec.match
    pattern = route.path
    if pattern is not None:
        if pattern.kind is PathKind.EXACT:
            return {"path": pattern.text}
        if pattern.kind is PathKind.SEGMENT_PREFIX:
            if not pattern.literal_prefix:
                return {"prefix": "/"}
            return {"path_separated_prefix": pattern.literal_prefix}
        rewriting = route.spec.rewrite is not None and route.spec.rewrite.prefix is not None
        template = pattern.template_with_named_glob() if rewriting else pattern.text
        return {
            "path_match_policy": {
                "name": URI_TEMPLATE_MATCHER,
                "typed_config": {"@type": URI_TEMPLATE_MATCH_TYPE, "path_template": template},
            }
        }
    if match.path_regex is not None:
        return {"safe_regex": {"regex": match.path_regex}}
    assert match.path_prefix is not None
    return {"prefix": match.path_prefix}


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


def _retry_policy(retries: Retries, per_try_ms: int | None) -> dict[str, Any]:
    codes = sorted(int(c) for c in retries.on if c.isdigit())
    conditions = [c for c in retries.on if not c.isdigit()]
    if codes:
        conditions.append("retriable-status-codes")
    policy: dict[str, Any] = {
        "retry_on": ",".join(conditions),
        "num_retries": retries.attempts,
        # Envoy's back-off is exponential with full jitter between these bounds.
        "retry_back_off": {"base_interval": RETRY_BASE_INTERVAL, "max_interval": RETRY_MAX_INTERVAL},
        "retry_host_predicate": [
            {
                "name": "envoy.retry_host_predicates.previous_hosts",
                "typed_config": {"@type": PREVIOUS_HOSTS_TYPE},
            }
        ],
        "host_selection_retry_max_attempts": "3",
    }
    if codes:
        policy["retriable_status_codes"] = codes
    if per_try_ms is not None:
        policy["per_try_timeout"] = format_duration_ms(per_try_ms)
    return policy


def _headers_to_add(values: dict[str, str]) -> list[dict[str, Any]]:
    return [
        {"header": {"key": key, "value": value}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}
        for key, value in sorted(values.items())
    ]


def _action(route: Route) -> dict[str, Any]:
    spec = route.spec
    if spec.disabled is not None:
        response: dict[str, Any] = {"status": spec.disabled.status}
        if spec.disabled.body:
            response["body"] = {"inline_string": spec.disabled.body}
        return {"direct_response": response}
    refs = cluster_refs(route)
    action: dict[str, Any] = {}
    live = [(ref, b.weight) for ref, b in zip(refs, spec.backends) if b.weight > 0]
    if len(refs) == 1:
        action["cluster"] = refs[0].name
    else:
        # Weight-0 backends are left out: Envoy's weighted_clusters rejects a 0 weight in
        # some versions, and "no traffic" is what the author asked for either way.
        action["weighted_clusters"] = {
            "clusters": [{"name": ref.name, "weight": weight} for ref, weight in live]
        }
    if spec.timeouts.request is not None:
        action["timeout"] = format_duration_ms(spec.timeouts.request)
    if spec.timeouts.idle is not None:
        action["idle_timeout"] = format_duration_ms(spec.timeouts.idle)
    rewrite = spec.rewrite
    if rewrite is not None:
        pattern = route.path
        if rewrite.regex is not None:
            action["regex_rewrite"] = {"pattern": {"regex": rewrite.regex}, "substitution": rewrite.substitution}
        elif pattern is not None and pattern.kind is PathKind.TEMPLATE:
            assert rewrite.prefix is not None
            action["path_rewrite_policy"] = {
                "name": URI_TEMPLATE_REWRITER,
                "typed_config": {
                    "@type": URI_TEMPLATE_REWRITE_TYPE,
                    "path_template_rewrite": pattern.rewrite_template(rewrite.prefix),
                },
            }
        else:
            action["prefix_rewrite"] = rewrite.prefix
    return {"route": action}


def _entry(route: Route, methods: list[str] | None, retries: bool) -> dict[str, Any]:
    spec = route.spec
    match = _path_match(route)
    headers = [_method_matcher(methods)] if methods else []
    headers.extend(_header_matcher(h) for h in spec.match.headers)
    if headers:
        match["headers"] = headers
    entry: dict[str, Any] = {
        "name": route.id,
        "match": match,
        "metadata": {"filter_metadata": {METADATA_NAMESPACE: {"route": route.id, "origin": str(route.origin)}}},
    }
    entry.update(_action(route))
    if retries and spec.retries is not None and "route" in entry:
        entry["route"]["retry_policy"] = _retry_policy(spec.retries, spec.timeouts.per_try)
    rules = spec.headers
    if rules.request.set:
        entry["request_headers_to_add"] = _headers_to_add(rules.request.set)
    if rules.request.remove:
        entry["request_headers_to_remove"] = list(rules.request.remove)
    if rules.response.set:
        entry["response_headers_to_add"] = _headers_to_add(rules.response.set)
    if rules.response.remove:
        entry["response_headers_to_remove"] = list(rules.response.remove)
    return entry


def route_entries(route: Route) -> list[RouteEntry]:
    """The Envoy route entries for one route, in match order."""
    spec = route.spec
    methods: list[str] = list(spec.match.methods)
    if spec.disabled is not None or spec.retries is None or spec.retries.attempts == 0:
        return [parse(RouteEntry, _entry(route, methods, retries=False))]
    candidates: list[str] | None = methods or None
    if candidates is None:
        idempotent: list[str] = list(IDEMPOTENT_METHODS)
        other: list[str] | None = None
    else:
        idempotent = [m for m in candidates if m in IDEMPOTENT_METHODS]
        other = [m for m in candidates if m not in IDEMPOTENT_METHODS]
    entries = [parse(RouteEntry, _entry(route, idempotent, retries=True))]
    if other is None or other:
        entries.append(parse(RouteEntry, _entry(route, other, retries=False)))
    return entries


def _hosts(route: Route) -> list[str]:
    hosts = [h for h in route.spec.hosts if h != ANY_HOST]
    return hosts if len(hosts) == len(route.spec.hosts) else []


def route_configuration(ordered: list[Route], entries: dict[Route, list[RouteEntry]]) -> RouteConfiguration:
    """One virtual host per named host, plus "*"; host-less routes join every virtual host.

    Envoy picks a single virtual host by the most specific domain, so a host-less route
    must also be present in each named host's virtual host to stay reachable there.
    """
    by_host: dict[str, list[Route]] = defaultdict(list)
    anywhere: list[Route] = []
    for route in ordered:
        hosts = _hosts(route)
        if not hosts:
            anywhere.append(route)
        for host in hosts:
            by_host[host].append(route)
    config = RouteConfiguration(name=ROUTE_CONFIG_NAME)
    config.validate_clusters.value = False
    position = {route: index for index, route in enumerate(ordered)}
    for host in sorted(by_host):
        members = sorted(by_host[host] + anywhere, key=position.__getitem__)
        _add_virtual_host(config, _vhost_name(host), [host], members, entries)
    _add_virtual_host(config, "any", [ANY_HOST], anywhere, entries)
    return config


def _vhost_name(host: str) -> str:
    return "host:" + host


def _add_virtual_host(
    config: RouteConfiguration,
    name: str,
    domains: list[str],
    members: list[Route],
    entries: dict[Route, list[RouteEntry]],
) -> None:
    vhost = config.virtual_hosts.add(name=name, domains=domains)
    for route in members:
        vhost.routes.extend(entries[route])

