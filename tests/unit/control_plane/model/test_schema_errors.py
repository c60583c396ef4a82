"""Every validation rule of the route schema, as the author sees it: `file:line: field: reason`.

The table is keyed by case name. Each case is a whole route file and the text that
must appear in the one problem it produces: the file name, the line number, the
field path and the reason. Line numbers are absolute in the file, so the helpers
below keep the header at fixed lines:

    1 apiVersion   2 kind   3 metadata   4 spec:   5.. spec body
"""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.model import Origin, Route, duplicate_problems, parse_route_file
from servicekit.durations import parse_duration_ms
from control_plane.sources.files import load_route_path

FILE = "routes/orders.yaml"
HEADER = "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: orders, namespace: shop}\nspec:\n"
BACKEND = "  backends: [{service: order-service, port: 8080}]"


def spec(*lines: str) -> str:
    """A route file whose spec body starts at line 5, one argument per line."""
    return HEADER + "".join(line + "\n" for line in lines)


def route(*lines: str) -> str:
    """Like spec(), with `match: {path: /orders}` on line 5 and the backend on line 6."""
    return spec("  match: {path: /orders}", BACKEND, *lines)


def matching(match: str, *lines: str) -> str:
    """A route with `match: <match>` on line 5 and the backend on line 6."""
    return spec(f"  match: {match}", BACKEND, *lines)


def top(*lines: str) -> str:
    """A document given line by line from line 1 (for the header fields themselves)."""
    return "".join(line + "\n" for line in lines)


GOOD_SPEC = "spec: {match: {path: /orders}, backends: [{service: order-service, port: 8080}]}"

Expected = str | tuple[str, ...]

# case name -> (route file, text the rendered problem must contain (all of them, if a tuple))
CASES: dict[str, tuple[str, Expected]] = {
    # --- strictness ---------------------------------------------------------------------
    "unknown field in spec": (route("  bogus: 1"), f"{FILE}:7: spec.bogus: unknown field"),
    "unknown field in match": (
        matching("{path: /orders, method: [GET]}"),
        f"{FILE}:5: spec.match.method: unknown field",
    ),
    "unknown field in backend": (
        spec("  match: {path: /orders}", "  backends: [{service: order-service, port: 8080, wieght: 5}]"),
        f"{FILE}:6: spec.backends[0].wieght: unknown field",
    ),
    "unknown top-level field": (HEADER.replace("spec:\n", "") + GOOD_SPEC + "\nstatus: {}\n", f"{FILE}:5: status: unknown field"),
    "no type coercion for a port": (
        spec("  match: {path: /orders}", '  backends: [{service: order-service, port: "8080"}]'),
        f"{FILE}:6: spec.backends[0].port: Input should be a valid integer",
    ),
    "hosts must be a list": (
        route("  hosts: api.example.com"),
        f"{FILE}:7: spec.hosts: Input should be a valid list",
    ),
    # --- header fields ------------------------------------------------------------------
    "wrong apiVersion": (
        top("apiVersion: gatehouse.io/v1", "kind: Route", "metadata: {name: orders}", GOOD_SPEC),
        f"{FILE}:1: apiVersion: Input should be 'gatehouse.io/v1alpha1'",
    ),
    "wrong kind": (
        top("apiVersion: gatehouse.io/v1alpha1", "kind: HTTPRoute", "metadata: {name: orders}", GOOD_SPEC),
        f"{FILE}:2: kind: Input should be 'Route'",
    ),
    "missing kind": (
        top("apiVersion: gatehouse.io/v1alpha1", "metadata: {name: orders}", GOOD_SPEC),
        f"{FILE}:1: kind: required field is missing",
    ),
    "missing metadata.name": (
        top("apiVersion: gatehouse.io/v1alpha1", "kind: Route", "metadata: {namespace: shop}", GOOD_SPEC),
        f"{FILE}:3: metadata.name: required field is missing",
    ),
    "uppercase name": (
        top("apiVersion: gatehouse.io/v1alpha1", "kind: Route", "metadata: {name: Orders}", GOOD_SPEC),
        f"{FILE}:3: metadata.name: 'Orders' is not a valid name",
    ),
    "namespace with a dot": (
        top("apiVersion: gatehouse.io/v1alpha1", "kind: Route", "metadata: {name: orders, namespace: a.b}", GOOD_SPEC),
        f"{FILE}:3: metadata.namespace: 'a.b' is not a DNS label",
    ),
    # --- match: which path kind ---------------------------------------------------------
    "missing match": (spec(BACKEND), f"{FILE}:5: spec.match: required field is missing"),
    "two path kinds": (
        matching("{path: /orders, pathPrefix: /orders}"),
        (f"{FILE}:5: spec.match: set exactly one of path, pathPrefix, pathRegex", "['path', 'pathPrefix']"),
    ),
    "no path kind": (
        matching("{methods: [GET]}"),
        f"{FILE}:5: spec.match: set exactly one of path, pathPrefix, pathRegex (got none)",
    ),
    "pathPrefix without a leading slash": (
        matching("{pathPrefix: orders}"),
        f"{FILE}:5: spec.match.pathPrefix: 'orders' must start with '/'",
    ),
    # --- match.path mini-language -------------------------------------------------------
    "path without a leading slash": (matching("{path: orders}"), f"{FILE}:5: spec.match.path: 'orders' must start with '/'"),
    "path with a trailing slash": (
        matching("{path: /orders/}"),
        f"{FILE}:5: spec.match.path: '/orders/' must not end with '/' (use '/**' to match below it)",
    ),
    "path with an empty segment": (matching("{path: /a//b}"), f"{FILE}:5: spec.match.path: '/a//b' has an empty segment"),
    "path with a query": (
        matching("{path: '/orders?id=1'}"),
        f"{FILE}:5: spec.match.path: '/orders?id=1' must not contain a query or fragment",
    ),
    "variable inside a segment": (
        matching("{path: '/orders/id-{id}'}"),
        f"{FILE}:5: spec.match.path: '/orders/id-{{id}}': segment 'id-{{id}}' must be a literal or a whole {{name}} variable",
    ),
    "unclosed variable": (
        matching("{path: '/orders/{id'}"),
        f"{FILE}:5: spec.match.path: '/orders/{{id': segment '{{id' must be a literal or a whole {{name}} variable",
    ),
    "variable name starting with a digit": (
        matching("{path: '/orders/{1d}'}"),
        f"{FILE}:5: spec.match.path: '/orders/{{1d}}': segment '{{1d}}' must be a literal or a whole {{name}} variable",
    ),
    "variable used twice": (
        matching("{path: '/a/{id}/b/{id}'}"),
        f"{FILE}:5: spec.match.path: '/a/{{id}}/b/{{id}}': variable {{id}} appears twice",
    ),
    "variable name too long": (
        matching("{path: '/a/{abcdefghijklmnopq}'}"),
        f"{FILE}:5: spec.match.path: '/a/{{abcdefghijklmnopq}}': variable {{abcdefghijklmnopq}} is longer than 16 characters",
    ),
    "reserved variable name": (
        matching("{path: '/a/{gh_rest}'}"),
        f"{FILE}:5: spec.match.path: '/a/{{gh_rest}}': variable name gh_rest is reserved",
    ),
    "glob not last": (
        matching("{path: '/a/**/b'}"),
        f"{FILE}:5: spec.match.path: '/a/**/b': '**' may only be the last segment",
    ),
    "single star": (
        matching("{path: '/a/*'}"),
        f"{FILE}:5: spec.match.path: '/a/*': segment '*': '*' is only allowed as a trailing '/**'",
    ),
    "glob inside a segment": (
        matching("{path: '/a/b**'}"),
        f"{FILE}:5: spec.match.path: '/a/b**': segment 'b**': '*' is only allowed as a trailing '/**'",
    ),
    "too many variables": (
        matching("{path: '/{a}/{b}/{c}/{d}/{e}/{f}'}"),
        f"{FILE}:5: spec.match.path: '/{{a}}/{{b}}/{{c}}/{{d}}/{{e}}/{{f}}' has 6 variables; Envoy allows at most 5",
    ),
    "character not allowed in a path": (
        matching("{path: '/a^b'}"),
        f"{FILE}:5: spec.match.path: '/a^b': segment 'a^b' has characters not allowed in a URL path",
    ),
    # --- regexes: compiled by RE2 itself, with Envoy's program-size limit -----------------
    "regex with lookahead": (
        matching("{pathRegex: '/orders/(?=[0-9])'}"),
        f"{FILE}:5: spec.match.pathRegex: '/orders/(?=[0-9])' is not a valid RE2 regex: invalid perl operator: (?=",
    ),
    "regex with negative lookbehind": (
        matching("{pathRegex: '/orders(?<!x)'}"),
        f"{FILE}:5: spec.match.pathRegex: '/orders(?<!x)' is not a valid RE2 regex: invalid perl operator: (?<!",
    ),
    "regex with backreference": (
        matching(r"{pathRegex: '/(a+)/\1'}"),
        f"{FILE}:5: spec.match.pathRegex: '/(a+)/\\\\1' is not a valid RE2 regex: invalid escape sequence: \\1",
    ),
    "regex with named backreference": (
        matching("{pathRegex: '/(?P<x>a)(?P=x)'}"),
        f"{FILE}:5: spec.match.pathRegex: '/(?P<x>a)(?P=x)' is not a valid RE2 regex: invalid perl operator: (?P",
    ),
    "regex with atomic group": (
        matching("{pathRegex: '/(?>ab)'}"),
        f"{FILE}:5: spec.match.pathRegex: '/(?>ab)' is not a valid RE2 regex: invalid perl operator: (?>",
    ),
    "regex with possessive quantifier": (
        matching("{pathRegex: '/a*+'}"),
        f"{FILE}:5: spec.match.pathRegex: '/a*+' is not a valid RE2 regex: bad repetition operator: *+",
    ),
    # Python's `re` accepts these three; RE2 refuses them, and so would Envoy (a NACK).
    "python-only \\Z anchor": (
        matching(r"{pathRegex: '/orders\Z'}"),
        f"{FILE}:5: spec.match.pathRegex: '/orders\\\\Z' is not a valid RE2 regex: invalid escape sequence: \\Z",
    ),
    "python-only (?#comment)": (
        matching("{pathRegex: '/orders(?#id)'}"),
        f"{FILE}:5: spec.match.pathRegex: '/orders(?#id)' is not a valid RE2 regex: invalid perl operator: (?#",
    ),
    "python-only conditional group": (
        matching("{pathRegex: '/(a)?(?(1)b|c)'}"),
        f"{FILE}:5: spec.match.pathRegex: '/(a)?(?(1)b|c)' is not a valid RE2 regex: invalid perl operator: (?(",
    ),
    "regex that does not compile": (
        matching("{pathRegex: '/orders/(['}"),
        f"{FILE}:5: spec.match.pathRegex: '/orders/([' is not a valid RE2 regex: missing ]: [",
    ),
    "header regex with lookahead": (
        matching("{path: /orders, headers: [{name: x-client, regex: '(?!web)'}]}"),
        f"{FILE}:5: spec.match.headers[0].regex: '(?!web)' is not a valid RE2 regex: invalid perl operator: (?!",
    ),
    "python-only comment in a header regex": (
        matching("{path: /orders, headers: [{name: x-id, regex: '[0-9]+(?#digits)'}]}"),
        f"{FILE}:5: spec.match.headers[0].regex: '[0-9]+(?#digits)' is not a valid RE2 regex: invalid perl operator: (?#",
    ),
    "rewrite regex with backreference": (
        route(r"  rewrite: {regex: '(a)\1', substitution: /x}"),
        f"{FILE}:7: spec.rewrite.regex: '(a)\\\\1' is not a valid RE2 regex: invalid escape sequence: \\1",
    ),
    "python-only conditional group in rewrite.regex": (
        route("  rewrite: {regex: '^(/v1)?(?(1)/a|/b)', substitution: /c}"),
        f"{FILE}:7: spec.rewrite.regex: '^(/v1)?(?(1)/a|/b)' is not a valid RE2 regex: invalid perl operator: (?(",
    ),
    # Envoy refuses a regex whose RE2 program is bigger than 100 (re2.max_program_size.error_level).
    "pathRegex too complex for Envoy": (
        matching("{pathRegex: '/(ab|cd){16}'}"),
        f"{FILE}:5: spec.match.pathRegex: '/(ab|cd){{16}}' is too complex for Envoy: RE2 program size 101 exceeds 100",
    ),
    "header regex too complex for Envoy": (
        matching("{path: /orders, headers: [{name: x-id, regex: '(ab|cd){16}e'}]}"),
        f"{FILE}:5: spec.match.headers[0].regex: '(ab|cd){{16}}e' is too complex for Envoy: RE2 program size 101 exceeds 100",
    ),
    "rewrite regex too complex for Envoy": (
        route("  rewrite: {regex: '^/(ab|cd){16}e', substitution: /x}"),
        f"{FILE}:7: spec.rewrite.regex: '^/(ab|cd){{16}}e' is too complex for Envoy: RE2 program size",
    ),
    # --- methods and headers ------------------------------------------------------------
    "unknown method": (
        matching("{path: /orders, methods: [FETCH]}"),
        f"{FILE}:5: spec.match.methods[0]: Input should be 'GET', 'HEAD'",
    ),
    "lowercase method": (matching("{path: /orders, methods: [GET, post]}"), f"{FILE}:5: spec.match.methods[1]: Input should be"),
    "method listed twice": (
        matching("{path: /orders, methods: [GET, GET]}"),
        f"{FILE}:5: spec.match.methods: 'GET' is listed twice",
    ),
    "uppercase header name in a matcher": (
        matching("{path: /orders, headers: [{name: X-Client, exact: mobile}]}"),
        f"{FILE}:5: spec.match.headers[0].name: 'X-Client' is not a lowercase HTTP header name",
    ),
    "header matcher with two kinds": (
        matching("{path: /orders, headers: [{name: x-client, exact: a, prefix: b}]}"),
        f"{FILE}:5: spec.match.headers[0]: set exactly one of exact, prefix, regex, present (got ['exact', 'prefix'])",
    ),
    "header matcher with no kind": (
        matching("{path: /orders, headers: [{name: x-client}]}"),
        f"{FILE}:5: spec.match.headers[0]: set exactly one of exact, prefix, regex, present (got none)",
    ),
    "LF in a header match value": (
        matching('{path: /orders, headers: [{name: x-client, exact: "a\\nb"}]}'),
        f"{FILE}:5: spec.match.headers[0].exact: header values must not contain CR, LF or NUL",
    ),
    "CR LF in a header value to set": (
        route("  headers:", '    request: {set: {x-api: "v2\\r\\nx-evil: 1"}}'),
        f"{FILE}:8: spec.headers.request.set.x-api: header values must not contain CR, LF or NUL",
    ),
    "NUL in a response header value": (
        route("  headers:", '    response: {set: {x-api: "v2\\0"}}'),
        f"{FILE}:8: spec.headers.response.set.x-api: header values must not contain CR, LF or NUL",
    ),
    "setting host": (
        route("  headers:", "    request: {set: {host: evil.example.com}}"),
        (f"{FILE}:8: spec.headers.request.set.host", "host is what the gateway vouches for to the upstream; a route cannot change it"),
    ),
    "removing host": (
        route("  headers:", "    request: {remove: [host]}"),
        f"{FILE}:8: spec.headers.request.remove[0]: host is what the gateway vouches for",
    ),
    "setting an identity header": (
        route("  headers:", "    request: {set: {x-user-id: alice}}"),
        f"{FILE}:8: spec.headers.request.set.x-user-id (the key): x-user-id is an identity header: only the authorization check sets it",
    ),
    "removing a verified identity": (
        route("  headers:", "    request: {remove: [x-scope]}"),
        f"{FILE}:8: spec.headers.request.remove[0]: x-scope is an identity header",
    ),
    "setting authorization": (
        route("  headers:", "    request: {set: {authorization: Bearer x}}"),
        f"{FILE}:8: spec.headers.request.set.authorization (the key): authorization is what the gateway vouches for",
    ),
    "setting an internal header": (
        route("  headers:", "    request: {set: {x-gatehouse-route: shop/admin}}"),
        f"{FILE}:8: spec.headers.request.set.x-gatehouse-route (the key): x-gatehouse-route is internal to the gateway",
    ),
    "forging the client address": (
        route("  headers:", "    request: {set: {x-forwarded-for: 10.0.0.1}}"),
        f"{FILE}:8: spec.headers.request.set.x-forwarded-for (the key): x-forwarded-for is what the gateway vouches for",
    ),
    "matching on an identity header": (
        matching("{path: /a, headers: [{name: x-user-role, exact: admin}]}"),
        f"{FILE}:5: spec.match.headers[0].name: x-user-role is an identity header, and a route is chosen before the client's copy is removed",
    ),
    "uppercase header name to remove": (
        route("  headers:", "    response: {remove: [X-Internal-Trace-Id]}"),
        f"{FILE}:8: spec.headers.response.remove[0]: 'X-Internal-Trace-Id' is not a lowercase HTTP header name",
    ),
    "uppercase header name to set": (
        route("  headers:", "    response: {set: {X-Route: orders}}"),
        (f"{FILE}:8: spec.headers.response.set.X-Route", "'X-Route' is not a lowercase HTTP header name"),
    ),
    "header removed twice": (
        route("  headers:", "    response: {remove: [x-a, x-a]}"),
        f"{FILE}:8: spec.headers.response.remove: 'x-a' is listed twice",
    ),
    # --- hosts --------------------------------------------------------------------------
    "uppercase host": (
        route("  hosts: [API.example.com]"),
        f"{FILE}:7: spec.hosts[0]: 'API.example.com' is not a lowercase DNS name",
    ),
    "host with a port": (route("  hosts: ['api.example.com:443']"), f"{FILE}:7: spec.hosts[0]: 'api.example.com:443' is not a lowercase DNS name"),
    "host with an inner wildcard": (route("  hosts: ['api.*.com']"), f"{FILE}:7: spec.hosts[0]: 'api.*.com' is not a lowercase DNS name"),
    "host with an underscore": (route("  hosts: [api_1.example.com]"), f"{FILE}:7: spec.hosts[0]: 'api_1.example.com' is not"),
    "host listed twice": (
        route("  hosts: [a.example.com, b.example.com, a.example.com]"),
        f"{FILE}:7: spec.hosts: 'a.example.com' is listed twice",
    ),
    # --- backends -----------------------------------------------------------------------
    "negative weight": (
        spec("  match: {path: /orders}", "  backends: [{service: order-service, port: 8080, weight: -1}]"),
        f"{FILE}:6: spec.backends[0].weight: Input should be greater than or equal to 0",
    ),
    "weight above a million": (
        spec("  match: {path: /orders}", "  backends:", "    - {service: a, port: 80}", "    - {service: b, port: 80, weight: 1000001}"),
        f"{FILE}:8: spec.backends[1].weight: Input should be less than or equal to 1000000",
    ),
    "all weights 0": (
        spec("  match: {path: /orders}", "  backends:", "    - {service: a, port: 80, weight: 0}", "    - {service: b, port: 80, weight: 0}"),
        f"{FILE}:7: spec.backends: at least one backend needs a weight above 0",
    ),
    "no backends and not disabled": (
        spec("  match: {path: /orders}"),
        f"{FILE}:5: spec.backends: at least one backend is required (or set disabled)",
    ),
    # A duplicate backend is reported at the repeated backend's own line.
    "duplicate backend": (
        spec("  match: {path: /orders}", "  backends:", "    - {service: a, port: 80, weight: 1}", "    - {service: a, port: 80, weight: 3}"),
        f"{FILE}:8: spec.backends[1]: shop/a:80 is listed twice",
    ),
    # An explicit namespace equal to the route's is the same cluster as no namespace.
    "duplicate backend spelled with and without namespace": (
        spec("  match: {path: /orders}", "  backends:", "    - {service: a, port: 80}", "    - {service: a, port: 80, namespace: shop}"),
        f"{FILE}:8: spec.backends[1]: shop/a:80 is listed twice",
    ),
    "duplicate backend in another namespace": (
        spec(
            "  match: {path: /orders}",
            "  backends:",
            "    - {service: a, port: 80, namespace: billing}",
            "    - {service: a, port: 80}",
            "    - {service: a, port: 80, namespace: billing}",
        ),
        f"{FILE}:9: spec.backends[2]: billing/a:80 is listed twice",
    ),
    "port 0": (
        spec("  match: {path: /orders}", "  backends: [{service: a, port: 0}]"),
        f"{FILE}:6: spec.backends[0].port: Input should be greater than or equal to 1",
    ),
    "port above 65535": (
        spec("  match: {path: /orders}", "  backends: [{service: a, port: 65536}]"),
        f"{FILE}:6: spec.backends[0].port: Input should be less than or equal to 65535",
    ),
    "service with a dot": (
        spec("  match: {path: /orders}", "  backends: [{service: orders.shop, port: 80}]"),
        f"{FILE}:6: spec.backends[0].service: 'orders.shop' is not a DNS label",
    ),
    "service longer than 63": (
        spec("  match: {path: /orders}", f"  backends: [{{service: {'a' * 64}, port: 80}}]"),
        f"{FILE}:6: spec.backends[0].service: '{'a' * 64}' is not a DNS label",
    ),
    # --- timeouts and durations ---------------------------------------------------------
    "perTry longer than request": (
        route("  timeouts: {request: 2s, perTry: 2500ms}"),
        f"{FILE}:7: spec.timeouts: perTry (2500ms) must not exceed request (2s)",
    ),
    "duration without unit": (
        route("  timeouts: {request: 10}"),
        f"{FILE}:7: spec.timeouts.request: 10 has no unit; write it as 10s or 10ms",
    ),
    "fractional duration without unit": (
        route("  timeouts: {idle: 1.5}"),
        f"{FILE}:7: spec.timeouts.idle: 1.5 has no unit; write it as 1.5s or 1.5ms",
    ),
    "duration with an unknown unit": (
        route("  timeouts: {perTry: 3sec}"),
        f"{FILE}:7: spec.timeouts.perTry: '3sec' is not a duration; use forms like 250ms, 10s, 1m30s, 1h",
    ),
    "duration that is a boolean": (
        route("  timeouts: {request: true}"),
        f"{FILE}:7: spec.timeouts.request: a duration must be a string like 10s",
    ),
    "zero duration": (route("  timeouts: {request: 0s}"), f"{FILE}:7: spec.timeouts.request: '0s' must be longer than 0ms"),
    "negative duration": (route("  timeouts: {request: -1s}"), f"{FILE}:7: spec.timeouts.request: '-1s' is not a duration"),
    "duration above 30 days": (
        route("  timeouts: {idle: 721h}"),
        f"{FILE}:7: spec.timeouts.idle: '721h' is longer than the maximum of 720h",
    ),
    # Used to pass the schema and then fail the whole translation (protobuf Duration range).
    "huge duration": (
        route("  timeouts: {request: 100000000h}"),
        f"{FILE}:7: spec.timeouts.request: '100000000h' is longer than the maximum of 720h",
    ),
    "rate-limit window above 30 days": (
        route("  rateLimits:", "    - {key: ip, limit: 5, window: 1000h}"),
        f"{FILE}:8: spec.rateLimits[0].window: '1000h' is longer than the maximum of 720h",
    ),
    # --- retries ------------------------------------------------------------------------
    "retries on a non-idempotent-only route": (
        matching("{path: /orders, methods: [POST, PATCH]}", "  retries: {attempts: 2}"),
        (
            f"{FILE}:7: spec.retries: the route only matches non-idempotent methods (POST, PATCH)",
            "retries apply to GET, HEAD, OPTIONS, PUT and DELETE only",
        ),
    ),
    "too many retry attempts": (
        route("  retries: {attempts: 11}"),
        f"{FILE}:7: spec.retries.attempts: Input should be less than or equal to 10",
    ),
    "unknown retry condition": (
        route("  retries: {retryOn: [connect-failure, 5xxx]}"),
        f"{FILE}:7: spec.retries.retryOn[1]: '5xxx' is not a retry condition",
    ),
    "retry status code out of range": (route("  retries: {retryOn: ['603']}"), f"{FILE}:7: spec.retries.retryOn[0]: '603' is not a retry condition"),
    "retry condition listed twice": (route("  retries: {retryOn: [reset, reset]}"), f"{FILE}:7: spec.retries.retryOn: 'reset' is listed twice"),
    # `retryOn: [503]` unquoted is accepted (test_an_unquoted_status_code_is_a_status_code); checked like a quoted one.
    "unquoted retry status code out of range": (
        route("  retries: {retryOn: [99]}"),
        f"{FILE}:7: spec.retries.retryOn[0]: '99' is not a retry condition",
    ),
    "retry status code quoted and unquoted": (
        route("  retries: {retryOn: [503, '503']}"),
        f"{FILE}:7: spec.retries.retryOn: '503' is listed twice",
    ),
    "boolean retry condition": (route("  retries: {retryOn: [true]}"), f"{FILE}:7: spec.retries.retryOn[0]: Input should be a valid string"),
    # --- rewrite ------------------------------------------------------------------------
    "rewrite.prefix with pathRegex": (
        matching("{pathRegex: '/orders/[0-9]+'}", "  rewrite: {prefix: /v3}"),
        f"{FILE}:7: spec.rewrite.prefix: a pathRegex route has no prefix to swap; use rewrite.regex",
    ),
    "rewrite with prefix and regex": (
        route("  rewrite: {prefix: /v3, regex: '^/a', substitution: /b}"),
        f"{FILE}:7: spec.rewrite: set exactly one of prefix or regex",
    ),
    "empty rewrite": (route("  rewrite: {}"), f"{FILE}:7: spec.rewrite: set exactly one of prefix or regex"),
    "rewrite regex without substitution": (route("  rewrite: {regex: '^/orders'}"), f"{FILE}:7: spec.rewrite: regex needs a substitution"),
    "rewrite prefix with substitution": (
        route("  rewrite: {prefix: /v3, substitution: /x}"),
        f"{FILE}:7: spec.rewrite: substitution only goes with regex",
    ),
    "rewrite prefix without a leading slash": (route("  rewrite: {prefix: v3}"), f"{FILE}:7: spec.rewrite.prefix: 'v3' must start with '/'"),
    # The translator names the trailing /** ({gh_rest=**}) to rewrite it: a sixth variable,
    # which Envoy refuses ("Exceeded variable count limit (5)").
    "5 variables, /** and rewrite.prefix": (
        matching("{path: '/{a}/{b}/{c}/{d}/{e}/**'}", "  rewrite: {prefix: /v3}"),
        f"{FILE}:7: spec.rewrite.prefix: rewriting /{{a}}/{{b}}/{{c}}/{{d}}/{{e}}/** needs its trailing /** "
        "named as a variable, and Envoy allows at most 5; use fewer variables",
    ),
    # --- rate limits --------------------------------------------------------------------
    "tokenBucket missing refill": (
        route("  rateLimits:", "    - {key: ip, algorithm: tokenBucket, capacity: 5}"),
        f"{FILE}:8: spec.rateLimits[0]: tokenBucket needs capacity and refill",
    ),
    "tokenBucket with limit and window": (
        route("  rateLimits:", "    - {key: ip, algorithm: tokenBucket, capacity: 5, refill: 1/10s, limit: 5, window: 1s}"),
        f"{FILE}:8: spec.rateLimits[0]: tokenBucket takes capacity and refill, not limit and window",
    ),
    "slidingWindow missing window": (
        route("  rateLimits:", "    - {key: user, limit: 100}"),
        f"{FILE}:8: spec.rateLimits[0]: slidingWindow needs limit and window",
    ),
    "fixedWindow with capacity": (
        route("  rateLimits:", "    - {key: user, algorithm: fixedWindow, limit: 1, window: 1s, capacity: 5}"),
        f"{FILE}:8: spec.rateLimits[0]: fixedWindow takes limit and window, not capacity and refill",
    ),
    "refill of zero tokens": (
        route("  rateLimits:", "    - {key: ip, algorithm: tokenBucket, capacity: 5, refill: 0/10s}"),
        f"{FILE}:8: spec.rateLimits[0].refill: '0/10s' must refill at least one token",
    ),
    "refill without a period": (
        route("  rateLimits:", "    - {key: ip, algorithm: tokenBucket, capacity: 5, refill: 1/s}"),
        f"{FILE}:8: spec.rateLimits[0].refill: '1/s' is not a rate",
    ),
    "unknown rate-limit key": (
        route("  rateLimits:", "    - {key: session, limit: 1, window: 1s}"),
        f"{FILE}:8: spec.rateLimits[0].key: String should match pattern",
    ),
    "unknown algorithm": (
        route("  rateLimits:", "    - {key: ip, algorithm: leakyBucket, limit: 1, window: 1s}"),
        f"{FILE}:8: spec.rateLimits[0].algorithm: Input should be 'slidingWindow', 'tokenBucket' or 'fixedWindow'",
    ),
    "limit of zero": (
        route("  rateLimits:", "    - {key: ip, limit: 0, window: 1s}"),
        f"{FILE}:8: spec.rateLimits[0].limit: Input should be greater than or equal to 1",
    ),
    # --- the rest of spec ---------------------------------------------------------------
    "disabled status out of range": (
        spec("  match: {path: /orders}", "  disabled: {status: 600}"),
        f"{FILE}:6: spec.disabled.status: Input should be less than or equal to 599",
    ),
    "disabled body too long": (
        spec("  match: {path: /orders}", f"  disabled: {{body: {'x' * 4097}}}"),
        f"{FILE}:6: spec.disabled.body: String should have at most 4096 characters",
    ),
    "unknown priority": (route("  priority: urgent"), f"{FILE}:7: spec.priority: Input should be 'critical', 'high', 'normal' or 'low'"),
    "maxEjectionPercent above 100": (
        route("  outlierDetection: {maxEjectionPercent: 101}"),
        f"{FILE}:7: spec.outlierDetection.maxEjectionPercent: Input should be less than or equal to 100",
    ),
    "consecutive5xx of zero": (
        route("  outlierDetection: {consecutive5xx: 0}"),
        f"{FILE}:7: spec.outlierDetection.consecutive5xx: Input should be greater than or equal to 1",
    ),
    "failure percentage over 100": (
        route("  outlierDetection: {failurePercentage: {threshold: 101}}"),
        f"{FILE}:7: spec.outlierDetection.failurePercentage.threshold: Input should be less than or equal to 100",
    ),
    "failure percentage without a threshold": (
        route("  outlierDetection: {failurePercentage: {minimumHosts: 2}}"),
        f"{FILE}:7: spec.outlierDetection.failurePercentage.threshold: required field is missing",
    ),
    "success rate with a zero request volume": (
        route("  outlierDetection: {successRate: {requestVolume: 0}}"),
        f"{FILE}:7: spec.outlierDetection.successRate.requestVolume: Input should be greater than or equal to 1",
    ),
    "health check path without a slash": (
        route("  healthCheck: {path: health}"),
        f"{FILE}:7: spec.healthCheck.path: 'health' must start with '/'",
    ),
    "health check without a path": (route("  healthCheck: {interval: 5s}"), f"{FILE}:7: spec.healthCheck.path: required field is missing"),
    "circuit breaker of zero connections": (
        route("  circuitBreaker: {maxConnections: 0}"),
        f"{FILE}:7: spec.circuitBreaker.maxConnections: Input should be greater than or equal to 1",
    ),
    "auth.required as a string": (route("  auth: {required: 'yes'}"), f"{FILE}:7: spec.auth.required: Input should be a valid boolean"),
    # --- not a route at all -------------------------------------------------------------
    "YAML syntax error": (
        spec("  match: {path: /orders", BACKEND),
        f"{FILE}:6: invalid YAML: did not find expected ',' or '}}'",
    ),
    "YAML bad indentation": (
        spec("  match: {path: /orders}", "   backends: []"),
        f"{FILE}:6: invalid YAML:",
    ),
    "a list instead of a mapping": (top("- apiVersion: gatehouse.io/v1alpha1", "- kind: Route"), f"{FILE}:1: a route document must be a mapping, not list"),
    "a scalar document": (top("just some text"), f"{FILE}:1: a route document must be a mapping, not str"),
    "a bad document after a good one": (
        route() + "---\n" + "# the second route\n" + matching("{path: '/a/**/b'}"),
        f"{FILE}:13: spec.match.path: '/a/**/b': '**' may only be the last segment",
    ),
    # PyYAML keeps the last of two equal keys; that silently changed what a route matched.
    "duplicate key in spec": (
        route("  match: {path: /b}"),
        f"{FILE}:7: invalid YAML: found duplicate key 'match' (first on line 5)",
    ),
    "duplicate header name to set": (
        route("  headers:", "    request: {set: {x-api: v1, x-api: v2}}"),
        f"{FILE}:8: invalid YAML: found duplicate key 'x-api' (first on line 8)",
    ),
    # --- cache --------------------------------------------------------------------------
    "cache on a token route": (
        route("  cache: {ttl: 30s}"),
        (f"{FILE}:7: spec.cache: this route requires a token", "set cache.varyByUser: true"),
    ),
    "cache varyByUser on a public route": (
        route("  auth: {required: false}", "  cache: {ttl: 30s, varyByUser: true}"),
        "there is no verified user to key by",
    ),
    "cache ttl below 1s": (
        route("  auth: {required: false}", "  cache: {ttl: 500ms}"),
        f"{FILE}:8: spec.cache: ttl (500ms) must be from 1s to 24h",
    ),
    "cache ttl above 24h": (
        route("  auth: {required: false}", "  cache: {ttl: 25h}"),
        f"{FILE}:8: spec.cache: ttl (25h) must be from 1s to 24h",
    ),
    "cache without ttl": (route("  auth: {required: false}", "  cache: {varyByUser: false}"), f"{FILE}:8: spec.cache.ttl: required"),
    "cache unknown field": (
        route("  auth: {required: false}", "  cache: {ttl: 30s, maxAge: 5}"),
        f"{FILE}:8: spec.cache.maxAge: unknown field",
    ),
    "cache on a POST-only route": (
        matching("{path: /orders, methods: [POST]}", "  auth: {required: false}", "  cache: {ttl: 30s}"),
        f"{FILE}:8: spec.cache: only GET and HEAD answers are cached; this route matches POST",
    ),
    "cache with a rewrite and retries": (
        matching("{pathPrefix: /orders}", "  auth: {required: false}", "  rewrite: {prefix: /v2}", "  retries: {attempts: 2}",
                 "  cache: {ttl: 30s}"),
        (f"{FILE}:10: spec.cache: cannot be combined with rewrite, retries:", "Envoy's cache fetches a miss itself"),
    ),
    # --- backPressure -------------------------------------------------------------------
    "backPressure failOn a class other than 5xx": (
        route("  backPressure: {failOn: [4xx]}"),
        f"{FILE}:7: spec.backPressure.failOn[0]: '4xx' is not 5xx or a status code from 400 to 599",
    ),
    "backPressure failOn a success status": (
        route("  backPressure: {failOn: [200]}"),
        f"{FILE}:7: spec.backPressure.failOn[0]: '200' is not 5xx or a status code from 400 to 599",
    ),
    "backPressure failOn empty": (route("  backPressure: {failOn: []}"), (f"{FILE}:7: spec.backPressure.failOn:", "at least 1")),
    "backPressure failOn twice": (
        route("  backPressure: {failOn: [503, '503']}"),
        f"{FILE}:7: spec.backPressure.failOn: '503' is listed twice",
    ),
    "backPressure window too short": (
        route("  backPressure: {window: 500ms}"),
        f"{FILE}:7: spec.backPressure: window (500ms) must be from 1s to 10m",
    ),
    "backPressure window without unit": (route("  backPressure: {window: 30}"), f"{FILE}:7: spec.backPressure.window: 30 has no unit"),
    "backPressure aggression below 1": (
        route("  backPressure: {aggression: 0.5}"),
        (f"{FILE}:7: spec.backPressure.aggression:", "greater than or equal to 1"),
    ),
    "backPressure threshold above 100": (
        route("  backPressure: {successRateThreshold: 101}"),
        (f"{FILE}:7: spec.backPressure.successRateThreshold:", "less than or equal to 100"),
    ),
    "backPressure rejection probability 0": (
        route("  backPressure: {maxRejectionProbability: 0}"),
        (f"{FILE}:7: spec.backPressure.maxRejectionProbability:", "greater than or equal to 1"),
    ),
    "backPressure negative rps": (
        route("  backPressure: {minRequestsPerSecond: -1}"),
        (f"{FILE}:7: spec.backPressure.minRequestsPerSecond:", "greater than or equal to 0"),
    ),
    "backPressure unknown field": (
        route("  backPressure: {threshold: 90}"),
        f"{FILE}:7: spec.backPressure.threshold: unknown field",
    ),
    # A forgotten `---`: the two routes used to merge silently into the second one.
    "missing document separator": (
        route() + HEADER.replace("name: orders", "name: carts") + "  match: {path: /carts}\n" + BACKEND + "\n",
        f"{FILE}:7: invalid YAML: found duplicate key 'apiVersion' (first on line 1)",
    ),
    "a non-mapping document after a good one": (
        route() + "---\n" + top("- 1", "- 2"),
        f"{FILE}:8: a route document must be a mapping, not list",
    ),
}


def _rendered(text: str) -> tuple[list[Route], list[str]]:
    routes, problems = parse_route_file(text, Origin("git", FILE, revision="0123456789abcdef"))
    return routes, [str(p) for p in problems]


@pytest.mark.parametrize("text, expected", CASES.values(), ids=list(CASES))
def test_invalid_route_file_names_file_line_field_and_reason(text: str, expected: Expected) -> None:
    routes, problems = _rendered(text)
    wanted = (expected,) if isinstance(expected, str) else expected
    assert len(problems) == 1, problems
    for part in wanted:
        assert part in problems[0], f"{part!r} not in {problems[0]!r}"
    assert problems[0].startswith(f"{FILE}:"), problems[0]
    # A problem never lets the broken document through; a good document in the same file is kept.
    assert all(r.spec.match.path == "/orders" for r in routes)


def test_every_case_is_valid_once_the_broken_part_is_removed() -> None:
    """The table's base documents are themselves valid, so each case tests only its own rule."""
    for text in (route(), spec("  match: {path: /orders}", "  disabled: {}"), top("apiVersion: gatehouse.io/v1alpha1", "kind: Route", "metadata: {name: orders}", GOOD_SPEC)):
        routes, problems = _rendered(text)
        assert problems == [] and len(routes) == 1


def test_all_problems_are_reported_at_once() -> None:
    text = (
        spec("  match: {path: '/a/{id'}", "  backends: [{service: a, port: 80, weight: -1}]", "  timeouts: {request: 10}")
        + "---\n"
        + top("apiVersion: gatehouse.io/v1alpha1", "kind: Route", "metadata: {name: Second}", GOOD_SPEC)
    )
    routes, problems = _rendered(text)
    assert routes == []
    assert [p.split(": ")[0] + ": " + p.split(": ")[1] for p in problems] == [
        f"{FILE}:5: spec.match.path",
        f"{FILE}:6: spec.backends[0].weight",
        f"{FILE}:7: spec.timeouts.request",
        f"{FILE}:11: metadata.name",
    ]


def test_duplicate_route_ids_across_files_name_both_places(tmp_path: Path) -> None:
    body = "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: orders, namespace: shop}\n" + GOOD_SPEC + "\n"
    (tmp_path / "a.yaml").write_text(body)
    (tmp_path / "b.yaml").write_text("# same id, other file\n---\n" + body)
    (tmp_path / "c.yaml").write_text(body.replace("namespace: shop", "namespace: other"))
    routes, problems = load_route_path(tmp_path)
    assert len(routes) == 3
    assert len(problems) == 1
    rendered = str(problems[0])
    assert "b.yaml:3" in rendered
    assert "metadata.name: route shop/orders is already defined at file:a.yaml:1" in rendered


def test_duplicate_route_ids_in_one_file() -> None:
    body = "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: orders}\n" + GOOD_SPEC + "\n"
    routes, problems = parse_route_file(body + "---\n" + body, Origin("file", FILE))
    assert problems == []
    duplicates = [str(p) for p in duplicate_problems(routes)]
    assert duplicates == [f"file:{FILE}:6: metadata.name: route default/orders is already defined at file:{FILE}:1"]


def test_same_name_in_two_namespaces_is_not_a_duplicate() -> None:
    text = "".join(
        f"---\napiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {{name: orders, namespace: {ns}}}\n{GOOD_SPEC}\n"
        for ns in ("shop", "billing")
    )
    routes, problems = parse_route_file(text, Origin("file", FILE))
    assert problems == [] and duplicate_problems(routes) == []
    assert sorted(r.id for r in routes) == ["billing/orders", "shop/orders"]


# --- rules that came from bugs ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        route("  match: {path: /b}"),
        route() + HEADER.replace("name: orders", "name: carts") + "  match: {path: /carts}\n" + BACKEND + "\n",
    ],
    ids=["two match keys", "missing document separator"],
)
def test_duplicate_keys_are_refused_and_no_route_slips_through(text: str) -> None:
    """PyYAML silently keeps the last of two equal keys: two `match:` keys routed /b only, and
    a forgotten `---` made the first route vanish into the second. Now the file is refused."""
    routes, problems = _rendered(text)
    assert routes == []
    [problem] = problems
    # Both cases repeat a key on line 7 (`match:` in spec; `apiVersion:` at the top level).
    assert problem.startswith(f"{FILE}:7: invalid YAML: found duplicate key "), problem


def test_equal_keys_in_different_mappings_are_not_duplicates() -> None:
    routes, problems = _rendered(
        matching("{path: /orders, headers: [{name: x-a, exact: '1'}, {name: x-b, exact: '1'}]}", "  headers: {request: {set: {name: a}}, response: {set: {name: a}}}")
    )
    assert problems == [] and len(routes) == 1


# Regexes a pattern-probing check once refused although RE2 (and Envoy) accepts them.
VALID_RE2: dict[str, str] = {
    "escaped plus, repeated": r"/c\++",
    "escaped backslash before a digit": r"/a\\1",
    "RE2-only literal quoting": r"/\Q(v1)\E/.*",
    "largest program Envoy accepts (100)": "(ab|cd){16}",
}


@pytest.mark.parametrize("regex", VALID_RE2.values(), ids=list(VALID_RE2))
def test_schema_accepts_valid_re2(regex: str) -> None:
    quoted = regex.replace("'", "''")
    routes, problems = _rendered(matching(f"{{pathRegex: '{quoted}'}}"))
    assert problems == []
    assert routes[0].spec.match.path_regex == regex


# --- fixed regressions (af8d559): they guard the fix ---------------------------------------


@pytest.mark.parametrize("style, line", [("flow", 8), ("block", 9)])
def test_a_duplicate_backend_is_reported_at_its_line(style: str, line: int) -> None:
    """The duplicate check runs on the whole document (it needs metadata.namespace); its
    problem still points at the repeated backend: line 8 in flow style, line 9 in block
    style (`    - service: a` of the second backend)."""
    if style == "flow":
        lines = ["    - {service: a, port: 80}", "    - {service: a, port: 80, namespace: shop}"]
    else:
        lines = ["    - service: a", "      port: 80", "    - service: a", "      port: 80"]
    _, problems = _rendered(spec("  match: {path: /orders}", "  backends:", *lines))
    assert problems == [f"{FILE}:{line}: spec.backends[1]: shop/a:80 is listed twice"]


def test_yaml_merge_keys_still_work() -> None:
    text = spec(
        "  match: {path: /orders}",
        "  backends:",
        "    - &stable {service: order-service, port: 8080, weight: 9}",
        "    - {<<: *stable, service: order-service-v3, weight: 1}",
    )
    routes, problems = _rendered(text)
    assert problems == []
    assert [(b.service, b.port, b.weight) for b in routes[0].spec.backends] == [
        ("order-service", 8080, 9),
        ("order-service-v3", 8080, 1),
    ]


def test_merge_keys_do_not_hide_duplicate_explicit_keys() -> None:
    """Keys written in the mapping itself may override merged ones, but not each other."""
    text = spec(
        "  match: {path: /orders}",
        "  backends:",
        "    - &stable {service: order-service, port: 8080, weight: 9}",
        "    - {<<: *stable, service: order-service-v3, weight: 1, weight: 2}",
    )
    routes, problems = _rendered(text)
    assert routes == []
    assert problems == [f"{FILE}:8: invalid YAML: found duplicate key 'weight' (first on line 8)"]


# --- positive cases ------------------------------------------------------------------------

DESIGN_EXAMPLE = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: orders, namespace: shop}
spec:
  hosts: ["api.example.com"]          # default: any host
  match:
    path: /api/v2/orders/{id}         # literal, {var} segments, trailing /** ; or pathPrefix / pathRegex
    methods: [GET]
    headers: [{name: x-client, exact: mobile}]
  backends:                            # weighted; weights need not sum to 100
    - {service: order-service, port: 8080, weight: 95}
    - {service: order-service-v3, port: 8080, weight: 5}
  rewrite: {prefix: /v3/orders}        # or {regex: ..., substitution: ...}
  headers:
    request:  {set: {}, remove: []}
    response: {set: {}, remove: [x-internal-trace-id]}
  auth: {required: true, audiences: [orders], scopes: [orders:read]}   # required defaults to true
  rateLimits:
    - {key: user, algorithm: slidingWindow, limit: 100, window: 60s}
    - {key: ip,   algorithm: tokenBucket, capacity: 5, refill: 1/10s}
  timeouts: {request: 10s, perTry: 3s, idle: 60s}
  retries: {attempts: 2, retryOn: [connect-failure, reset, "503"]}           # idempotent methods only
  circuitBreaker: {maxConnections: 1000, maxPendingRequests: 100, maxRequests: 1000}
  outlierDetection: {consecutive5xx: 5, interval: 10s, baseEjection: 30s, maxEjectionPercent: 50}
  healthCheck: {path: /health, interval: 5s}
  priority: critical                   # critical | high | normal | low (load shedding order)
  disabled: {status: 503, body: "under maintenance"}   # feature flag: answer without upstream
"""


def test_the_design_example_parses_with_every_field() -> None:
    routes, problems = parse_route_file(DESIGN_EXAMPLE, Origin("file", "design.yaml"))
    assert problems == []
    [parsed] = routes
    assert parsed.id == "shop/orders"
    assert parsed.origin.line == 1
    spec_ = parsed.spec
    assert spec_.hosts == ["api.example.com"]
    assert spec_.match.path == "/api/v2/orders/{id}" and spec_.match.methods == ["GET"]
    assert spec_.match.headers[0].name == "x-client" and spec_.match.headers[0].exact == "mobile"
    assert [(b.service, b.port, b.weight) for b in spec_.backends] == [
        ("order-service", 8080, 95),
        ("order-service-v3", 8080, 5),
    ]
    assert spec_.rewrite is not None and spec_.rewrite.prefix == "/v3/orders"
    assert spec_.headers.response.remove == ["x-internal-trace-id"]
    assert spec_.auth.required is True and spec_.auth.scopes == ["orders:read"]
    window, bucket = spec_.rate_limits
    assert (window.key, window.limit, window.window) == ("user", 100, 60_000)
    assert (bucket.key, bucket.capacity, bucket.refill) == ("ip", 5, (1, 10_000))
    assert (spec_.timeouts.request, spec_.timeouts.per_try, spec_.timeouts.idle) == (10_000, 3_000, 60_000)
    assert spec_.retries is not None and spec_.retries.attempts == 2
    assert spec_.retries.retry_on == ["connect-failure", "reset", "503"]
    assert spec_.circuit_breaker is not None and spec_.circuit_breaker.max_pending_requests == 100
    assert spec_.outlier_detection is not None and spec_.outlier_detection.consecutive5xx == 5
    assert spec_.outlier_detection.base_ejection == 30_000
    assert spec_.health_check is not None and spec_.health_check.timeout == 1_000
    assert spec_.priority == "critical"
    assert spec_.disabled is not None and spec_.disabled.body == "under maintenance"


def test_on_in_retries_is_the_key_on_not_a_boolean() -> None:
    routes, problems = _rendered(route("  retries:", "    retryOn: [5xx, '429']", "    attempts: 3"))
    assert problems == []
    retries = routes[0].spec.retries
    assert retries is not None and retries.retry_on == ["5xx", "429"] and retries.attempts == 3


def test_an_unquoted_status_code_is_a_status_code() -> None:
    """`retryOn: [503]` is an int in YAML; it means the status code, as "503" does."""
    routes, problems = _rendered(route("  retries: {retryOn: [503, 429, reset]}"))
    assert problems == []
    retries = routes[0].spec.retries
    assert retries is not None and retries.retry_on == ["503", "429", "reset"]


def test_durations_up_to_30_days_are_accepted() -> None:
    routes, problems = _rendered(
        route(
            "  timeouts: {request: 720h, perTry: 720h, idle: 43200m}",
            "  rateLimits:",
            "    - {key: ip, limit: 1, window: 720h}",
            "    - {key: user, algorithm: tokenBucket, capacity: 1, refill: 1/720h}",
        )
    )
    assert problems == []
    timeouts = routes[0].spec.timeouts
    assert timeouts.request == timeouts.per_try == timeouts.idle == 30 * 24 * 3_600_000


def test_a_glob_with_four_variables_can_be_rewritten() -> None:
    """Four variables + the named glob are five, Envoy's limit; only the fifth variable is refused."""
    routes, problems = _rendered(matching("{path: '/{a}/{b}/{c}/{d}/**'}", "  rewrite: {prefix: /v3}"))
    assert problems == [] and len(routes) == 1


def test_the_same_service_in_two_namespaces_is_two_backends() -> None:
    routes, problems = _rendered(
        spec("  match: {path: /orders}", "  backends:", "    - {service: a, port: 80}", "    - {service: a, port: 80, namespace: billing}")
    )
    assert problems == [] and len(routes[0].spec.backends) == 2


@pytest.mark.parametrize("word", ["on", "off", "yes", "no", "y", "n"])
def test_yaml_1_1_boolean_words_stay_strings(word: str) -> None:
    routes, problems = _rendered(matching(f"{{path: /orders, headers: [{{name: x-flag, exact: {word}}}]}}"))
    assert problems == []
    assert routes[0].spec.match.headers[0].exact == word


def test_true_and_false_are_still_booleans() -> None:
    routes, problems = _rendered(matching("{path: /orders, headers: [{name: x-debug, present: true, invert: false}]}"))
    assert problems == []
    header = routes[0].spec.match.headers[0]
    assert header.present is True and header.invert is False


def test_defaults() -> None:
    routes, problems = _rendered(route("  retries: {}"))
    assert problems == []
    parsed = routes[0]
    assert parsed.namespace == "shop"
    assert parsed.spec.backends[0].weight == 1 and parsed.spec.backends[0].namespace is None
    assert parsed.spec.hosts == [] and parsed.spec.priority == "normal" and parsed.spec.auth.required is True
    assert parsed.spec.retries is not None
    assert parsed.spec.retries.attempts == 1
    assert parsed.spec.retries.retry_on == ["connect-failure", "refused-stream", "reset"]
    text = top("apiVersion: gatehouse.io/v1alpha1", "kind: Route", "metadata: {name: orders}", GOOD_SPEC)
    assert _rendered(text)[0][0].namespace == "default"


def test_accepted_edge_values() -> None:
    """Values at the edge of each rule are accepted, so the rules are not stricter than documented."""
    text = spec(
        "  hosts: ['*', '*.example.com', a-1.example.com]",
        "  match: {path: '/v1/{a}/{b}/{c}/{d}/{e}/**', methods: [POST, GET]}",
        "  backends:",
        "    - {service: a, port: 1, weight: 0}",
        "    - {service: b, port: 65535, weight: 1000000, namespace: other}",
        "    - {service: a, port: 1, namespace: other}",
        "  timeouts: {request: 1m30s, perTry: 1m30s}",
        "  retries: {attempts: 10, retryOn: ['503', 5xx]}",
        "  rewrite: {regex: '^/v1/(.*)$', substitution: '/\\1'}",
    )
    routes, problems = _rendered(text)
    assert problems == []
    parsed = routes[0]
    assert parsed.spec.timeouts.request == parsed.spec.timeouts.per_try == 90_000


def test_line_numbers_point_at_the_offending_item_in_block_style() -> None:
    text = spec(
        "  match:",
        "    path: /orders",
        "    headers:",
        "      - name: x-ok",
        "        exact: fine",
        "      - name: X-Bad",
        "        exact: fine",
        "  backends:",
        "    - service: order-service",
        "      port: 8080",
        "    - service: order-service-v3",
        "      port: 8080",
        "      weight: -5",
    )
    _, problems = _rendered(text)
    assert problems == [
        f"{FILE}:10: spec.match.headers[1].name: 'X-Bad' is not a lowercase HTTP header name",
        f"{FILE}:17: spec.backends[1].weight: Input should be greater than or equal to 0",
    ]


def test_parse_duration_is_what_the_schema_uses() -> None:
    routes, _ = _rendered(route("  timeouts: {request: 1h1m1s1ms}"))
    assert routes[0].spec.timeouts.request == parse_duration_ms("1h1m1s1ms") == 3_661_001
