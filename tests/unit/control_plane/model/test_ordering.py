"""Most specific first, deterministically (docs/routes.md "Ordering").

exact > template (more literal segments, then without `/**`, then more segments) > regex
> prefix (longer first; `/a/**` counts as the prefix `/a/`); then more conditions (a
method list counts one, each header one); ties by (namespace, name).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from control_plane.model import Origin, Route, RouteSpec, most_specific_first, specificity_key


def make(name: str, match: dict[str, Any], namespace: str = "shop", **spec: Any) -> Route:
    data = {"match": match, "backends": [{"service": "svc", "port": 80}], **spec}
    return Route(namespace=namespace, name=name, spec=RouteSpec.model_validate(data), origin=Origin("file", f"{name}.yaml"))


def names(routes: list[Route]) -> list[str]:
    return [r.name for r in routes]


def shuffled_orders(routes: list[Route], seeds: range = range(200)) -> list[list[str]]:
    results = []
    for seed in seeds:
        copy = list(routes)
        random.Random(seed).shuffle(copy)
        results.append(names(most_specific_first(copy)))
    return results


# Listed most specific first; every test shuffles before sorting.
CHAIN = [
    make("exact", {"path": "/api/v2/orders/bulk"}),
    make("template", {"path": "/api/v2/orders/{id}"}),
    make("template-glob", {"path": "/api/v2/orders/{id}/**"}),
    make("template-fewer-literals", {"path": "/api/{version}/orders/{id}"}),
    make("regex", {"pathRegex": "/api/v2/orders/[0-9]+"}),
    make("segment-prefix", {"path": "/api/v2/orders/**"}),
    make("prefix-orders", {"pathPrefix": "/api/v2/orders"}),
    make("prefix-v2", {"pathPrefix": "/api/v2/"}),
    make("segment-prefix-api", {"path": "/api/**"}),
    make("prefix-root", {"pathPrefix": "/"}),
]


def test_the_specificity_chain() -> None:
    expected = names(CHAIN)
    assert expected.index("exact") < expected.index("template") < expected.index("regex")
    for order in shuffled_orders(CHAIN):
        assert order == expected


def test_issue_example_bulk_before_id_before_regex_before_glob_before_shorter_prefix() -> None:
    routes = [
        make("shorter-prefix", {"pathPrefix": "/api/"}),
        make("glob", {"path": "/api/v2/orders/**"}),
        make("regex", {"pathRegex": "/api/v2/orders/[0-9]+/invoice"}),
        make("by-id", {"path": "/api/v2/orders/{id}"}),
        make("bulk", {"path": "/api/v2/orders/bulk"}),
    ]
    assert names(most_specific_first(routes)) == ["bulk", "by-id", "regex", "glob", "shorter-prefix"]


def test_a_template_always_beats_the_glob_over_the_same_path() -> None:
    routes = [make("glob", {"path": "/orders/**"}), make("by-id", {"path": "/orders/{id}"})]
    assert names(most_specific_first(routes)) == ["by-id", "glob"]


def test_templates_with_more_literal_segments_first_then_without_glob_then_more_segments() -> None:
    routes = [
        make("one-literal-short", {"path": "/a/{x}"}),
        make("one-literal-long", {"path": "/a/{x}/{y}/{z}"}),
        make("one-literal-glob", {"path": "/a/{x}/**"}),
        make("two-literals-glob", {"path": "/a/{x}/b/**"}),
        make("three-literals", {"path": "/{x}/a/b/c"}),
    ]
    for order in shuffled_orders(routes, range(50)):
        assert order == ["three-literals", "two-literals-glob", "one-literal-long", "one-literal-short", "one-literal-glob"]


def test_longer_prefix_first_and_glob_counts_as_prefix_with_slash() -> None:
    routes = [
        make("p-api", {"pathPrefix": "/api"}),
        make("g-api", {"path": "/api/**"}),  # counts as "/api/": one longer than "/api"
        make("p-api-v", {"pathPrefix": "/api/v"}),
    ]
    assert names(most_specific_first(routes)) == ["p-api-v", "g-api", "p-api"]


@pytest.mark.parametrize("first, second", [("a-prefix", "b-glob"), ("b-prefix", "a-glob")])
def test_glob_and_the_equal_prefix_tie_and_fall_to_the_name(first: str, second: str) -> None:
    prefix_name = first if "prefix" in first else second
    glob_name = first if "glob" in first else second
    routes = [make(glob_name, {"path": "/api/**"}), make(prefix_name, {"pathPrefix": "/api/"})]
    assert names(most_specific_first(routes)) == sorted([prefix_name, glob_name])


def test_root_glob_and_root_prefix_are_the_least_specific() -> None:
    routes = [make("root-glob", {"path": "/**"}), make("a", {"pathPrefix": "/a"}), make("root-exact", {"path": "/"})]
    assert names(most_specific_first(routes)) == ["root-exact", "a", "root-glob"]


def test_more_conditions_first_on_the_same_path() -> None:
    header = {"name": "x-client", "exact": "mobile"}
    other = {"name": "x-tier", "present": True}
    routes = [
        make("none", {"path": "/orders"}),
        make("one-header", {"path": "/orders", "headers": [header]}),
        make("methods-only", {"path": "/orders", "methods": ["GET", "HEAD", "PUT"]}),
        make("two-headers", {"path": "/orders", "headers": [header, other]}),
        make("methods-and-header", {"path": "/orders", "methods": ["GET"], "headers": [header]}),
    ]
    for order in shuffled_orders(routes, range(50)):
        # Three methods count as one condition, like one method: "methods-only" ties with "one-header".
        assert order == ["methods-and-header", "two-headers", "methods-only", "one-header", "none"]


def test_conditions_never_beat_a_more_specific_path() -> None:
    routes = [
        make("template-with-headers", {"path": "/orders/{id}", "headers": [{"name": "x-a", "present": True}], "methods": ["GET"]}),
        make("exact-plain", {"path": "/orders/bulk"}),
        make("prefix-with-headers", {"pathPrefix": "/orders/", "headers": [{"name": "x-a", "present": True}]}),
        make("regex-plain", {"pathRegex": "/orders/.*"}),
    ]
    assert names(most_specific_first(routes)) == ["exact-plain", "template-with-headers", "regex-plain", "prefix-with-headers"]


def test_ties_by_namespace_then_name() -> None:
    routes = [
        make("a", {"pathPrefix": "/x"}, namespace="zeta"),
        make("b", {"pathPrefix": "/x"}, namespace="alpha"),
        make("a", {"pathPrefix": "/x"}, namespace="alpha"),
        make("z", {"pathPrefix": "/x"}, namespace="beta"),
    ]
    for seed in range(30):
        copy = list(routes)
        random.Random(seed).shuffle(copy)
        assert [r.id for r in most_specific_first(copy)] == ["alpha/a", "alpha/b", "beta/z", "zeta/a"]


def _random_route(rng: random.Random, index: int) -> Route:
    kind = rng.randrange(5)
    depth = rng.randint(1, 4)
    literals = [rng.choice(["a", "b", "orders", "v2"]) for _ in range(depth)]
    if kind == 0:
        match: dict[str, Any] = {"path": "/" + "/".join(literals)}
    elif kind == 1:
        parts = [p if rng.random() < 0.5 else f"{{v{i}}}" for i, p in enumerate(literals)]
        parts[rng.randrange(depth)] = "{last}"
        match = {"path": "/" + "/".join(parts) + ("/**" if rng.random() < 0.3 else "")}
    elif kind == 2:
        match = {"pathRegex": "/" + "/".join(literals) + "/[0-9]+"}
    elif kind == 3:
        match = {"path": "/" + "/".join(literals) + "/**"}
    else:
        match = {"pathPrefix": "/" + "/".join(literals)}
    if rng.random() < 0.3:
        match["methods"] = ["GET"]
    if rng.random() < 0.3:
        match["headers"] = [{"name": "x-h", "present": True}] * rng.randint(1, 2)
    # Names collide on purpose across namespaces; ids (namespace/name) stay unique.
    return make(f"r{index % 7}", match, namespace=f"ns{index // 7}")


@pytest.mark.parametrize("population_seed", range(20))
def test_order_is_a_function_of_the_set_not_of_the_input_order(population_seed: int) -> None:
    rng = random.Random(population_seed)
    routes = [_random_route(rng, i) for i in range(40)]
    reference = [r.id for r in most_specific_first(routes)]
    for seed in range(100):
        copy = list(routes)
        random.Random(seed).shuffle(copy)
        assert [r.id for r in most_specific_first(copy)] == reference
    keys = [specificity_key(r) for r in routes]
    assert len(set(keys)) == len(keys), "distinct ids always give distinct keys: no tie is left to input order"
    # The sort respects the path classes everywhere, not just in hand-picked cases.
    classes = [specificity_key(r)[0] for r in most_specific_first(routes)]
    assert classes == sorted(classes)


def test_most_specific_first_returns_a_new_list() -> None:
    routes = list(reversed(CHAIN))
    before = list(routes)
    result = most_specific_first(routes)
    assert routes == before and result is not routes
