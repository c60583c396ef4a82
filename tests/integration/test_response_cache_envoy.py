"""The per-route response cache through real Envoy, counted at the echo upstreams: a second
identical GET on a cached route never reaches the upstream; POST, no-store and private
answers, requests carrying Authorization, and routes without ``cache`` always do."""

from __future__ import annotations

from pathlib import Path

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.http_client import wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory, ext_authz_entry
from tests.integration.test_route_shields_envoy import served

PUBLIC_ROUTES = [
    route_doc(
        "catalog",
        {
            "match": {"pathPrefix": "/catalog"},
            "backends": [{"service": "svc-cached", "port": 8080}],
            "auth": {"required": False},
            "cache": {"ttl": "60s"},
        },
    ),
    route_doc(
        "plain",
        {"match": {"pathPrefix": "/plain"}, "backends": [{"service": "svc-plain", "port": 8080}], "auth": {"required": False}},
    ),
]


def test_a_cached_route_answers_a_repeated_get_from_the_cache(make_stack: StackFactory) -> None:
    stack = make_stack(upstreams=("svc-cached", "svc-plain"))
    stack.commit_routes({"r.yaml": PUBLIC_ROUTES})
    stack.start(wait_path="/plain")
    stack.wait_status("/catalog/ready", 200)
    cached, plain = stack.upstreams["svc-cached"], stack.upstreams["svc-plain"]

    before = served(cached)
    first = stack.get("/catalog/item/1")
    second = stack.get("/catalog/item/1")
    assert first.status == second.status == 200
    assert served(cached) - before == 1, "the second identical GET never reaches the upstream"
    assert second.body == first.body
    assert first.headers["cache-control"] == "max-age=60", "the route's ttl, as the upstream sent none"
    assert "age" in second.headers and "age" not in first.headers, "the second came from the cache"
    # HEAD is answered from the GET's entry too.
    assert stack.get("/catalog/item/1", method="HEAD").status == 200
    assert served(cached) - before == 1

    # Another path is another entry.
    stack.get("/catalog/item/2")
    assert served(cached) - before == 2

    # POST is never cached (and never answered from a GET's entry).
    for _ in range(2):
        assert stack.get("/catalog/item/1", method="POST").status == 200
    assert served(cached) - before == 4

    # The upstream's Cache-Control decides: no-store and private are never kept, its own
    # max-age is what the client sees.
    for directive in ("no-store", "private,max-age=60"):
        mark = served(cached)
        for _ in range(2):
            reply = stack.get(f"/catalog/d?cacheControl={directive}")
            assert reply.status == 200 and reply.headers["cache-control"] == directive
        assert served(cached) - mark == 2, directive
    own = stack.get("/catalog/own?cacheControl=max-age=5")
    assert own.headers["cache-control"] == "max-age=5"

    # A client cannot force a miss nor set an answer's freshness through the internal header.
    mark = served(cached)
    forced = stack.get("/catalog/item/1", headers={"cache-control": "no-cache"})
    assert forced.status == 200 and served(cached) == mark
    sneaky = stack.get("/plain/x", headers={"x-gatehouse-cache-control": "max-age=999"})
    assert "cache-control" not in sneaky.headers
    assert "x-gatehouse-cache-control" not in sneaky.json()["headers"]

    # A request with a credential is never answered from the cache, nor stored: another
    # client's cached answer is not served to it, and its answer is not kept.
    mark = served(cached)
    for _ in range(2):
        with_token = stack.get("/catalog/item/1", headers={"authorization": "Bearer abc"})
        assert with_token.status == 200 and "age" not in with_token.headers
    assert served(cached) - mark == 2

    # A route without cache is never cached, even with an upstream asking for it.
    mark = served(plain)
    for _ in range(3):
        assert stack.get("/plain/x?cacheControl=max-age=60").status == 200
    assert served(plain) - mark == 3


def test_vary_by_user_keeps_each_users_answers_apart(make_stack: StackFactory, tmp_path: Path) -> None:
    """An authenticated route with ``varyByUser``: a user's repeated GET is answered from
    the cache, another user's same GET is never answered with the first one's entry, the
    upstream sees neither the token nor the key's query parameter, and a token without the
    user claim is refused rather than sharing an entry."""
    issuer = TestIssuer()
    jwks = str(issuer.write_jwks(tmp_path / "jwks.json"))
    authz = ExtAuthzProcess(
        tmp_path / "authz",
        {"issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": jwks, "requiredClaims": ["exp"]}]},
        transport="http",
    )
    stack = make_stack(upstreams=("svc-mine", "svc-plain"), control_plane_extra={"extAuthz": ext_authz_entry([authz])})
    try:
        stack.commit_routes({"r.yaml": [
            route_doc("mine", {"match": {"pathPrefix": "/mine"}, "backends": [{"service": "svc-mine", "port": 8080}],
                               "cache": {"ttl": "60s", "varyByUser": True}}),
            PUBLIC_ROUTES[1],
        ]})
        stack.start(wait_path="/plain")
        authz.use_control_plane(stack.control_plane.xds_port)
        authz.start()
        alice, bob = (f"Bearer {issuer.token(sub)}" for sub in ("alice", "bob"))
        wait_for(lambda: stack.get("/mine/ready", headers={"authorization": alice}).status == 200, 20, "the cached route answering alice")
        upstream = stack.upstreams["svc-mine"]

        before = served(upstream)
        first = stack.get("/mine/profile?x=1", headers={"authorization": alice})
        again = stack.get("/mine/profile?x=1", headers={"authorization": alice})
        assert first.status == again.status == 200
        assert served(upstream) - before == 1, "alice's second GET is answered from the cache"
        assert "age" in again.headers and again.body == first.body
        seen = first.json()
        assert seen["headers"]["x-user-id"] == "alice"
        assert "authorization" not in seen["headers"], "the upstream gets the identity, not the token"
        assert seen["path"] == "/mine/profile?x=1", "the cache key's parameter never reaches the upstream"

        # Bob's same GET is his own entry, answered by the upstream with his identity.
        theirs = stack.get("/mine/profile?x=1", headers={"authorization": bob})
        assert theirs.status == 200 and "age" not in theirs.headers
        assert theirs.json()["headers"]["x-user-id"] == "bob"
        assert served(upstream) - before == 2
        # A client naming another user in the old key's parameter (issue 24) gets its own
        # entry: the key is the verified caller on the host (issue 33), the parameter an
        # ordinary one, passed as sent; bob's again is his cached answer, never alice's.
        forged = stack.get("/mine/profile?x=1&x-gatehouse-cache-user=alice", headers={"authorization": bob})
        assert forged.status == 200 and "age" not in forged.headers
        assert forged.json()["headers"]["x-user-id"] == "bob"
        assert forged.json()["path"] == "/mine/profile?x=1&x-gatehouse-cache-user=alice"
        forged_again = stack.get("/mine/profile?x=1&x-gatehouse-cache-user=alice", headers={"authorization": bob})
        assert "age" in forged_again.headers and forged_again.json()["headers"]["x-user-id"] == "bob"
        assert served(upstream) - before == 3
        # No token: 401 before the cache; a token without `sub` (no x-user-id): 403, never a shared entry.
        assert stack.get("/mine/profile?x=1").status == 401
        anonymous = stack.get("/mine/profile?x=1", headers={"authorization": f"Bearer {issuer.token(sub=None)}"})
        assert anonymous.status == 403 and anonymous.json()["error"]["code"] == "user_required"
        assert served(upstream) - before == 3
    finally:
        authz.stop()
