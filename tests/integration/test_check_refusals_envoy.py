"""One route the authorization check cannot serve costs that route only (issue 25, item 1).

A waiting-room route on a gateway whose ext_authz has no ticket key (the control plane was
not told what the check lacks: no ``extAuthz.features``) used to make ext_authz NACK its
whole route table, so every later route change stayed out of it: a new route answered 503
until the room route was removed. Now the check refuses that route alone: it answers 503
for it (fail closed), applies every other route's rules, and NACKs naming it, which the
control plane puts on the route's status.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.http_client import wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory, ext_authz_entry


def test_a_route_the_check_refuses_blocks_no_other_route(make_stack: StackFactory, tmp_path: Path) -> None:
    issuer = TestIssuer()
    authz = ExtAuthzProcess(
        tmp_path / "authz",
        {"issuers": [{"issuer": issuer.issuer, "audiences": [issuer.audience], "jwksFile": str(issuer.write_jwks(tmp_path / "jwks.json")),
                      "requiredClaims": ["exp"]}]},
        transport="http",
    )
    stack = make_stack(upstreams=("svc-a",), control_plane_extra={"extAuthz": ext_authz_entry([authz])})
    backend = [{"service": "svc-a", "port": 8080}]
    room = route_doc("launch", {"match": {"pathPrefix": "/launch"}, "backends": backend, "auth": {"required": False},
                                "waitingRoom": {"admitPerSecond": 5, "maxWaiting": 10}})
    orders = route_doc("orders", {"match": {"pathPrefix": "/orders"}, "backends": backend})
    stack.commit_routes({"r.yaml": [orders, room]})
    try:
        stack.start()
        authz.use_control_plane(stack.control_plane.xds_port)
        authz.start()
        token = {"authorization": f"Bearer {issuer.token('alice')}"}
        wait_for(lambda: stack.get("/orders/1", headers=token).status == 200, 20, "the first route served")
        refused = stack.get("/launch/now")
        assert refused.status == 503, "the room the check cannot decide is never served open"

        # A route added after the refused one reaches the check: 401 without a token, 200 with one.
        reports = route_doc("reports", {"match": {"pathPrefix": "/reports"}, "backends": backend})
        stack.commit_routes({"r.yaml": [orders, room, reports]})
        wait_for(lambda: stack.get("/reports/q3").status == 401, 10, "the new route checked")
        assert stack.get("/reports/q3", headers=token).status == 200

        # The refusal is on the route's status, with the check's reason; the others are programmed.
        code, body = stack.control_plane._request("/status/routes")
        rows = {row["route"]: row for row in json.loads(body)["routes"]}
        programmed = rows["default/launch"]["programmed"]
        assert programmed["reason"] == "Rejected" and "has a waiting room, and ext_authz has no http.waitingRoom" in programmed["message"]
        assert rows["default/reports"]["programmed"]["status"] == "True"
        nacks = stack.control_plane.status()["nacks"]
        assert any("default/launch" in json.dumps(nack) for nack in nacks), nacks
    finally:
        authz.stop()
