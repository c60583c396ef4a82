"""Route changes from Git reach a running Envoy quickly, safely and without a restart."""

from __future__ import annotations

import time
from typing import Any

from tests.harness.http_client import Load, wait_for
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory


def route(name: str, path: str, *services: str, weights: tuple[int, ...] = (), rev: str = "1") -> dict[str, Any]:
    backends: list[dict[str, Any]] = [{"service": s, "port": 8080} for s in services]
    for item, weight in zip(backends, weights):
        item["weight"] = weight
    return route_doc(
        name,
        {"auth": {"required": False}, "match": {"pathPrefix": path}, "backends": backends, "headers": {"response": {"set": {"x-rev": rev}}}},
    )


def uptime_seconds(info: dict[str, Any]) -> float:
    return float(str(info["uptime_current_epoch"]).rstrip("s"))


def test_commit_is_served_within_a_second_without_restart(make_stack: StackFactory, protocol: str) -> None:
    stack = make_stack(delta=protocol == "delta", poll_interval="200ms")
    stack.commit_routes({"a.yaml": [route("a", "/a", "svc-a", rev="1")]})
    stack.start(wait_path="/a")
    assert stack.envoy is not None
    before = stack.envoy.server_info()
    time.sleep(1.1)  # uptime is reported in whole seconds

    stack.commit_routes({"a.yaml": [route("a", "/a", "svc-b", rev="2")]}, "move /a to svc-b")
    committed = time.monotonic()
    wait_for(lambda: stack.get("/a").headers.get("x-rev") == "2", 5, "/a at rev 2")
    latency = time.monotonic() - committed
    assert latency < 1.0, f"change took {latency:.3f}s to reach Envoy (polling every 200ms)"
    assert stack.get("/a").upstream == "svc-b"

    after = stack.envoy.server_info()
    assert after["command_line_options"]["restart_epoch"] == 0 == before["command_line_options"]["restart_epoch"]
    assert uptime_seconds(after) > uptime_seconds(before), "Envoy's uptime went back: it restarted"
    assert stack.envoy.pid == stack.envoy.process.pid and stack.envoy.alive()


def test_removed_route_answers_404(make_stack: StackFactory) -> None:
    stack = make_stack()
    stack.commit_routes({"a.yaml": [route("a", "/a", "svc-a")], "b.yaml": [route("b", "/b", "svc-b")]})
    stack.start(wait_path="/b")
    stack.repo.remove("b.yaml")
    stack.repo.commit("remove b")
    stack.control_plane.sync()
    stack.wait_status("/b", 404, timeout=5)
    assert stack.get("/a").status == 200


def test_invalid_commit_is_rejected_and_last_good_keeps_serving(make_stack: StackFactory) -> None:
    stack = make_stack()
    good = stack.commit_routes({"a.yaml": [route("a", "/a", "svc-a")]})
    stack.start(wait_path="/a")

    bad_file = (
        "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: b}\n"
        "spec:\n  match: {path: /b}\n  backends:\n    - {service: svc-b, port: 8080, weight: -3}\n"
    )
    stack.repo.write("a.yaml", [route("a", "/a", "svc-b", rev="2")])  # would move /a: must not apply
    stack.repo.write("b.yaml", bad_file)
    bad = stack.repo.commit("bad weight")
    result = stack.control_plane.sync()["sources"]["routes"]
    assert result["commit"] == bad and result["accepted"] is False
    assert any("b.yaml:7: spec.backends[0].weight" in p and "greater than or equal to 0" in p for p in result["problems"]), result

    status = {s["name"]: s for s in stack.control_plane.status()["sources"]}["routes"]
    assert status["serving"] == good
    assert status["rejected"]["commit"] == bad
    assert stack.control_plane.metric("gatehouse_source_rejections_total", source="routes") == 1
    # The whole commit is refused: /a stays where the last good commit put it.
    for _ in range(20):
        reply = stack.get("/a")
        assert (reply.status, reply.upstream, reply.headers.get("x-rev")) == (200, "svc-a", "1")
    assert stack.get("/b").status == 404

    stack.repo.write("b.yaml", [route("b", "/b", "svc-b")])
    fixed = stack.repo.commit("fix weight")
    result = stack.control_plane.sync()["sources"]["routes"]  # the poll may have applied it already
    assert (result["commit"], result["accepted"], result["problems"]) == (fixed, True, [])
    stack.wait_upstream("/a", "svc-b")
    stack.wait_status("/b", 200)


def test_envoy_nack_is_reported_with_its_message_and_route(make_stack: StackFactory, protocol: str) -> None:
    # This Envoy is stricter about regex size than Envoy's default (100), which is what
    # the control plane validates against: a valid route is NACKed, as happens when a
    # fleet runs with tighter runtime limits than the control plane assumes.
    stack = make_stack(delta=protocol == "delta", envoy_runtime={"re2.max_program_size.error_level": 5})
    stack.commit_routes({"a.yaml": [route("a", "/a", "svc-a")]})
    stack.start(wait_path="/a")

    huge = "/(orders|invoices)/[0-9]{4}"
    stack.commit_routes(
        {
            "a.yaml": [route("a", "/a", "svc-b", rev="2")],
            "huge.yaml": [route_doc("huge", {"auth": {"required": False}, "match": {"pathRegex": huge}, "backends": [{"service": "svc-a", "port": 8080}]})],
        },
        "add an over-complex regex",
    )
    assert stack.control_plane.sync()["sources"]["routes"]["accepted"] is True

    def nacked() -> list[dict[str, Any]]:
        return [n for n in stack.control_plane.status()["nacks"] if n["type"] == "RDS"]

    wait_for(lambda: bool(nacked()), 10, "an RDS NACK in /status")
    nack = nacked()[0]
    assert "program size" in nack["error"], nack["error"]
    assert {"route": "default/huge", "origin": nack["routes"][0]["origin"]} in nack["routes"]
    assert nack["routes"][0]["origin"].startswith("git:routes/huge.yaml")
    assert stack.control_plane.metric("gatehouse_xds_nacks_total", type="RDS") >= 1
    proxy = stack.control_plane.status()["proxies"][0]
    assert "RDS" in proxy["nacked"]
    # The last accepted config keeps serving: /a is still on svc-a at rev 1.
    for _ in range(20):
        reply = stack.get("/a")
        assert (reply.status, reply.upstream, reply.headers.get("x-rev")) == (200, "svc-a", "1")

    stack.repo.remove("huge.yaml")
    stack.repo.commit("drop the regex")
    stack.control_plane.sync()
    stack.wait_upstream("/a", "svc-b")
    wait_for(lambda: not stack.control_plane.status()["proxies"][0]["nacked"], 5, "NACK cleared by an ACK")


def test_route_changes_under_load_cause_no_errors(make_stack: StackFactory, protocol: str) -> None:
    stack = make_stack(upstreams=("svc-a", "svc-b", "svc-c"), delta=protocol == "delta")
    stack.set_endpoints({"svc-a": [], "svc-b": [], "svc-c": []})  # filled once upstreams exist
    stack.commit_routes({"load.yaml": [route("load", "/load", "svc-a")]})
    stack.endpoints_path.unlink()
    stack.start(wait_path="/load")
    # svc-c's endpoints are only known once the route that needs its cluster arrives.
    stack.set_endpoints({name: [u.address] for name, u in stack.upstreams.items()})

    with Load(stack.listener_port, ["/load", "/load/x"], workers=4) as load:
        time.sleep(0.5)
        steps = [
            ("add a route", {"load.yaml": [route("load", "/load", "svc-a"), route("extra", "/extra", "svc-b")]}),
            ("reweight", {"load.yaml": [route("load", "/load", "svc-a", "svc-b", weights=(50, 50)), route("extra", "/extra", "svc-b")]}),
            ("remove a route", {"load.yaml": [route("load", "/load", "svc-a", "svc-b", weights=(50, 50))]}),
            ("new backend cluster", {"load.yaml": [route("load", "/load", "svc-c")]}),
        ]
        for what, files in steps:
            stack.commit_routes(files, what)
            assert stack.control_plane.sync()["sources"]["routes"]["accepted"], what
            time.sleep(0.7)
        stack.wait_upstream("/load", "svc-c", timeout=5)
        time.sleep(0.3)
    report = load.report
    assert report.total > 500, f"too little load to prove anything: {report.total}"
    assert report.non_2xx == 0, f"{report.non_2xx} failures of {report.total}: {report.failures[:10]}"
    assert report.upstreams["svc-c"] > 0 and report.upstreams["svc-b"] > 0


def test_envoy_survives_and_reconnects_to_a_restarted_control_plane(make_stack: StackFactory, protocol: str) -> None:
    stack = make_stack(delta=protocol == "delta")
    stack.commit_routes({"a.yaml": [route("a", "/a", "svc-a")]})
    stack.start(wait_path="/a")

    stack.control_plane.kill()
    for _ in range(50):
        assert stack.get("/a").upstream == "svc-a"
        time.sleep(0.02)

    stack.commit_routes({"a.yaml": [route("a", "/a", "svc-b", rev="2")]}, "change while the control plane is down")
    assert stack.get("/a").upstream == "svc-a"
    stack.control_plane.start()
    stack.wait_upstream("/a", "svc-b", timeout=10)
    wait_for(lambda: len(stack.control_plane.status()["proxies"]) == 1, 5, "Envoy reconnected")
