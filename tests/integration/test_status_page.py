"""The control plane's status page (``GET /`` on its admin port) in a real headless Chromium,
against a real control plane reading a Git repo, a real Envoy and a real ratelimit_svc.

The Envoy runs with a stricter regex limit than the control plane validates against
(``re2.max_program_size.error_level: 5``, Envoy's default is 100), so a valid regex route
is NACKed, as in test_changes.py: the page shows the NACK with Envoy's message and the
route behind it without a reload, and clears it after the fix is committed.

The bad-input test puts markup where route authors control the text: a Git file name
(a route's origin), a regex (quoted in Envoy's NACK message) and an invalid route name
(quoted in the rejected commit's problems). It must show as text. The page's CSP would
stop an inline script or handler even if the page parsed data as HTML, so besides the
window flags the test checks that no element was created from the data.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.browser import chromium, screenshot_on_failure
from tests.harness.ratelimit import RateLimitServiceProcess
from tests.harness.redis import RedisServer
from tests.harness.route_repo import route_doc
from tests.integration.conftest import StackFactory

STRICT_REGEX = {"re2.max_program_size.error_level": 5}
BACKEND = [{"service": "svc-a", "port": 8080}]
HUGE_REGEX = "/(orders|invoices)/[0-9]{4}"

# What the page shows, read from the DOM as rendered text (chromedriver returns objects
# with their keys sorted: order is read as a list).
_READ_PAGE = """
const rows = (selector) => [...document.querySelectorAll(selector)];
const cells = (row) => [...row.cells].map((c) => c.innerText);
return {
  updates: Number(document.body.dataset.updates || 0),
  banner: document.getElementById("banner").innerText,
  ready: document.getElementById("ready").innerText,
  sources: Object.fromEntries(rows("#sources-body tr[data-source]").map((r) => [r.dataset.source, cells(r)])),
  routes: Object.fromEntries(rows("#routes-body tr[data-route]").map((r) => [r.dataset.route, cells(r)])),
  route_order: rows("#routes-body tr[data-route]").map((r) => r.dataset.route),
  envoys: Object.fromEntries(rows("#envoys-body tr[data-node]:not(.nack)").map((r) => [r.dataset.node, r.innerText])),
  nacks: rows("#envoys-body tr.nack").map((r) => ({node: r.dataset.node, type: r.dataset.type, text: r.innerText})),
  services: Object.fromEntries(rows("#services-body tr[data-node]:not(.nack)").map((r) => [r.dataset.node, cells(r)])),
};
"""


def read_page(driver: Any) -> dict[str, Any]:
    state: dict[str, Any] = driver.execute_script(_READ_PAGE)
    return state


def wait_page(driver: Any, predicate: Callable[[dict[str, Any]], bool], what: str, timeout: float = 20.0) -> dict[str, Any]:
    """Poll the rendered page until ``predicate`` holds; fail with what it last showed."""
    deadline = time.monotonic() + timeout
    while True:
        state = read_page(driver)
        if predicate(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for the page to show {what}; it shows:\n{json.dumps(state, indent=1)}")
        time.sleep(0.1)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """Asked for first, so a missing Chromium ends the test before any service starts."""
    with chromium(tmp_path / "chromium") as driver:
        yield driver


def test_status_page_shows_a_nack_with_its_route_and_clears_it_after_the_fix(
    browser: Any, make_stack: StackFactory, redis: RedisServer, tmp_path: Path
) -> None:
    stack = make_stack(envoy_runtime=STRICT_REGEX, upstreams=("svc-a",))
    first = stack.commit_routes({"a.yaml": [route_doc("a", {"auth": {"required": False}, "match": {"pathPrefix": "/a"}, "backends": BACKEND})]})
    stack.start(wait_path="/a")
    ratelimit = RateLimitServiceProcess(tmp_path / "rl", redis_url=redis.url, name="ratelimit-0")
    ratelimit.start(stack.control_plane.xds_port)
    try:
        with screenshot_on_failure(browser, tmp_path):
            response = urllib.request.urlopen(stack.control_plane.admin_url + "/", timeout=5)
            assert "script-src 'sha256-" in response.headers["Content-Security-Policy"]
            browser.get(stack.control_plane.admin_url + "/?refresh=0.5")
            assert browser.title == "Gatehouse status"

            page = wait_page(browser, lambda p: "ratelimit-0" in p["services"] and "in sync" in p["envoys"].get("gateway-0", ""),
                             "gateway-0 in sync and ratelimit-0 connected")
            assert page["ready"].startswith("ready") and page["banner"] == ""
            name, kind, serving, routes, last_sync, _details, problems = page["sources"]["routes"]
            assert (name, kind, serving, routes, problems) == ("routes", "git", first[:12], "1", "ok")
            assert last_sync.endswith("s ago"), last_sync
            route, origin, accepted, programmed, resolved, enforced = page["routes"]["default/a"]
            assert origin.startswith("git:routes/a.yaml:1@" + first[:12]) and accepted.startswith("True")
            assert programmed.startswith("True") and "Programmed" in programmed
            assert resolved.startswith("True") and "ResolvedRefs" in resolved
            assert enforced.startswith("True") and "Enforced" in enforced
            assert page["nacks"] == []
            node, cluster, _protocol, subscribed, acked, _connected, state = page["services"]["ratelimit-0"]
            assert (node, subscribed, state) == ("ratelimit-0", "POLICY", "in sync") and acked.startswith("POLICY ")
            assert "ratelimit-0" not in page["envoys"], "an xDS client that asks for no Envoy type is a service"

            stack.commit_routes(
                {"huge.yaml": [route_doc("huge", {"auth": {"required": False}, "match": {"pathRegex": HUGE_REGEX}, "backends": BACKEND})]},
                "a regex this Envoy refuses",
            )
            stack.control_plane.sync()
            page = wait_page(browser, lambda p: any(n["node"] == "gateway-0" and n["type"] == "RDS" for n in p["nacks"]),
                             "gateway-0's RDS NACK")
            nack = page["nacks"][0]["text"]
            assert "program size" in nack and HUGE_REGEX in nack, nack
            assert "caused by default/huge (git:routes/huge.yaml:1@" in nack, nack
            assert "NACKED RDS" in page["envoys"]["gateway-0"]
            huge = page["routes"]["default/huge"]
            assert huge[3].startswith("False") and "Rejected" in huge[3] and "gateway-0 NACKed RDS" in huge[3] and "program size" in huge[3]
            assert page["route_order"] == ["default/huge", "default/a"], "problems first"
            assert "Pending" in page["routes"]["default/a"][3] and "refused it" in page["routes"]["default/a"][3]
            table = json.loads(urllib.request.urlopen(stack.control_plane.admin_url + "/status/routes?limit=1", timeout=5).read())
            assert (table["total"], table["problems"], [r["route"] for r in table["routes"]]) == (2, 1, ["default/huge"])
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(stack.control_plane.admin_url + "/status/routes?limit=all", timeout=5)
            assert refused.value.code == 400

            stack.repo.remove("huge.yaml")
            fixed = stack.repo.commit("drop the regex")
            stack.control_plane.sync()
            page = wait_page(browser, lambda p: not p["nacks"] and "in sync" in p["envoys"].get("gateway-0", "")
                             and p["sources"]["routes"][2] == fixed[:12], "the NACK cleared after the fix")
            assert "default/huge" not in page["routes"] and page["routes"]["default/a"][3].startswith("True")
            history = browser.execute_script("return document.getElementById('nacks-body').textContent")
            assert "program size" in history, "the NACK stays in the history"
    finally:
        ratelimit.stop()


SCRIPT_PAYLOAD = "<script>window.__xssScript=1</script>"
IMG_PAYLOAD = "<img src=x onerror=window.__xssImg=1>"
NAME_PAYLOAD = "<img src=y onerror=window.__xssName=1>"


def test_markup_in_file_names_nack_messages_and_rejected_names_shows_as_text(browser: Any, make_stack: StackFactory, tmp_path: Path) -> None:
    stack = make_stack(envoy_runtime=STRICT_REGEX, upstreams=("svc-a",))
    stack.commit_routes({"a.yaml": [route_doc("a", {"auth": {"required": False}, "match": {"pathPrefix": "/a"}, "backends": BACKEND})]})
    stack.start(wait_path="/a")
    with screenshot_on_failure(browser, tmp_path):
        # A file name becomes the route's origin; the regex is quoted in Envoy's NACK message.
        stack.commit_routes(
            {f"{IMG_PAYLOAD}.yaml": [route_doc("x", {"auth": {"required": False}, "match": {"pathRegex": "/x/" + SCRIPT_PAYLOAD}, "backends": BACKEND})]},
            "markup in a file name and a regex",
        )
        stack.control_plane.sync()
        browser.get(stack.control_plane.admin_url + "/?refresh=0.5")
        page = wait_page(browser, lambda p: bool(p["nacks"]), "the NACK of the regex route")
        # An invalid name is quoted in the problems of the commit that is rejected.
        stack.commit_routes({"bad-name.yaml": [route_doc(NAME_PAYLOAD, {"auth": {"required": False}, "match": {"pathPrefix": "/b"}, "backends": BACKEND})]}, "bad name")
        stack.control_plane.sync()
        page = wait_page(browser, lambda p: NAME_PAYLOAD in p["sources"]["routes"][6], "the rejected commit's problem")

        nack = page["nacks"][0]["text"]
        assert SCRIPT_PAYLOAD in nack, nack
        assert f"caused by default/x (git:routes/{IMG_PAYLOAD}.yaml:1@" in nack, nack
        origin = page["routes"]["default/x"][1]
        assert origin.startswith(f"git:routes/{IMG_PAYLOAD}.yaml:1@"), origin
        assert SCRIPT_PAYLOAD in page["routes"]["default/x"][3]
        assert "rejected" in page["sources"]["routes"][6]

        flags = browser.execute_script("return [typeof window.__xssScript, typeof window.__xssImg, typeof window.__xssName]")
        assert flags == ["undefined", "undefined", "undefined"]
        made = browser.execute_script("return [document.querySelectorAll('img').length, document.scripts.length]")
        assert made == [0, 1], "elements were created from data: only the page's own script may exist"
        # The page keeps refreshing: its script ran under the CSP and nothing broke it.
        updates = page["updates"]
        wait_page(browser, lambda p: p["updates"] > updates + 1, "two more refreshes")


def test_a_route_without_its_reference_grant_shows_resolved_refs_false(browser: Any, make_stack: StackFactory, tmp_path: Path) -> None:
    """Issue 24, hole 9, on the page: the route left out for a missing grant has its row."""
    stack = make_stack(upstreams=("svc-a",), git_namespaces=["default", "evil"])
    stack.commit_routes({
        "a.yaml": [
            route_doc("a", {"auth": {"required": False}, "match": {"pathPrefix": "/a"}, "backends": BACKEND}),
            route_doc("steal", {"auth": {"required": False}, "match": {"pathPrefix": "/steal"}, "backends": [{"service": "svc-a", "port": 8080, "namespace": "shop"}]}, namespace="evil"),
        ],
    })  # fmt: skip
    stack.start(wait_path="/a")
    with screenshot_on_failure(browser, tmp_path):
        browser.get(stack.control_plane.admin_url + "/?refresh=0.5")
        page = wait_page(browser, lambda p: "evil/steal" in p["routes"], "the row of evil/steal")
        _, origin, accepted, programmed, resolved, _enforced = page["routes"]["evil/steal"]
        assert origin.startswith("git:routes/a.yaml:") and accepted.startswith("True")
        assert programmed.startswith("False") and "NotServing" in programmed
        assert resolved.startswith("False") and "RefNotPermitted" in resolved
        assert "spec.backends[0]: Service shop/svc-a is in another namespace" in resolved
        assert page["route_order"][0] == "evil/steal", "problems first"
        assert page["routes"]["default/a"][4].startswith("True")
