"""What the ReferenceGrant check adds to a route rebuild, beside what the rebuild already did.

Every route rebuild (``SnapshotPublisher._translate``) now runs ``permitted_routes`` over the
merged route sets before ``resolve_conflicts``. This measures both on the same routes, in
process, CPU time (``time.process_time_ns``), best of ``--repeats``:

    resolve_conflicts   the conflict pass every rebuild already ran     (the baseline)
    permitted_routes    the reference check, with the grants below
    translate_warm      RouteTranslator.translate of an unchanged set (its per-route cache warm):
                        the rest of a rebuild a grant change triggers

Routes: ``--routes`` generated as the translator's property tests generate them, in
``--namespaces`` namespaces; ``--cross`` of them name one backend in another namespace,
half of those permitted by ``--grants`` cluster grants (by name, and some with no name).

    .venv/bin/python bench/references.py [--routes 10000] [--repeats 5] > bench/results-references.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.machine import describe  # noqa: E402
from control_plane.model.conflicts import resolve_conflicts  # noqa: E402
from control_plane.model.loading import route_from_document  # noqa: E402
from control_plane.model.references import GrantFrom, GrantTo, ReferenceGrant, crossing_references, permitted_routes  # noqa: E402
from control_plane.model.route import Origin, Route  # noqa: E402
from control_plane.sources.base import RouteSet  # noqa: E402
from control_plane.translator import GatewaySettings, RouteTranslator  # noqa: E402
from tests.unit.control_plane.translator.route_generator import route_document  # noqa: E402


def build(count: int, namespaces: int, cross: float, rng: random.Random) -> tuple[list[Route], list[ReferenceGrant]]:
    routes: list[Route] = []
    grants: list[ReferenceGrant] = []
    for index in range(count):
        namespace = f"ns{index % namespaces}"
        document = route_document(rng, f"r{index}", namespace=namespace)
        if rng.random() < cross:
            target = f"ns{rng.randrange(namespaces)}"
            if target == namespace:
                target = f"ns{(index + 1) % namespaces}"
            document["spec"]["backends"][0]["namespace"] = target
            if rng.random() < 0.5:
                service = document["spec"]["backends"][0]["service"]
                to = (GrantTo("", "Service", None if rng.random() < 0.2 else service),)
                grants.append(ReferenceGrant(target, f"g{index}", (GrantFrom("gatehouse.io", "Route", namespace),), to, Origin("kubernetes", "x"), True))
        routes.append(route_from_document({"apiVersion": "gatehouse.io/v1alpha1", "kind": "Route", **document}, Origin("git", f"f{index}.yaml")))
    return routes, grants


def best(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time_ns()
        fn()
        times.append(time.process_time_ns() - start)
    return min(times) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--routes", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--cross", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(24)
    print(f"generating {args.routes} routes", file=sys.stderr)
    routes, grants = build(args.routes, args.namespaces, args.cross, rng)
    sets = [RouteSet("git", "c", tuple(routes)), RouteSet("kubernetes-referencegrants", "", (), grants=tuple(grants))]
    kept, unresolved = permitted_routes(sets)
    translator = RouteTranslator(GatewaySettings())
    survivors, _ = resolve_conflicts(kept)
    print("translating once (cold) to warm the per-route cache", file=sys.stderr)
    translator.translate(survivors)
    results: dict[str, Any] = {
        "resolve_conflicts_ms": best(lambda: resolve_conflicts(routes), args.repeats),
        "permitted_routes_ms": best(lambda: permitted_routes(sets), args.repeats),
        "translate_warm_ms": best(lambda: translator.translate(survivors), args.repeats),
    }
    results["permitted_vs_resolve_conflicts"] = round(results["permitted_routes_ms"] / results["resolve_conflicts_ms"], 3)
    results["permitted_share_of_rebuild"] = round(
        results["permitted_routes_ms"] / (results["permitted_routes_ms"] + results["resolve_conflicts_ms"] + results["translate_warm_ms"]), 3
    )
    results["permitted_us_per_route"] = round(results["permitted_routes_ms"] * 1000 / len(routes), 3)
    print(json.dumps({
        "benchmark": "references",
        "routes": len(routes), "namespaces": args.namespaces, "cross_namespace_routes": sum(1 for r in routes if any(True for _ in crossing_references(r))),
        "grants": len(grants), "unresolved": len(unresolved), "repeats": args.repeats,
        "cpu_ms": {k: round(v, 2) for k, v in results.items() if k.endswith("_ms")},
        **{k: v for k, v in results.items() if not k.endswith("_ms")},
        "machine": describe(["pydantic"], ["control_plane", "bench"]),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
