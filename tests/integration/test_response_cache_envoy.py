"""The per-route response cache through real Envoy, counted at the echo upstreams: a second
identical GET on a cached route never reaches the upstream; POST, no-store and private
answers, requests carrying Authorization, and routes without ``cache`` always do."""

from __future__ import annotations

from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory
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
