"""Random valid route documents, for property tests of the translator and of Envoy validation.

Every document drawn here should pass the schema; the callers check that they do, so a
generator that drifts away from the schema fails loudly instead of testing nothing.
"""

from __future__ import annotations

import random
from typing import Any

LITERALS = ["api", "v2", "orders", "users", "a-b", "x.y", "~me", "items"]
METHODS = ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "POST", "PATCH"]
RETRY_ON = ["connect-failure", "reset", "refused-stream", "5xx", "gateway-error", "retriable-4xx", "503", "429"]
# Two wildcards of different lengths both cover v1.api.example.com, so virtual hosts rank
# exact hosts, then the longer wildcard, then the shorter one, then host-less routes.
HOSTS = ["api.example.com", "v1.api.example.com", "*.api.example.com", "*.example.com", "shop.example.org", "*"]


def _path(rng: random.Random) -> tuple[dict[str, Any], str]:
    """A match and its kind: exact | template | glob | prefix | regex."""
    depth = rng.randint(1, 4)
    segments = [rng.choice(LITERALS) for _ in range(depth)]
    kind = rng.choice(["exact", "template", "glob", "prefix", "regex"])
    if kind == "template":
        count = rng.randint(1, min(depth, 4))
        for index, position in enumerate(rng.sample(range(depth), count)):
            segments[position] = f"{{v{index}}}"
        tail = "/**" if rng.random() < 0.3 else ""
        return {"path": "/" + "/".join(segments) + tail}, kind
    if kind == "glob":
        kept = segments[: rng.randint(0, depth)]
        return {"path": "".join("/" + s for s in kept) + "/**"}, kind
    if kind == "prefix":
        return {"pathPrefix": "/" + "/".join(segments) + rng.choice(["", "/"])}, kind
    if kind == "regex":
        return {"pathRegex": "/" + "/".join(segments) + rng.choice(["/[0-9]+", "(/.*)?", "/(a|b)\\.json"])}, kind
    return {"path": "/" + "/".join(segments)}, kind


def route_document(rng: random.Random, name: str, namespace: str = "gen") -> dict[str, Any]:
    match, kind = _path(rng)
    spec: dict[str, Any] = {"match": match}
    if rng.random() < 0.4:
        spec["match"]["methods"] = rng.sample(METHODS, rng.randint(1, 3))
    if rng.random() < 0.3:
        spec["match"]["headers"] = [
            rng.choice(
                [
                    {"name": "x-client", "exact": "mobile"},
                    {"name": "x-tier", "prefix": "gold", "invert": True},
                    {"name": "x-id", "regex": "[0-9a-f]{8}"},
                    {"name": "x-debug", "present": rng.random() < 0.5},
                ]
            )
        ]
    if rng.random() < 0.4:
        spec["hosts"] = rng.sample(HOSTS, rng.randint(1, 2))
    services = rng.sample(["svc-a", "svc-b", "svc-c"], rng.randint(1, 3))
    spec["backends"] = [
        {"service": service, "port": rng.choice([80, 8080]), "weight": rng.randint(0, 5)} for service in services
    ]
    if all(b["weight"] == 0 for b in spec["backends"]):
        spec["backends"][0]["weight"] = 1
    if rng.random() < 0.2:
        spec["backends"][0]["namespace"] = "other"
    roll = rng.random()
    if roll < 0.2 and kind != "regex":
        spec["rewrite"] = {"prefix": rng.choice(["/v3", "/internal/x", "/"])}
        if kind == "template" and match["path"].count("{") >= 5:
            del spec["rewrite"]
    elif roll < 0.35:
        spec["rewrite"] = {"regex": "^/(api|users)/(.*)$", "substitution": "/\\2"}
    if rng.random() < 0.3:
        spec["headers"] = {
            "request": {"set": {"x-api-version": "v2"}, "remove": ["x-drop"]},
            "response": {"set": {"x-route": name}, "remove": ["server"]},
        }
    if rng.random() < 0.4:
        timeouts: dict[str, str] = {"request": rng.choice(["250ms", "10s", "1m30s"])}
        if rng.random() < 0.5:
            timeouts["perTry"] = "100ms"
        if rng.random() < 0.5:
            timeouts["idle"] = "5m"
        spec["timeouts"] = timeouts
    methods = spec["match"].get("methods", [])
    retriable = not methods or any(m in ("GET", "HEAD", "OPTIONS", "PUT", "DELETE") for m in methods)
    if rng.random() < 0.4 and retriable:
        spec["retries"] = {"attempts": rng.randint(0, 3), "retryOn": rng.sample(RETRY_ON, rng.randint(1, 3))}
    if rng.random() < 0.1:
        spec["disabled"] = {"status": rng.choice([404, 410, 503]), "body": rng.choice(["", "gone\n"])}
    return {
        "apiVersion": "gatehouse.io/v1alpha1",
        "kind": "Route",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def route_documents(seed: int, count: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [route_document(rng, f"r{index}", namespace=rng.choice(["gen", "shop"])) for index in range(count)]
