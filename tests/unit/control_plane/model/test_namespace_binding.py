"""Which namespaces a Git file may claim (control_plane/model/namespace_binding.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from control_plane.config import GitRepo
from control_plane.model.loading import parse_documents
from control_plane.model.namespace_binding import NamespaceBinding, bind_documents
from control_plane.model.route import Origin

BINDING = NamespaceBinding.of("sources.git[0]", ["shop"], {"teams/payments/": ["payments"], "teams/payments/ops": ["ops"]})


def stream(*documents: tuple[str, str]) -> str:
    """Route and ReferenceGrant documents, (kind, namespace) each."""
    out = []
    for index, (kind, namespace) in enumerate(documents):
        if kind == "Route":
            out.append(
                f"apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {{name: r{index}, namespace: {namespace}}}\n"
                "spec: {auth: {required: false}, match: {pathPrefix: /x}, backends: [{service: s, port: 80}]}\n"
            )
        else:
            out.append(
                f"apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: g{index}, namespace: {namespace}}}\n"
                "spec: {from: [{group: gatehouse.io, kind: Route, namespace: evil}], to: [{group: '', kind: Service}]}\n"
            )
    return "---\n".join(out)


@pytest.mark.parametrize(
    ("location", "allowed", "setting"),
    [
        ("a.yaml", {"shop"}, "sources.git[0].namespaces: [shop]"),
        ("teams/payments/a.yaml", {"payments"}, "sources.git[0].namespacesByPath['teams/payments']: [payments]"),
        ("teams/payments/ops/deep/a.yaml", {"ops"}, "sources.git[0].namespacesByPath['teams/payments/ops']: [ops]"),
        ("teams/payments-evil/a.yaml", {"shop"}, "sources.git[0].namespaces: [shop]"),  # a prefix of a name is not its directory
    ],
)
def test_the_longest_matching_directory_decides(location: str, allowed: set[str], setting: str) -> None:
    assert BINDING.for_file(location) == (frozenset(allowed), setting)


def test_without_a_list_only_default_and_the_refusal_names_the_setting() -> None:
    unbound = NamespaceBinding.of("sources.git[1]", None)
    found = parse_documents(stream(("Route", "default"), ("Route", "payments"), ("ReferenceGrant", "shop")), Origin("git", "r.yaml", "c0ffee"))
    kept, refused = bind_documents(found, unbound, "r.yaml")
    assert [r.id for r in kept.routes] == ["default/r0"] and kept.grants == []
    assert [str(p) for p in refused] == [
        "git:r.yaml:6@c0ffee: metadata.namespace: Route payments/r1: namespace 'payments' is not one this file may claim "
        "(sources.git[1].namespaces is not set, so only [default]); the route is not served",
        "git:r.yaml:11@c0ffee: metadata.namespace: ReferenceGrant shop/g2: namespace 'shop' is not one this file may claim "
        "(sources.git[1].namespaces is not set, so only [default]); it opens nothing",
    ]


def test_an_empty_list_claims_nothing_and_a_bound_document_is_kept_as_is() -> None:
    found = parse_documents(stream(("Route", "shop"), ("ReferenceGrant", "shop")), Origin("git", "a.yaml"))
    kept, refused = bind_documents(found, BINDING, "a.yaml")
    assert kept is found and refused == [], "nothing refused: the same object, so unchanged files stay cached"
    nothing = NamespaceBinding.of("sources.git[0]", [])
    kept, refused = bind_documents(found, nothing, "a.yaml")
    assert kept.routes == [] and kept.grants == [] and "(sources.git[0].namespaces: [] (none))" in str(refused[0])


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"namespaces": ["Shop"]}, "namespaces.0"),
        ({"namespacesByPath": {"../up": ["shop"]}}, "is not a directory inside the source's path"),
        ({"namespacesByPath": {"/abs": ["shop"]}}, "is not a directory inside the source's path"),
        ({"namespacesByPath": {"a/./b": ["shop"]}}, "is not a directory inside the source's path"),
        ({"namespacesByPath": {"teams": ["bad_ns"]}}, "namespacesByPath.teams.0"),
    ],
)
def test_bad_bindings_in_the_config_are_refused_with_the_field(fields: dict[str, object], error: str) -> None:
    with pytest.raises(ValidationError) as raised:
        GitRepo.model_validate({"repo": "r", **fields})
    assert error in str(raised.value)


NAMESPACE = st.text(alphabet=st.sampled_from("abz09-_.A/ "), min_size=0, max_size=70)


@settings(max_examples=300, deadline=None)
@given(
    namespaces=st.lists(NAMESPACE, max_size=4),
    location=st.text(max_size=60),
    claimed=st.lists(st.tuples(st.sampled_from(["Route", "ReferenceGrant"]), NAMESPACE), max_size=4),
)
def test_no_document_or_path_makes_binding_crash_and_nothing_unbound_is_kept(
    namespaces: list[str], location: str, claimed: list[tuple[str, str]]
) -> None:
    """What a tenant writes (namespace text, file paths) never crashes the check, and every
    document kept is in a namespace its file may claim."""
    binding = NamespaceBinding.of("sources.git[0]", namespaces, {"t": ["shop"]})
    found = parse_documents(stream(*claimed), Origin("git", location or "x.yaml"))
    kept, refused = bind_documents(found, binding, location)
    allowed, _ = binding.for_file(location)
    assert all(r.namespace in allowed for r in kept.routes) and all(g.namespace in allowed for g in kept.grants)
    assert len(kept.routes) + len(kept.grants) + len(refused) == len(found.routes) + len(found.grants)
    assert all(p.field == "metadata.namespace" for p in refused)
