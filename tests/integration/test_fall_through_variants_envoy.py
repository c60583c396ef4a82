"""Spellings of a protected path that fall through to a public route, through real Envoy
(issue 33, item 1).

A protected ``/admin/**`` beside a public ``/**`` on the same backend: ``/Admin/users``
(a case-insensitive upstream) and ``/admin;x/users`` (Tomcat, Spring strip ``;``
parameters) reached the backend with no token. Now they are answered 400
``non_canonical_path`` (translator/variant_guard.py); the spellings Envoy's path
normalization already makes canonical (``/%61dmin``, ``//admin``, ``/./admin``,
``/x/../admin``, ``\\``) reach the protected route and its 401; an escaped slash or
backslash (``%2F``, ``%5C``) is refused with 400 (``path_with_escaped_slashes_action``). The
public route's own paths are unchanged.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.harness.gateway import GatewayStack
from tests.harness.http_client import Reply
from tests.harness.route_repo import route_doc
from tests.integration.test_attacks_envoy import Gateway, gateway  # noqa: F401  (the fixture)
from tests.integration.test_route_shields_envoy import served

BACKEND = [{"service": "svc-a", "port": 8080}]
ROUTES = [
    route_doc("admin", {"match": {"path": "/admin/**"}, "backends": BACKEND}),
    route_doc("orders", {"match": {"path": "/orders/{id}", "methods": ["GET", "HEAD"]}, "backends": BACKEND}),
    route_doc("me", {"match": {"path": "/api/v2/me"}, "backends": BACKEND}),
    route_doc("site", {"match": {"path": "/**"}, "backends": BACKEND, "auth": {"required": False}}),
]

REFUSED = [  # differ from a protected path only by letter case or ';' parameters: 400
    "/Admin/users", "/ADMIN/users", "/aDmIn", "/admin;x/users", "/admin;/users", "/Admin;jsessionid=1/users",
    "/%41dmin/users", "/Orders/42", "/orders;a/42", "/ORDERS;a/42", "/API/v2/me", "/api;x/v2/me", "/api/v2;x/me",
    "/api/v2/me;x", "/api/V2/ME",
]
NORMALIZED = [  # Envoy's normalization makes these the protected path itself: 401
    "/%61dmin/users", "/adm%69n/users", "//admin/users", "/./admin/users", "/admin/../admin/users", "/x/../admin/users",
    "/%2e/admin/users", "/admin\\users", "/admin/users;x", "/%6Frders/42", "/api//v2/me",
]
PUBLIC = ["/", "/index.html", "/administrator", "/admins/x", "/a;b/c", "/Other/Path", "/orders/42/items", "/api/v2", "/api/v3/me"]


def never_upstream(stack: GatewayStack, path: str, **kwargs: Any) -> Reply:
    """``path``'s answer, which must come from the gateway, never the backend."""
    before = served(stack.upstreams["svc-a"])
    reply = stack.get(path, **kwargs)
    assert reply.upstream is None and served(stack.upstreams["svc-a"]) == before, f"{path} reached the backend: {reply.status}"
    assert reply.status < 500, (path, reply.status, reply.body)
    return reply


def test_case_and_parameter_variants_of_a_protected_path_are_refused(gateway: Gateway) -> None:
    stack = gateway.start(ROUTES, wait_path="/index.html")
    token = gateway.bearer("alice")
    for path in REFUSED:
        for headers in ({}, token):  # a token does not make a variant the route's path
            reply = never_upstream(stack, path, headers=headers)
            assert reply.status == 400, (path, reply.status, reply.body)
            error = reply.json()["error"]
            assert error["code"] == "non_canonical_path" and error["request_id"], (path, error)
            assert reply.headers["content-type"].startswith("application/json")


def test_normalized_spellings_reach_the_protected_route(gateway: Gateway) -> None:
    stack = gateway.start(ROUTES, wait_path="/index.html")
    for path in NORMALIZED:
        assert never_upstream(stack, path).status == 401, path
    # An escaped slash or backslash is refused outright (docs/routes.md, "What reaches the upstream").
    for path in ("/admin%2Fusers", "/admin%2fusers", "/admin%5Cusers"):
        assert never_upstream(stack, path).status == 400, path


def test_the_routes_own_paths_are_unchanged(gateway: Gateway) -> None:
    stack = gateway.start(ROUTES, wait_path="/index.html")
    token = gateway.bearer("alice")
    for path in PUBLIC:
        reply = stack.get(path)
        assert (reply.status, reply.upstream, reply.json()["path"]) == (200, "svc-a", path), path
    for path in ("/admin/users", "/admin", "/orders/42", "/api/v2/me"):
        assert stack.get(path).status == 401, path
        reply = stack.get(path, headers=token)
        assert (reply.status, reply.upstream) == (200, "svc-a"), path
        assert reply.json()["headers"]["x-user-id"] == "alice"
    # Another method is the method fall-through (reported, or 405 with otherMethods: reject), not a variant.
    assert stack.get("/Orders/42", method="POST").upstream == "svc-a"


def test_no_spelling_of_the_protected_path_reaches_the_backend_without_a_token(gateway: Gateway) -> None:
    """Hypothesis: random spellings of /admin/users (case, ';' parameters, escaped letters,
    dot segments, doubled slashes): each is refused or asks for a token, never 5xx."""
    stack = gateway.start(ROUTES, wait_path="/index.html")

    @st.composite
    def admin_segment(draw: st.DrawFn) -> str:
        out = ""
        for ch in "admin":
            how = draw(st.sampled_from(["same", "upper", "escaped", "escaped-upper"]))
            out += {"same": ch, "upper": ch.upper(), "escaped": f"%{ord(ch):02x}", "escaped-upper": f"%{ord(ch.upper()):02X}"}[how]
        if draw(st.booleans()):
            out += ";" + draw(st.text(alphabet="abc=1%3B", max_size=6))
        return out

    @st.composite
    def spelling(draw: st.DrawFn) -> str:
        lead = draw(st.sampled_from(["/", "//", "/./", "/x/../", "/%2e/"]))
        tail = draw(st.sampled_from(["/users", "", "/users;y", "//users", "/./users"]))
        return lead + draw(admin_segment()) + tail

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(spelling())
    def check(path: str) -> None:
        reply = never_upstream(stack, path)
        assert reply.status in (400, 401), (path, reply.status, reply.body)

    check()
