"""Cross-namespace backends and ReferenceGrants (issue 24, hole 9): the matching rule, as
Gateway API's spec writes it, and which grants count for which routes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from control_plane.model.loading import parse_documents
from control_plane.model.reference_grants import grant_from_document
from control_plane.model.references import (
    GrantFrom,
    Grants,
    GrantTo,
    ReferenceGrant,
    ServiceReference,
    crossing_references,
    permitted_routes,
)
from control_plane.model.route import Origin, Route
from control_plane.model.schema import RouteSpec
from control_plane.sources.base import RouteSet

ROUTE_FROM = {"group": "gatehouse.io", "kind": "Route"}
SERVICE_TO = {"group": "", "kind": "Service"}


def route(name: str, namespace: str, *backends: dict[str, Any], fallback: dict[str, Any] | None = None, source: str = "kubernetes") -> Route:
    spec: dict[str, Any] = {"match": {"pathPrefix": f"/{name}"}, "backends": list(backends)}
    if fallback is not None:
        spec["circuitBreaker"] = {"errorRate": {"windowCalls": 20}}
        spec["fallback"] = {"backend": fallback}
    return Route(namespace, name, RouteSpec.model_validate(spec), Origin(source, f"{namespace}/{name}"))


def grant(namespace: str, froms: list[dict[str, str]], tos: list[dict[str, str]], *, cluster: bool = True, name: str = "g") -> ReferenceGrant:
    document = {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"from": froms, "to": tos},
    }
    return grant_from_document(document, Origin("kubernetes" if cluster else "git", f"{namespace}/{name}"), cluster=cluster)


def served(routes: list[Route], *grants: ReferenceGrant) -> list[str]:
    kept, _ = permitted_routes([RouteSet("s", "", tuple(routes), grants=grants)])
    return [r.id for r in kept]


STEAL = route("steal", "evil", {"service": "orders", "port": 8080, "namespace": "shop"})


def test_a_route_in_its_own_namespace_needs_no_grant() -> None:
    own = route("own", "shop", {"service": "orders", "port": 8080}, {"service": "orders-v2", "port": 8080, "namespace": "shop"})
    assert served([own]) == ["shop/own"]
    assert list(crossing_references(own)) == []


def test_a_cross_namespace_backend_without_a_grant_is_not_served_and_the_reason_names_it() -> None:
    two = route("two", "evil", {"service": "local", "port": 80}, {"service": "orders", "port": 8080, "namespace": "shop"})
    kept, unresolved = permitted_routes([RouteSet("s", "", (two, STEAL))])
    assert kept == []
    assert [(u.route.id, u.references) for u in unresolved] == [
        ("evil/two", (ServiceReference("spec.backends[1]", "shop", "orders"),)),
        ("evil/steal", (ServiceReference("spec.backends[0]", "shop", "orders"),)),
    ]
    message = unresolved[0].message
    assert message.startswith("spec.backends[1]: Service shop/orders is in another namespace and no ReferenceGrant permits it")
    assert 'shop needs a ReferenceGrant from {group: gatehouse.io, kind: Route, namespace: evil} to {group: "", kind: Service, name: orders}' in message


def test_the_fallback_backend_is_a_reference_too() -> None:
    sneaky = route("sneaky", "evil", {"service": "local", "port": 80}, fallback={"service": "admin", "port": 19000, "namespace": "gatehouse-system"})
    kept, [left_out] = permitted_routes([RouteSet("s", "", (sneaky,))])
    assert kept == [] and left_out.references == (ServiceReference("spec.fallback.backend", "gatehouse-system", "admin"),)
    granted = grant("gatehouse-system", [{**ROUTE_FROM, "namespace": "evil"}], [{**SERVICE_TO, "name": "admin"}])
    assert served([sneaky], granted) == ["evil/sneaky"]


def test_a_grant_names_one_service_or_with_no_name_every_service_of_its_namespace() -> None:
    other = route("other", "evil", {"service": "payments", "port": 8080, "namespace": "shop"})
    by_name = grant("shop", [{**ROUTE_FROM, "namespace": "evil"}], [{**SERVICE_TO, "name": "orders"}])
    assert served([STEAL, other], by_name) == ["evil/steal"]
    every = grant("shop", [{**ROUTE_FROM, "namespace": "evil"}], [SERVICE_TO])
    assert served([STEAL, other], every) == ["evil/steal", "evil/other"]


@pytest.mark.parametrize(
    ("froms", "tos", "why"),
    [
        ([{**ROUTE_FROM, "namespace": "good"}], [SERVICE_TO], "from another namespace"),
        ([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "evil"}], [SERVICE_TO], "from HTTPRoute, not Route"),
        ([{"group": "example.com", "kind": "Route", "namespace": "evil"}], [SERVICE_TO], "from another group's Route"),
        ([{"group": "gatehouse.io", "kind": "route", "namespace": "evil"}], [SERVICE_TO], "kinds are case-sensitive"),
        ([{**ROUTE_FROM, "namespace": "evil"}], [{"group": "", "kind": "Secret"}], "to Secrets, not Services"),
        ([{**ROUTE_FROM, "namespace": "evil"}], [{"group": "core", "kind": "Service"}], 'the core group is "", not "core"'),
        ([{**ROUTE_FROM, "namespace": "evil"}], [{**SERVICE_TO, "name": "payments"}], "to another Service"),
        ([{**ROUTE_FROM, "namespace": "evil"}], [{**SERVICE_TO, "name": "*"}], "a name is a name, not a wildcard"),
    ],
)
def test_a_grant_that_does_not_match_permits_nothing(froms: list[dict[str, str]], tos: list[dict[str, str]], why: str) -> None:
    assert served([STEAL], grant("shop", froms, tos)) == [], why


def test_a_grant_opens_only_its_own_namespace() -> None:
    elsewhere = grant("billing", [{**ROUTE_FROM, "namespace": "evil"}], [SERVICE_TO])
    assert served([STEAL], elsewhere) == []


def test_entries_of_from_and_of_to_are_each_ored() -> None:
    many = grant(
        "shop",
        [{**ROUTE_FROM, "namespace": "a"}, {"group": "", "kind": "Route", "namespace": "evil"}, {**ROUTE_FROM, "namespace": "evil"}],
        [{"group": "", "kind": "Secret"}, {**SERVICE_TO, "name": "nope"}, {**SERVICE_TO, "name": "orders"}],
    )
    assert served([STEAL], many) == ["evil/steal"]
    from_a = route("from-a", "a", {"service": "orders", "port": 8080, "namespace": "shop"})
    from_b = route("from-b", "b", {"service": "orders", "port": 8080, "namespace": "shop"})
    assert served([from_a, from_b], many) == ["a/from-a"]


def test_two_grants_add_up_and_one_naming_all_wins_over_names() -> None:
    orders = grant("shop", [{**ROUTE_FROM, "namespace": "evil"}], [{**SERVICE_TO, "name": "orders"}], name="a")
    payments = grant("shop", [{**ROUTE_FROM, "namespace": "evil"}], [{**SERVICE_TO, "name": "payments"}], name="b")
    every = grant("shop", [{**ROUTE_FROM, "namespace": "evil"}], [SERVICE_TO], name="c")
    both = route("both", "evil", {"service": "orders", "port": 1, "namespace": "shop"}, {"service": "payments", "port": 1, "namespace": "shop"})
    third = route("third", "evil", {"service": "quotes", "port": 1, "namespace": "shop"})
    assert served([both, third], orders) == []
    assert served([both, third], orders, payments) == ["evil/both"]
    assert served([both, third], orders, every, payments) == ["evil/both", "evil/third"]
    assert served([both, third], every, orders) == ["evil/both", "evil/third"]


def test_cluster_grants_count_for_every_source_and_a_repos_own_only_for_its_routes() -> None:
    repo_grant = grant("shop", [{**ROUTE_FROM, "namespace": "evil"}], [SERVICE_TO], cluster=False)
    from_git = route("steal", "evil", {"service": "orders", "port": 8080, "namespace": "shop"}, source="git")
    repo = RouteSet("routes", "c1", (from_git,), grants=(repo_grant,))
    cluster_routes = RouteSet("kubernetes", "", (STEAL,))
    other_repo = RouteSet("other", "c2", (route("copy", "evil", {"service": "orders", "port": 8080, "namespace": "shop"}, source="git"),))
    kept, unresolved = permitted_routes([repo, cluster_routes, other_repo])
    assert [r.id for r in kept] == ["evil/steal"] and kept[0] is from_git
    assert [u.route.id for u in unresolved] == ["evil/steal", "evil/copy"], "a repo's grant opens nothing for the cluster or another repo"

    cluster_grant = RouteSet("kubernetes-referencegrants", "", (), grants=(grant("shop", [{**ROUTE_FROM, "namespace": "evil"}], [SERVICE_TO]),))
    kept, unresolved = permitted_routes([repo, cluster_routes, other_repo, cluster_grant])
    assert len(kept) == 3 and unresolved == [], "a cluster grant counts for every source"


def test_no_namespace_wildcard_in_a_written_grant() -> None:
    text = """\
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: open-all, namespace: shop}
spec:
  from: [{group: gatehouse.io, kind: Route, namespace: "*"}]
  to: [{group: "", kind: Service}]
"""
    found = parse_documents(text, Origin("git", "routes/grants.yaml", "abc"))
    assert found.grants == [] and [str(p) for p in found.problems] == [
        "routes/grants.yaml:5: spec.from[0].namespace: '*': a ReferenceGrant names one namespace; there are no wildcards"
    ]
    # Even built by hand, a "*" namespace matches only a namespace called "*" (none can be).
    by_hand = ReferenceGrant("shop", "g", (GrantFrom("gatehouse.io", "Route", "*"),), (GrantTo("", "Service"),), Origin("x", "y"), True)
    assert served([STEAL], by_hand) == []


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("  from: []\n  to: [{group: '', kind: Service}]", "spec.from: List should have at least 1 item after validation, not 0"),
        ("  from: [{group: gatehouse.io, kind: Route}]\n  to: [{group: '', kind: Service}]", "spec.from[0].namespace: required field is missing"),
        ("  from: [{group: gatehouse.io, kind: Route, namespace: evil}]\n  to: [{kind: Service}]", "spec.to[0].group: required field is missing"),
        ("  from: [{group: Gatehouse.IO, kind: Route, namespace: evil}]\n  to: [{group: '', kind: Service}]", "spec.from[0].group: 'Gatehouse.IO' is not an API group"),
        ("  from: [{group: gatehouse.io, kind: 'Route!', namespace: evil}]\n  to: [{group: '', kind: Service}]", "spec.from[0].kind: 'Route!' is not a kind"),
        ("  from: [{group: gatehouse.io, kind: Route, namespace: evil}]\n  to: [{group: '', kind: Service, name: ''}]", "spec.to[0].name: String should have at least 1 character"),
        ("  from: [{group: gatehouse.io, kind: Route, namespace: evil}]\n  to: [{group: '', kind: Service}]\n  extra: 1", "spec.extra: unknown field"),
    ],
)
def test_a_bad_grant_document_names_file_line_field_and_reason(spec: str, problem: str) -> None:
    text = f"apiVersion: gateway.networking.k8s.io/v1\nkind: ReferenceGrant\nmetadata: {{name: g, namespace: shop}}\nspec:\n{spec}\n"
    found = parse_documents(text, Origin("git", "grants.yaml"))
    assert found.grants == [] and len(found.problems) == 1
    assert problem in str(found.problems[0]) and str(found.problems[0]).startswith("grants.yaml:"), found.problems


def test_routes_and_grants_share_a_file() -> None:
    text = """\
apiVersion: gatehouse.io/v1alpha1
kind: Route
metadata: {name: steal, namespace: evil}
spec:
  match: {pathPrefix: /steal}
  backends: [{service: orders, port: 8080, namespace: shop}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: evil-to-orders, namespace: shop}
spec:
  from: [{group: gatehouse.io, kind: Route, namespace: evil}]
  to: [{group: "", kind: Service, name: orders}]
"""
    found = parse_documents(text, Origin("git", "r.yaml", "abc"))
    assert found.problems == [] and [r.id for r in found.routes] == ["evil/steal"]
    [written] = found.grants
    assert (written.id, written.cluster, written.origin.line) == ("shop/evil-to-orders", False, 8)
    assert permitted_routes([found])[1] == []


# --- properties -----------------------------------------------------------------------

NAMESPACES = st.sampled_from(["evil", "shop", "billing", "a"])
SERVICES = st.sampled_from(["orders", "payments", "admin"])
FROMS = st.builds(
    GrantFrom,
    st.sampled_from(["gatehouse.io", "", "gateway.networking.k8s.io"]),
    st.sampled_from(["Route", "HTTPRoute", "Service"]),
    NAMESPACES,
)
TOS = st.builds(GrantTo, st.sampled_from(["", "gatehouse.io"]), st.sampled_from(["Service", "Secret"]), st.none() | SERVICES)
GRANTS = st.builds(
    ReferenceGrant,
    NAMESPACES,
    st.just("g"),
    st.lists(FROMS, min_size=1, max_size=4).map(tuple),
    st.lists(TOS, min_size=1, max_size=4).map(tuple),
    st.just(Origin("kubernetes", "x")),
    st.just(True),
)


@settings(max_examples=500, deadline=None)
@given(grants=st.lists(GRANTS, max_size=6), home=NAMESPACES, target=NAMESPACES, service=SERVICES)
def test_the_index_decides_as_the_spec_reads(grants: list[ReferenceGrant], home: str, target: str, service: str) -> None:
    """The index says yes exactly when some grant in the target namespace permits a Route
    of gatehouse.io in the route's namespace to name that core Service (or when the route
    stays in its own namespace)."""
    expected = home == target or any(
        g.namespace == target
        and g.permits(group="gatehouse.io", kind="Route", namespace=home, to_group="", to_kind="Service", to_name=service)
        for g in grants
    )
    assert Grants(grants).permits(home, ServiceReference("spec.backends[0]", target, service)) is expected


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
GRANT_LIKE = st.fixed_dictionaries(
    {
        "apiVersion": st.sampled_from(["gateway.networking.k8s.io/v1beta1", "gateway.networking.k8s.io/v1", "v1"]),
        "kind": st.just("ReferenceGrant"),
        "metadata": st.fixed_dictionaries({"name": st.sampled_from(["g", "G", ""]), "namespace": st.sampled_from(["shop", "*", ""])}),
        "spec": st.fixed_dictionaries(
            {
                "from": st.lists(st.dictionaries(st.sampled_from(["group", "kind", "namespace", "x"]), JSONISH), max_size=3),
                "to": st.lists(st.dictionaries(st.sampled_from(["group", "kind", "name", "x"]), JSONISH), max_size=3),
            }
        ),
    }
)


@settings(max_examples=400, deadline=None)
@given(document=GRANT_LIKE | JSONISH)
def test_any_document_is_a_grant_or_a_named_error_never_a_crash(document: Any) -> None:
    try:
        parsed = grant_from_document(document, Origin("git", "g.yaml"), cluster=False)
    except (ValidationError, ValueError) as exc:
        assert str(exc)
    else:
        assert parsed.sources and parsed.targets and "*" not in {f.namespace for f in parsed.sources}
