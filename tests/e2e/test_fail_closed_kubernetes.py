"""Fail closed on a real API server: a Route asking for `auth` on a control plane without
`extAuthz` gets `Accepted=False` (`Unenforceable`, naming the setting and the Helm value)
and Envoy does not serve it, while a public Route next to it serves; a Route with limits
under `rateLimitsWithoutLimiter: serveUnlimited` is served with `Enforced=False`."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_kubernetes_routes import (  # noqa: F401 - fixtures
    addresses,
    api,
    apply,
    conditions,
    endpoint_slice,
    make_stack,
    namespace,
    route,
    service,
)
from tests.harness.http_client import wait_for
from tests.harness.kubernetes import KubeAPIServer
from tests.harness.netns import TestNetwork


def test_an_auth_route_without_a_check_is_not_accepted_and_not_served(
    tmp_path: Path, api: KubeAPIServer, namespace: str, addresses: list[str], test_network: TestNetwork  # noqa: F811
) -> None:
    stack = make_stack(tmp_path, api, namespace, addresses, test_network,
                       control_plane_extra={"rateLimitsWithoutLimiter": "serveUnlimited"})
    try:
        apply(api, service("orders", namespace), endpoint_slice("orders-a", namespace, "orders", stack.upstreams["svc-a"]))
        stack.start()
        backends = [{"service": "orders", "port": 8080}]
        apply(
            api,
            route("secure", namespace, {"match": {"pathPrefix": "/secure"}, "backends": backends, "auth": {"scopes": ["orders:write"]}}),
            route("open", namespace, {"match": {"pathPrefix": "/open"}, "backends": backends, "auth": {"required": False},
                                      "rateLimits": [{"key": "ip", "limit": 1, "window": "60s"}]}),
        )
        wait_for(lambda: stack.get("/open").status == 200, 10, "the public route served")
        wait_for(lambda: conditions(api, namespace, "secure").get("Accepted", {}).get("reason") == "Unenforceable", 10,
                 "Accepted=False on the refused Route")
        accepted = conditions(api, namespace, "secure")["Accepted"]
        assert accepted["status"] == "False"
        assert "auth: the route requires a token, and this gateway has no authorization check" in accepted["message"]
        assert "Helm: extAuthz.enabled=true with extAuthz.issuers" in accepted["message"]
        assert conditions(api, namespace, "secure")["Programmed"]["reason"] == "NotServing"
        assert stack.get("/secure").status == 404, "never served open"

        # Served without its limits by the operator's choice, and the object says so.
        wait_for(lambda: conditions(api, namespace, "open").get("Enforced", {}).get("status") == "False", 10, "Enforced=False")
        enforced = conditions(api, namespace, "open")["Enforced"]
        assert enforced["reason"] == "NotEnforced" and "rateLimits: not enforced" in enforced["message"]
        assert conditions(api, namespace, "open")["Accepted"]["status"] == "True"
        assert [stack.get("/open").status for _ in range(3)] == [200, 200, 200]
    finally:
        stack.stop()
