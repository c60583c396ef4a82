"""An authenticated, rate-limited Route through the chart's pods: Envoy asks the ext_authz
sidecar (HTTP check, token and the route's limits in one call) and the limit is counted in
the trial Redis shared by both gateway pods."""

from __future__ import annotations

from tests.e2e.cluster.conftest import KubeSession, unique, wait_for
from tests.harness.window_clock import settle


def test_no_token_401_token_200_past_the_limit_429_with_its_headers(kube: KubeSession) -> None:
    name, path = unique("limited"), f"/{unique('limited')}/orders"
    kube.apply(kube.route(name, {
        "match": {"path": path},
        "backends": [{"service": "order-service", "port": 8080}],
        "auth": {"required": True, "audiences": ["api"]},
        "rateLimits": [{"key": "user", "algorithm": "fixedWindow", "limit": 3, "window": "60s"}],
    }))
    wait_for(lambda: kube.conditions(name).get("Accepted", {}).get("status") == "True", 10, "Accepted", 0.1)
    wait_for(lambda: kube.get(path)[0] == 200, 5, "the route served")  # the session's own user: 1 of its 3

    status, headers, body = kube.get(path, headers={})
    assert status == 401
    assert headers.get("www-authenticate", "").startswith("Bearer"), headers

    token = kube.token(sub=unique("user"))  # a fresh user: the limit is per user
    auth = {"authorization": f"Bearer {token}"}
    settle(60, 10)  # this user's hits in one fixed window (the cluster's clock is this machine's)
    answers = [kube.get(path, headers=auth) for _ in range(3)]
    assert [a[0] for a in answers] == [200, 200, 200], [(a[0], a[2][:200]) for a in answers]
    assert answers[0][1]["x-upstream"] == "order-service"
    assert [a[1].get("x-ratelimit-remaining") for a in answers] == ["2", "1", "0"]
    assert all(a[1].get("x-ratelimit-limit", "").startswith("3") for a in answers), [a[1] for a in answers]

    status, headers, body = kube.get(path, headers=auth)
    assert status == 429, body[:300]
    assert headers.get("x-ratelimit-remaining") == "0"
    assert headers.get("x-ratelimit-limit", "").startswith("3")
    retry_after = int(headers["retry-after"])
    assert 1 <= retry_after <= 60
    assert headers.get("x-ratelimit-reset") == str(retry_after)

    # Another user has a limit of their own; a forged token gets nothing.
    other = {"authorization": f"Bearer {kube.token(sub=unique('user'))}"}
    assert kube.get(path, headers=other)[0] == 200
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    assert kube.get(path, headers={"authorization": f"Bearer {forged}"})[0] == 401
