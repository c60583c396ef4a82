"""Make-before-break planning, with hand-made resources and no stream.

Each test plays the part of Envoy at the level of ``StreamState``: it subscribes,
records what ``plan`` would send as in flight (exactly as the stream loop does), and
ACKs or NACKs it. Resource bodies are arbitrary bytes; only names, versions and
references matter to planning.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping


from control_plane.cache import Resource, ResourceType, Snapshot, set_version
from control_plane.server.subscriptions import Plan, StreamState

CDS, EDS, LDS, RDS = ResourceType.CLUSTER, ResourceType.ENDPOINT, ResourceType.LISTENER, ResourceType.ROUTE
ROUTE_CONFIG = "gatehouse_http"
LISTENER = "gatehouse_http"

_nonces = itertools.count(1)


def resource(kind: ResourceType, name: str, version: str, refs: tuple[str, ...] = ()) -> Resource:
    return Resource(kind, name, f"{kind.short}:{name}@{version}".encode(), version, references=refs)


def snapshot(
    clusters: Mapping[str, str],
    *,
    endpoints: Mapping[str, str] | None = None,
    route: tuple[str, tuple[str, ...]] | None = None,
    listener: str = "l1",
) -> Snapshot:
    """clusters: name → version; endpoints default to "e-<cluster version>"; route: (version, refs).

    Each cluster is an EDS cluster named for its assignment, as the translator makes them.
    """
    if endpoints is None:
        endpoints = {name: f"e-{version}" for name, version in clusters.items()}
    if route is None:
        route = ("r-" + "-".join(sorted(clusters)), tuple(sorted(clusters)))
    return Snapshot.build(
        clusters=[resource(CDS, n, v, (n,)) for n, v in clusters.items()],
        endpoints=[resource(EDS, n, v) for n, v in endpoints.items()],
        listeners=[resource(LDS, LISTENER, listener, (ROUTE_CONFIG,))],
        routes=[resource(RDS, ROUTE_CONFIG, route[0], route[1])],
    )


# -- a planning-level Envoy ------------------------------------------------------------


def send(state: StreamState, kind: ResourceType, snap: Snapshot) -> Plan | None:
    """What the stream loop does with a plan: mark it in flight."""
    plan = state.plan(kind, snap)
    if plan is not None:
        state.sent(plan, str(next(_nonces)), snap, 0.0)
    return plan


def ack(state: StreamState, kind: ResourceType) -> None:
    assert state[kind].inflight is not None, f"nothing in flight to ACK for {kind.short}"
    state[kind].acknowledge()


def nack(state: StreamState, kind: ResourceType) -> None:
    assert state[kind].inflight is not None, f"nothing in flight to NACK for {kind.short}"
    state[kind].reject()


def subscribe_wildcard(state: StreamState, kind: ResourceType) -> None:
    state[kind].requested = True
    state[kind].wildcard = True


def subscribe_names(state: StreamState, kind: ResourceType, names: set[str]) -> None:
    """A SotW-style named subscription: the whole set, dropping ACKed state of names that left."""
    type_state = state[kind]
    type_state.requested = True
    for name in type_state.names - names:
        type_state.acked.pop(name, None)
        type_state.acked_version = ""
    type_state.names = set(names)


def converge(state: StreamState, snap: Snapshot) -> list[tuple[ResourceType, Plan]]:
    """Act as an Envoy that ACKs everything and follows CDS/LDS with EDS/RDS subscriptions."""
    sent: list[tuple[ResourceType, Plan]] = []
    for _ in range(20):
        progressed = False
        for kind in ResourceType:
            plan = send(state, kind, snap)
            if plan is None:
                continue
            progressed = True
            sent.append((kind, plan))
            ack(state, kind)
            if kind is CDS:
                subscribe_names(state, EDS, set(state[CDS].acked))
            if kind is LDS:
                subscribe_names(state, RDS, {n for r in state[LDS].acked.values() for n in r.references})
        if not progressed:
            return sent
    raise AssertionError("planning did not converge")


def fresh(*, sotw: bool = True) -> StreamState:
    state = StreamState(full_state_for_wildcard=sotw)
    subscribe_wildcard(state, CDS)
    subscribe_wildcard(state, LDS)
    return state


def names(resources: list[Resource]) -> list[str]:
    return sorted(r.name for r in resources)


def versions(resources: Mapping[str, Resource]) -> dict[str, str]:
    return {name: r.version for name, r in resources.items()}


# -- initial connect -------------------------------------------------------------------


def test_initial_connect_sends_cds_first_and_holds_rds_until_its_cluster_has_acked_endpoints() -> None:
    snap = snapshot({"c1": "v1"})
    state = fresh()

    assert send(state, EDS, snap) is None, "EDS before Envoy asked for it"
    assert send(state, RDS, snap) is None, "RDS before Envoy asked for it"
    cds = send(state, CDS, snap)
    assert cds is not None and names(cds.changed) == ["c1"]
    assert send(state, CDS, snap) is None, "a second CDS response while one is in flight"

    lds = send(state, LDS, snap)
    assert lds is not None and names(lds.changed) == [LISTENER]
    ack(state, LDS)
    subscribe_names(state, RDS, {ROUTE_CONFIG})
    assert send(state, RDS, snap) is None, "RDS sent while c1 is only in flight in CDS"

    ack(state, CDS)
    assert send(state, RDS, snap) is None, "RDS sent before c1's endpoints were sent at all"

    subscribe_names(state, EDS, {"c1"})
    eds = send(state, EDS, snap)
    assert eds is not None and names(eds.changed) == ["c1"]
    assert send(state, RDS, snap) is None, "RDS sent while c1's endpoints are only in flight"

    ack(state, EDS)
    rds = send(state, RDS, snap)
    assert rds is not None
    assert names(rds.changed) == [ROUTE_CONFIG]
    assert rds.changed[0].version == "r-c1"
    assert rds.version == set_version([snap.routes[ROUTE_CONFIG]])


def test_a_converged_stream_plans_nothing_more() -> None:
    snap = snapshot({"c1": "v1", "c2": "v1"})
    state = fresh()
    sent = converge(state, snap)
    assert [kind for kind, _ in sent] == [CDS, EDS, LDS, RDS]
    for kind in ResourceType:
        assert state.plan(kind, snap) is None, kind.short
        assert versions(state[kind].acked) == versions(snap.of(kind)), kind.short


def test_named_types_only_carry_subscribed_names() -> None:
    snap = snapshot({"c1": "v1", "c2": "v1"})
    state = fresh()
    assert send(state, CDS, snap) is not None
    ack(state, CDS)
    subscribe_names(state, EDS, {"c1"})
    eds = send(state, EDS, snap)
    assert eds is not None
    assert names(eds.changed) == ["c1"]
    assert set(eds.target) == {"c1"}


# -- adding and removing clusters ------------------------------------------------------


def test_a_route_to_a_new_cluster_waits_for_that_cluster_and_its_endpoints() -> None:
    before = snapshot({"c1": "v1"})
    after = snapshot({"c1": "v1", "c2": "v1"})
    state = fresh()
    converge(state, before)

    assert send(state, RDS, after) is None, "RDS pointing at c2 sent before CDS carried c2"
    cds = send(state, CDS, after)
    assert cds is not None
    assert set(cds.target) == {"c1", "c2"}
    assert names(cds.changed) == ["c2"]
    assert send(state, RDS, after) is None, "RDS pointing at c2 sent while c2 is in flight"

    ack(state, CDS)
    subscribe_names(state, EDS, {"c1", "c2"})
    eds = send(state, EDS, after)
    assert eds is not None and names(eds.changed) == ["c2"], "unchanged c1 endpoints resent"
    assert send(state, RDS, after) is None, "RDS pointing at c2 sent before c2's endpoints were ACKed"

    ack(state, EDS)
    rds = send(state, RDS, after)
    assert rds is not None
    assert [r.references for r in rds.changed] == [("c1", "c2")]
    assert send(state, LDS, after) is None, "the listener did not change"


def test_a_cluster_acked_routes_still_use_stays_until_the_new_routes_are_acked() -> None:
    before = snapshot({"c1": "v1", "c2": "v1"})
    after = snapshot({"c1": "v1"})  # the route config now points at c1 only
    state = fresh()
    converge(state, before)

    assert send(state, CDS, after) is None, "CDS dropped c2 while Envoy's routes still point at it"
    assert send(state, EDS, after) is None, "c2's endpoints withdrawn while c2 is kept"

    rds = send(state, RDS, after)
    assert rds is not None and [r.references for r in rds.changed] == [("c1",)]
    assert send(state, CDS, after) is None, "CDS dropped c2 while the route change is only in flight"

    ack(state, RDS)
    cds = send(state, CDS, after)
    assert cds is not None
    assert set(cds.target) == {"c1"}
    assert cds.removed == ["c2"]
    assert cds.changed == []

    ack(state, CDS)
    # Envoy still subscribed to c2's endpoints: now that CDS no longer has c2, they go too.
    eds = send(state, EDS, after)
    assert eds is not None
    assert eds.removed == ["c2"] and eds.changed == []
    ack(state, EDS)
    assert set(state[EDS].acked) == {"c1"}


def test_a_route_back_to_a_cluster_an_unacked_cds_removes_waits_for_it_to_return() -> None:
    """Issue 40: a backend flipped A → B → A → B. The CDS dropping B is written but not yet
    ACKed when the route points at B again; B is still in what Envoy ACKed, yet Envoy will
    apply that CDS first, so a route config sent now would point at no cluster (503 NC)."""
    on_b = snapshot({"a": "v1", "b": "v1"}, route=("r-b", ("b",)))
    state = fresh()
    converge(state, on_b)
    converge(state, snapshot({"a": "v1"}, route=("r-a", ("a",))))  # B dropped once A serves
    converge(state, on_b)
    assert set(state[CDS].acked) == {"a", "b"} and versions(state[RDS].acked) == {ROUTE_CONFIG: "r-b"}

    to_a = snapshot({"a": "v1"}, route=("r-a", ("a",)))
    assert send(state, RDS, to_a) is not None
    ack(state, RDS)
    cds = send(state, CDS, to_a)
    assert cds is not None and cds.removed == ["b"], "B is dropped once no acked route uses it"

    # The flip back arrives while that CDS is on the wire.
    assert send(state, RDS, on_b) is None, "the route to B went out behind the CDS that removes B"
    ack(state, CDS)
    subscribe_names(state, EDS, set(state[CDS].acked))
    sent = converge(state, on_b)
    kinds = [kind for kind, _ in sent]
    assert kinds.index(CDS) < kinds.index(EDS) < kinds.index(RDS), kinds
    assert versions(state[RDS].acked) == {ROUTE_CONFIG: "r-b"} and "b" in state[CDS].acked


def test_a_route_change_is_not_held_by_new_endpoints_or_a_new_cluster_version_in_flight() -> None:
    """What the hold-back above must leave alone: a response in flight that only updates a
    cluster or its endpoints (Envoy keeps serving them meanwhile) does not hold routes back,
    or a stream of endpoint changes could hold a route change back for ever."""
    state = fresh()
    converge(state, snapshot({"a": "v1", "b": "v1"}, route=("r-a", ("a",))))
    changed = snapshot({"a": "v2", "b": "v1"}, endpoints={"a": "e-new", "b": "e-v1"}, route=("r-b", ("b",)))
    assert send(state, CDS, changed) is not None
    assert send(state, EDS, changed) is not None
    rds = send(state, RDS, changed)
    assert rds is not None and versions(rds.target) == {ROUTE_CONFIG: "r-b"}
    on_a = snapshot({"a": "v2", "b": "v1"}, endpoints={"a": "e-newer", "b": "e-v1"}, route=("r-a2", ("a",)))
    ack(state, RDS)
    assert send(state, RDS, on_a) is not None, "a's new version and endpoints in flight held the route back"


def test_a_nacked_route_change_keeps_the_clusters_envoys_routes_still_use() -> None:
    """A NACKed route change keeps the clusters of the routes Envoy still runs."""
    before = snapshot({"c1": "v1", "c2": "v1"})
    after = snapshot({"c1": "v1"})
    state = fresh()
    converge(state, before)

    assert send(state, RDS, after) is not None
    nack(state, RDS)
    assert send(state, CDS, after) is None, "c2 dropped although Envoy refused the routes that stop using it"
    assert set(state[CDS].acked) == {"c1", "c2"}


# -- NACKs -----------------------------------------------------------------------------


def test_a_nacked_cds_version_is_not_resent_until_the_clusters_change() -> None:
    before = snapshot({"c1": "v1"})
    after = snapshot({"c1": "v1", "c2": "bad"})
    state = fresh()
    converge(state, before)

    refused = send(state, CDS, after)
    assert refused is not None
    nack(state, CDS)
    assert send(state, CDS, after) is None, "the NACKed CDS version was sent again"
    assert versions(state[CDS].acked) == {"c1": "v1"}, "a NACK must not count as applied"

    endpoints_only = after.with_endpoints(
        [resource(EDS, "c1", "e-new"), resource(EDS, "c2", "e-bad")]
    )
    assert send(state, CDS, endpoints_only) is None, "an endpoint change resent the NACKed clusters"

    fixed = snapshot({"c1": "v1", "c2": "good"})
    retry = send(state, CDS, fixed)
    assert retry is not None and retry.version != refused.version
    assert [r.version for r in retry.changed] == ["good"]
    ack(state, CDS)
    assert state[CDS].nacked_version == ""


def test_a_nacked_cds_holds_back_routes_that_need_the_refused_cluster() -> None:
    before = snapshot({"c1": "v1"})
    after = snapshot({"c1": "v1", "c2": "bad"})
    state = fresh()
    converge(state, before)
    acked_routes = versions(state[RDS].acked)

    assert send(state, CDS, after) is not None
    nack(state, CDS)
    # Envoy has no c2: a route configuration pointing at c2 would route to a missing cluster (503 NC).
    assert send(state, RDS, after) is None
    assert versions(state[RDS].acked) == acked_routes


def test_an_old_eds_nack_does_not_let_rds_overtake_a_new_clusters_endpoints() -> None:
    start = snapshot({"c1": "v1"})
    state = fresh()
    converge(state, start)

    # Envoy refuses one endpoint update of c1; nothing about c1 changes afterwards.
    bad_endpoints = start.with_endpoints([resource(EDS, "c1", "e-bad")])
    assert send(state, EDS, bad_endpoints) is not None
    nack(state, EDS)

    # A new route to a new cluster c2: CDS goes out and is ACKed; Envoy's EDS request for
    # c2 has not been read yet.
    after = snapshot({"c1": "v1", "c2": "v1"}, endpoints={"c1": "e-bad", "c2": "e-v1"})
    assert send(state, CDS, after) is not None
    ack(state, CDS)
    assert send(state, RDS, after) is None, "RDS pointing at c2 sent before c2's endpoints were even requested"


def test_a_nacked_rds_is_not_resent_and_a_new_snapshot_goes_out() -> None:
    start = snapshot({"c1": "v1"})
    state = fresh()
    converge(state, start)

    refused_snap = snapshot({"c1": "v1"}, route=("r-bad", ("c1",)))
    refused = send(state, RDS, refused_snap)
    assert refused is not None
    nack(state, RDS)
    assert state[RDS].nacked_version == refused.version
    assert send(state, RDS, refused_snap) is None
    assert versions(state[RDS].acked) == {ROUTE_CONFIG: "r-c1"}

    good = snapshot({"c1": "v1"}, route=("r-good", ("c1",)))
    plan = send(state, RDS, good)
    assert plan is not None and [r.version for r in plan.changed] == ["r-good"]


# -- watches Envoy re-opens -------------------------------------------------------------


def test_a_changed_cluster_gets_its_unchanged_endpoints_again_before_its_cds_ack() -> None:
    """Envoy rebuilds c1 and waits for its endpoints; it ACKs CDS only once c1 has them."""
    start = snapshot({"c1": "v1", "c2": "v1"})
    state = fresh()
    converge(state, start)
    acked_eds = state[EDS].acked_version

    rebuilt = snapshot({"c1": "v2", "c2": "v1"}, endpoints={"c1": "e-v1", "c2": "e-v1"})
    assert rebuilt.versions[EDS] == start.versions[EDS]
    cds = send(state, CDS, rebuilt)
    assert cds is not None and names(cds.changed) == ["c1"]
    eds = send(state, EDS, rebuilt)  # no CDS ACK yet: Envoy withholds it while c1 warms
    assert eds is not None, "the rebuilt cluster's endpoints were not sent again"
    assert names(eds.changed) == ["c1"] and eds.resent == ("c1",)
    assert eds.version == acked_eds, "same endpoints, same version"
    ack(state, EDS)
    ack(state, CDS)
    assert send(state, EDS, rebuilt) is None, "sent once, not on every wake-up"


def test_a_changed_cluster_with_endpoints_in_flight_gets_them_again_after_that_ack() -> None:
    """EDS written before the CDS response reached the old cluster only."""
    start = snapshot({"c1": "v1"})
    state = fresh()
    converge(state, start)
    moved = snapshot({"c1": "v1"}, endpoints={"c1": "e-moved"})
    assert send(state, EDS, moved) is not None

    rebuilt = snapshot({"c1": "v2"}, endpoints={"c1": "e-moved"})
    assert send(state, CDS, rebuilt) is not None
    assert send(state, EDS, rebuilt) is None, "one EDS response in flight at a time"
    ack(state, EDS)
    again = send(state, EDS, rebuilt)
    assert again is not None and again.resent == ("c1",)
    assert [(r.name, r.version) for r in again.changed] == [("c1", "e-moved")]


def test_a_new_cluster_is_not_resent_and_its_mark_does_not_outlive_the_plan() -> None:
    """Endpoints Envoy does not watch yet go out once it subscribes, as new; no second time."""
    start = snapshot({"c1": "v1"})
    state = fresh()
    converge(state, start)
    after = snapshot({"c1": "v1", "c2": "v1"})
    assert send(state, CDS, after) is not None
    assert send(state, EDS, after) is None, "endpoints Envoy has no watch for"
    ack(state, CDS)
    subscribe_names(state, EDS, {"c1", "c2"})
    eds = send(state, EDS, after)
    assert eds is not None and names(eds.changed) == ["c2"] and eds.resent == ()
    ack(state, EDS)
    assert send(state, EDS, after) is None


def test_a_changed_route_config_or_listener_marks_nothing_for_resending() -> None:
    """Only clusters warm on their references: Envoy 1.40 reuses a rebuilt listener's RDS subscription."""
    start = snapshot({"c1": "v1"})
    state = fresh()
    converge(state, start)
    after = snapshot({"c1": "v1"}, route=("r-other", ("c1",)), listener="l2")
    assert send(state, LDS, after) is not None
    assert send(state, RDS, after) is not None
    assert all(not state[kind].resend for kind in ResourceType)


# -- the endpoint fast path ------------------------------------------------------------


def test_an_endpoint_only_change_plans_only_eds_with_only_the_changed_resource() -> None:
    start = snapshot({"c1": "v1", "c2": "v1", "c3": "v1"})
    state = fresh()
    converge(state, start)

    moved = start.with_endpoints(
        [resource(EDS, "c1", "e-v1"), resource(EDS, "c2", "e-moved"), resource(EDS, "c3", "e-v1")]
    )
    assert moved.versions[CDS] == start.versions[CDS]
    planned = {kind: send(state, kind, moved) for kind in ResourceType}
    assert {kind for kind, plan in planned.items() if plan is not None} == {EDS}
    eds = planned[EDS]
    assert eds is not None
    assert [(r.name, r.version) for r in eds.changed] == [("c2", "e-moved")]
    assert eds.removed == []
    assert set(eds.target) == {"c1", "c2", "c3"}


# -- state of the world versus delta ---------------------------------------------------


def test_sotw_wildcard_plans_carry_the_full_set_and_named_plans_only_changes() -> None:
    start = snapshot({"c1": "v1", "c2": "v1"})
    state = fresh(sotw=True)
    converge(state, start)

    changed = snapshot({"c1": "v1", "c2": "v2"}, endpoints={"c1": "e-v1", "c2": "e-v2"})
    cds = send(state, CDS, changed)
    assert cds is not None
    assert set(cds.target) == {"c1", "c2"}, "CDS target must be the whole state of the world"
    assert names(cds.changed) == ["c2"]
    ack(state, CDS)
    eds = send(state, EDS, changed)
    assert eds is not None
    assert names(eds.changed) == ["c2"]


def test_sotw_sends_an_empty_cds_when_there_are_no_clusters() -> None:
    """Envoy's initialization waits for a first CDS response, even an empty one."""
    empty = Snapshot.build(
        clusters=[],
        endpoints=[],
        listeners=[resource(LDS, LISTENER, "l1", (ROUTE_CONFIG,))],
        routes=[resource(RDS, ROUTE_CONFIG, "r-direct")],
    )
    state = fresh(sotw=True)
    cds = send(state, CDS, empty)
    assert cds is not None
    assert cds.target == {} and cds.version == set_version([])


def test_delta_answers_the_first_wildcard_request_even_when_the_set_is_empty() -> None:
    empty = Snapshot.build(
        clusters=[],
        endpoints=[],
        listeners=[resource(LDS, LISTENER, "l1", (ROUTE_CONFIG,))],
        routes=[resource(RDS, ROUTE_CONFIG, "r-direct")],
    )
    state = fresh(sotw=False)
    cds = send(state, CDS, empty)
    assert cds is not None
    assert cds.changed == [] and cds.removed == []


def test_delta_removals_name_what_the_client_has_and_the_target_drops() -> None:
    start = snapshot({"c1": "v1", "c2": "v1"})
    state = fresh(sotw=False)
    converge(state, start)

    after = Snapshot.build(
        clusters=[resource(CDS, "c1", "v1")],
        endpoints=[resource(EDS, "c1", "e-v1")],
        listeners=[resource(LDS, "other", "l2", (ROUTE_CONFIG,))],
        routes=[resource(RDS, ROUTE_CONFIG, "r-c1", ("c1",))],
    )
    lds = send(state, LDS, after)
    assert lds is not None
    assert names(lds.changed) == ["other"] and lds.removed == [LISTENER]
    ack(state, LDS)

    assert send(state, CDS, after) is None, "c2 removed while Envoy's routes use it"
    rds = send(state, RDS, after)
    assert rds is not None and rds.removed == []
    ack(state, RDS)

    cds = send(state, CDS, after)
    assert cds is not None
    assert cds.changed == [] and cds.removed == ["c2"]
    ack(state, CDS)
    eds = send(state, EDS, after)
    assert eds is not None
    assert eds.changed == [] and eds.removed == ["c2"]


def test_a_shrinking_named_subscription_sends_nothing_and_records_the_smaller_set() -> None:
    start = snapshot({"c1": "v1", "c2": "v1"})
    state = fresh()
    converge(state, start)
    subscribe_names(state, EDS, {"c1"})
    assert send(state, EDS, start) is None, "an empty EDS response for a shrunk subscription"
    assert set(state[EDS].acked) == {"c1"}
    assert state[EDS].acked_version == set_version([start.endpoints["c1"]])


def test_unrequested_types_are_never_planned_and_one_response_per_type_is_in_flight() -> None:
    snap = snapshot({"c1": "v1"})
    state = StreamState(full_state_for_wildcard=True)
    for kind in ResourceType:
        assert state.plan(kind, snap) is None, kind.short
    subscribe_wildcard(state, CDS)
    assert send(state, CDS, snap) is not None
    changed = snapshot({"c1": "v2"})
    assert state.plan(CDS, changed) is None, "a second CDS response while the first is unanswered"
    ack(state, CDS)
    follow_up = state.plan(CDS, changed)
    assert follow_up is not None and [r.version for r in follow_up.changed] == ["v2"]
