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

    .venv/bin/python -m bench.references [--routes 10000] [--repeats 5] > bench/results/references.json
    .venv/bin/python -m bench.references --routes 200 --repeats 1      # the quickest run
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

from bench.kit.machine import describe
from bench.kit.run import Progress, Run, add_workdir_arguments
from control_plane.model.conflicts import resolve_conflicts
from control_plane.model.loading import route_from_document
from control_plane.model.references import GrantFrom, GrantTo, ReferenceGrant, crossing_references, permitted_routes
from control_plane.model.route import Origin, Route
from control_plane.sources.base import RouteSet
from control_plane.translator import GatewaySettings, RouteTranslator
from tests.unit.control_plane.translator.route_generator import route_document

progress = Progress("references")


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--routes", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--cross", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=5)
    add_workdir_arguments(parser)
    args = parser.parse_args(argv)
    with Run("references", argv, args, progress) as run:
        run.report["settings"] = {"routes": args.routes, "namespaces": args.namespaces, "cross": args.cross, "repeats": args.repeats}
        run.report["machine"] = describe(["pydantic"], ["control_plane", "bench"])
        rng = random.Random(24)
        progress(f"generating {args.routes} routes")
        routes, grants = build(args.routes, args.namespaces, args.cross, rng)
        sets = [RouteSet("git", "c", tuple(routes)), RouteSet("kubernetes-referencegrants", "", (), grants=tuple(grants))]
        kept, unresolved = permitted_routes(sets)
        translator = RouteTranslator(GatewaySettings())
        survivors, _ = resolve_conflicts(kept)
        progress("translating once (cold) to warm the per-route cache")
        translator.translate(survivors)
        results: dict[str, Any] = {
            "resolve_conflicts_ms": best(lambda: resolve_conflicts(routes), args.repeats),
            "permitted_routes_ms": best(lambda: permitted_routes(sets), args.repeats),
            "translate_warm_ms": best(lambda: translator.translate(survivors), args.repeats),
        }
    cpu_ms = {k: round(v, 2) for k, v in results.items()}
    run.print(
        baseline={"resolve_conflicts_ms": cpu_ms["resolve_conflicts_ms"]},
        ratios={
            "permitted_vs_resolve_conflicts": round(results["permitted_routes_ms"] / results["resolve_conflicts_ms"], 3),
            "permitted_share_of_rebuild": round(results["permitted_routes_ms"] / sum(results.values()), 3),
        },
        routes=len(routes), namespaces=args.namespaces,
        cross_namespace_routes=sum(1 for r in routes if any(True for _ in crossing_references(r))),
        grants=len(grants), unresolved=len(unresolved),
        cpu_ms=cpu_ms,
        permitted_us_per_route=round(results["permitted_routes_ms"] * 1000 / len(routes), 3),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
