"""The status page's route table (what ``GET /status/routes`` answers) and the document's
guards: no data in it, and a Content-Security-Policy naming its own script and style."""

from __future__ import annotations

import base64
import hashlib
import re

from control_plane.model.conflicts import Conflict
from control_plane.model.route import Origin, Route
from control_plane.model.schema import RouteSpec
from control_plane.proxy_status import Nack, Proxy
from control_plane.status_page import HEADERS, PAGE, is_envoy, route_rows
from control_plane.status_page_html import SCRIPT, STYLE
from control_plane.translator.pipeline import RouteProblem

LATEST = {"*": "rds-2"}


def route(name: str, *, source: str = "git", path: str = "/a") -> Route:
    spec = RouteSpec.model_validate({"match": {"path": path}, "backends": [{"service": "s", "port": 80}]})
    location = f"default/{name}" if source == "kubernetes" else f"routes/{name}.yaml"
    return Route("default", name, spec, Origin(source, location, revision="0123456789abcdef0123", line=1))


def envoy(node: str, rds: str = "rds-2", group: str = "gateway") -> Proxy:
    proxy = Proxy(stream_id=hash(node) & 0xFFFF, node_id=node, group=group, protocol="sotw")
    proxy.subscribed = {"CDS", "EDS", "LDS", "RDS"}
    proxy.acked = {"CDS": "c1", "EDS": "e1", "LDS": "l1", "RDS": rds}
    return proxy


def service(node: str) -> Proxy:
    proxy = Proxy(stream_id=hash(node) & 0xFFFF, node_id=node, group="ratelimit", protocol="sotw")
    proxy.subscribed = {"POLICY"}
    proxy.acked = {"POLICY": "p1"}
    return proxy


def nack(proxy: Proxy, error: str, *routes: Route) -> None:
    proxy.nacked["RDS"] = Nack(proxy.node_id, proxy.group, "RDS", "rds-2", error,
                               [{"route": r.id, "origin": str(r.origin)} for r in routes])


def rows(**kwargs: object) -> dict[str, dict[str, object]]:
    defaults: dict[str, object] = {"model": (), "problems": {}, "rejected": {}, "conflicts": (), "proxies": (), "latest_rds": LATEST}
    answer = route_rows(**{**defaults, **kwargs})  # type: ignore[arg-type]
    return {r["route"]: r for r in answer["routes"]}


def test_every_route_is_programmed_once_every_envoy_acked_the_latest_route_configuration() -> None:
    a, b = route("a"), route("b", path="/b")
    answer = route_rows(model=(a, b), problems={}, rejected={}, conflicts=(), proxies=[envoy("e0"), envoy("e1"), service("rl")],
                        latest_rds=LATEST)
    assert answer["total"] == 2 and answer["problems"] == 0
    for row in answer["routes"]:
        assert row["accepted"] == {"status": "True", "reason": "Accepted", "message": "route is valid"}
        assert row["programmed"]["status"] == "True" and "every connected Envoy (2)" in row["programmed"]["message"]
    assert answer["routes"][0]["origin"] == "git:routes/a.yaml:1@0123456789ab"


def test_a_nack_makes_the_routes_it_names_rejected_with_envoys_message_and_the_rest_pending() -> None:
    a, huge = route("a"), route("huge", path="/h")
    refusing, current = envoy("strict-0", rds="rds-1"), envoy("gateway-0")
    nack(refusing, "regex '/(x|y)' RE2 program size of 26 > max program size of 5", huge)
    table = rows(model=(a, huge), proxies=[current, refusing])
    assert table["default/huge"]["programmed"] == {
        "status": "False", "reason": "Rejected",
        "message": "strict-0 NACKed RDS: regex '/(x|y)' RE2 program size of 26 > max program size of 5",
    }
    pending = table["default/a"]["programmed"]
    assert (pending["status"], pending["reason"]) == ("Unknown", "Pending")
    assert "waiting for strict-0" in pending["message"] and "refused it and serve the last one they accepted" in pending["message"]
    assert list(table) == ["default/huge", "default/a"], "problems first"


def test_a_group_is_compared_with_its_own_latest_version_and_services_never_count_as_envoys() -> None:
    edge = envoy("edge-0", rds="rds-edge", group="edge")
    table = rows(model=(route("a"),), proxies=[edge, envoy("gateway-0"), service("rl")], latest_rds={"*": "rds-2", "edge": "rds-edge"})
    assert table["default/a"]["programmed"]["status"] == "True"
    assert table["default/a"]["programmed"]["message"].startswith("every connected Envoy (2)")
    assert is_envoy(edge) and not is_envoy(service("rl"))
    nobody = rows(model=(route("a"),), proxies=[service("rl")])
    assert nobody["default/a"]["programmed"] == {"status": "Unknown", "reason": "NoEnvoy", "message": "no Envoy is connected"}


def test_a_service_that_nacks_a_routes_policy_marks_that_route_rejected() -> None:
    limited, rl = route("limited"), service("ratelimit-0")
    rl.nacked["POLICY"] = Nack("ratelimit-0", "ratelimit", "POLICY", "p2", "bad policy", [{"route": "default/limited", "origin": "x"}])
    table = rows(model=(limited,), proxies=[envoy("gateway-0"), rl])
    assert table["default/limited"]["programmed"]["message"] == "ratelimit-0 NACKed POLICY: bad policy"


def test_quarantined_conflicting_and_refused_objects_are_not_accepted_and_not_served() -> None:
    winner, loser = route("orders", path="/o"), route("orders-copy", source="kubernetes", path="/o")
    stale = route("stale", source="kubernetes", path="/s")
    table = rows(
        model=(winner, stale),
        problems={
            "default/broken": RouteProblem(route("broken"), "Invalid", "a translator gap"),
            "default/open": RouteProblem(route("open"), "Unenforceable", "auth: the route requires a token, and this gateway has no check"),
            "default/stale": RouteProblem(stale, "NotEnforced", "rateLimits: not enforced", served=True),
        },
        rejected={"default/stale": "spec.backends: field required", "default/new": "metadata.name: bad"},
        conflicts=(Conflict(loser=loser, winner=winner),),
        proxies=[envoy("gateway-0")],
    )
    assert table["default/broken"]["accepted"] == {"status": "False", "reason": "Invalid", "message": "a translator gap"}
    assert table["default/broken"]["origin"] == "git:routes/broken.yaml:1@0123456789ab"
    assert table["default/broken"]["programmed"]["reason"] == "NotServing"
    # Refused for what the gateway cannot enforce: not accepted, not served, and why.
    assert table["default/open"]["accepted"]["reason"] == "Unenforceable"
    assert table["default/open"]["accepted"]["message"].startswith("auth: the route requires a token")
    assert table["default/open"]["programmed"]["reason"] == "NotServing"
    # Served without something it asks for: accepted and served, and loudly not enforced.
    assert table["default/stale"]["enforced"] == {"status": "False", "reason": "NotEnforced", "message": "rateLimits: not enforced"}
    assert table["default/orders"]["enforced"]["status"] == "True"
    assert table["default/orders-copy"]["accepted"]["reason"] == "Conflict"
    assert "conflicts with default/orders" in str(table["default/orders-copy"]["accepted"]["message"])
    assert table["default/orders-copy"]["programmed"]["status"] == "False"
    # Refused in its latest generation, served in its last good one.
    assert table["default/stale"]["accepted"] == {"status": "False", "reason": "Invalid", "message": "spec.backends: field required"}
    assert table["default/stale"]["programmed"]["status"] == "True"
    assert table["default/new"]["programmed"]["reason"] == "NotServing"
    assert table["default/orders"]["accepted"]["status"] == "True"


def test_a_git_route_is_not_marked_by_a_kubernetes_object_of_the_same_id() -> None:
    table = rows(model=(route("orders"),), rejected={"default/orders": "bad"}, proxies=[envoy("gateway-0")])
    assert table["default/orders"]["accepted"]["status"] == "True"


def test_a_large_table_is_capped_and_keeps_every_problem_first() -> None:
    model = tuple(route(f"r{i:04}", path=f"/r{i}") for i in range(1200))
    answer = route_rows(model=model, problems={"default/zz-broken": RouteProblem(route("zz-broken"), "Invalid", "why")}, rejected={}, conflicts=(), proxies=[envoy("gateway-0")],
                        latest_rds=LATEST, limit=50)
    assert (answer["total"], answer["problems"], len(answer["routes"])) == (1201, 1, 50)
    assert answer["routes"][0]["route"] == "default/zz-broken"
    assert route_rows(model=model, problems={}, rejected={}, conflicts=(), proxies=(), latest_rds=LATEST, limit=10**9)["routes"].__len__() == 1200


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_document_runs_only_its_own_script_and_style_and_reads_data_only_as_text() -> None:
    csp = HEADERS["Content-Security-Policy"]
    assert f"script-src {_csp_hash(SCRIPT)};" in csp and f"style-src {_csp_hash(STYLE)};" in csp
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "'unsafe-inline'" not in csp
    html = PAGE.decode()
    assert f"<script>{SCRIPT}</script>" in html and f"<style>{STYLE}</style>" in html
    assert html.count("<script") == 1
    # Data reaches the DOM only through textContent / text nodes: never parsed as HTML.
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in SCRIPT, sink
    assert re.search(r"fetch\(path", SCRIPT) and '"status"' in SCRIPT and '"status/routes"' in SCRIPT
    assert HEADERS["X-Content-Type-Options"] == "nosniff" and HEADERS["Content-Type"].startswith("text/html")


def test_a_route_left_out_for_a_missing_grant_is_resolved_refs_false_and_the_others_true() -> None:
    from control_plane.model.references import ServiceReference, Unresolved

    spec = RouteSpec.model_validate({"match": {"path": "/s"}, "backends": [{"service": "orders", "port": 80, "namespace": "shop"}]})
    steal = Route("evil", "steal", spec, Origin("kubernetes", "evil/steal"))
    left_out = Unresolved(steal, (ServiceReference("spec.backends[0]", "shop", "orders"),))
    table = rows(model=(route("a"),), unresolved=[left_out], problems={"default/q": RouteProblem(route("q"), "Invalid", "why")}, rejected={"default/new": "bad"}, proxies=[envoy("gateway-0")])
    assert table["evil/steal"]["resolvedRefs"] == {"status": "False", "reason": "RefNotPermitted", "message": left_out.message}
    assert table["evil/steal"]["accepted"]["status"] == "True" and table["evil/steal"]["programmed"]["reason"] == "NotServing"
    assert table["default/a"]["resolvedRefs"]["status"] == "True"
    assert table["default/q"]["resolvedRefs"]["status"] == "True", "the translator quarantines routes whose references held"
    assert table["default/new"]["resolvedRefs"]["status"] == "Unknown"
    assert list(table)[-1] == "default/a", "problems first"
