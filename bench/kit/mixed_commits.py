"""Mixed commits for ``python -m bench.propagation --mixed N`` (issue 28).

Today's simple change bumps one route's response header: only the route configuration
changes. A real commit mixes changes that take other paths to Envoy, and those are where
a commit once waited 15 s. Each mixed commit here combines two or three of:

| op | what the commit does | what changes in Envoy | served when |
|---|---|---|---|
| ``new_namespace`` | a route in a namespace no route used before | a new cluster | it answers with its ``x-rev`` |
| ``new_service`` | a route to a service no route used before | a new cluster | it answers with its ``x-rev`` |
| ``cache`` | ``cache: {ttl}`` on a route with its own cluster | the cluster (rebuilt) | its answer has ``cache-control: max-age=<ttl>`` |
| ``breaker`` | ``circuitBreaker.maxConnections`` on a route with its own cluster | the cluster (rebuilt) | Envoy's ``/clusters`` shows the new limit |
| ``validation`` | ``validate`` (a required query parameter) on a route | the route, its check policy | a request without it is refused 400, one with it answers |
| ``hosts`` | ``hosts: [api.bench.test]`` on a route | the virtual host of that name | it answers for that Host |
| ``removal`` | a route's file or document removed (sometimes its cluster's last route) | the route (and cluster) | it answers 404 |
| ``bump`` | today's simple change | the route | it answers with its ``x-rev`` |

Combinations rotate through ``COMBOS`` (the first is issue 28's commit: a cache route and a
route in a new namespace) with targets drawn from a seeded RNG. After each mixed commit
comes a simple one (``simple_commit``: one ``bump``), so the same stack gives the baseline.

All ``hosts`` ops name one host: every virtual host carries a copy of every route without
hosts (``translator/virtual_hosts.py``), so each new host name adds a whole route table
to Envoy's (at 10,000 routes, six host names made each change take seconds). Routes with a cluster of
their own are public and live in a file each (``mixed/<name>.yaml``); the generated routes
of ``RouteSet`` are the others (they require a token: the stack runs ext_authz).

Envoy's cache answers a cached route without the route's response headers (its own fetch
skips them), so a cached route shows which commit it runs by its ttl instead of ``x-rev``:
every commit that touches it gives it a ttl of its own. Every probe carries a query
parameter no earlier probe used, so no answer comes from the cache.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import yaml

from tests.harness.http_client import Client, Reply
from tests.harness.route_repo import route_doc

COMBOS: tuple[tuple[str, ...], ...] = (
    ("cache", "new_namespace", "bump"),
    ("breaker", "new_service"),
    ("validation", "hosts", "bump"),
    ("removal", "new_namespace", "cache"),
    ("new_service", "breaker", "hosts"),
    ("validation", "removal", "new_namespace"),
    ("cache", "breaker", "bump"),
)
HOST = "api.bench.test"
INITIAL_OWN_ROUTES = 4
"""Routes with their own cluster in the first commit, so ``cache``/``breaker`` find targets."""
VALIDATION_QUERY = "v"


class GeneratedRoute(Protocol):
    """What this module needs of ``bench.propagation.RouteSpec``."""

    index: int
    probe: str
    rev: str
    extra: dict[str, Any]
    removed: bool


class GeneratedRoutes(Protocol):
    routes: list[Any]

    def rewrite(self, repo: Any, index: int) -> None: ...


@dataclass
class OwnRoute:
    """A public route with a cluster of its own (its namespace or service is its alone)."""

    name: str
    namespace: str
    service: str
    rev: str = "0"
    cache_ttl_s: int | None = None
    max_connections: int | None = None
    removed: bool = False

    @property
    def probe(self) -> str:
        return f"/own/{self.name}/x"

    @property
    def cluster(self) -> str:
        return f"{self.namespace}/{self.service}:8080"

    @property
    def filename(self) -> str:
        return f"mixed/{self.name}.yaml"

    def touch(self, number: int) -> None:
        """This commit changes the route: a new ``x-rev``, and a new ttl if it is cached."""
        self.rev = f"m{number}"
        if self.cache_ttl_s is not None:
            self.cache_ttl_s = 30 + number

    def served(self) -> Check:
        if self.cache_ttl_s is not None:
            return answers(self.probe, None, cache_control=f"max-age={self.cache_ttl_s}")
        return answers(self.probe, self.rev)

    def document(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "match": {"pathPrefix": f"/own/{self.name}/"},
            "backends": [{"service": self.service, "port": 8080}],
            "auth": {"required": False},
            "headers": {"response": {"set": {"x-rev": self.rev}}},
        }
        if self.cache_ttl_s is not None:
            spec["cache"] = {"ttl": f"{self.cache_ttl_s}s"}
        if self.max_connections is not None:
            spec["circuitBreaker"] = {"maxConnections": self.max_connections}
        return route_doc(self.name, spec, namespace=self.namespace)


class Probe:
    """Requests for the checks: the token on every one, and a query no answer was cached for."""

    def __init__(self, client: Client, headers: dict[str, str], clusters: Callable[[], str]) -> None:
        self._client = client
        self._headers = headers
        self.clusters = clusters
        """Envoy's admin ``/clusters`` text."""
        self.requests = 0

    def get(self, path: str, *, host: str | None = None, query: str = "") -> Reply | None:
        self.requests += 1
        headers = {**self._headers, **({"host": host} if host else {})}
        try:
            return self._client.request(f"{path}?{query}{'&' if query else ''}n={self.requests}", headers=headers)
        except OSError:
            return None


Check = Callable[[Probe], bool]


def answers(path: str, rev: str | None, *, host: str | None = None, query: str = "", cache_control: str | None = None) -> Check:
    """200 with this ``x-rev`` (None: any) and, if given, this ``cache-control``."""

    def check(probe: Probe) -> bool:
        reply = probe.get(path, host=host, query=query)
        if reply is None or reply.status != 200 or (rev is not None and reply.headers.get("x-rev") != rev):
            return False
        return cache_control is None or reply.headers.get("cache-control") == cache_control

    return check


def refused(path: str, status: int) -> Check:
    def check(probe: Probe) -> bool:
        reply = probe.get(path)
        return reply is not None and reply.status == status

    return check


def breaker_at(cluster: str, max_connections: int) -> Check:
    line = f"{cluster}::default_priority::max_connections::{max_connections}"
    return lambda probe: line in probe.clusters()


@dataclass
class Commit:
    number: int
    ops: tuple[str, ...]
    checks: dict[str, Check]


class MixedScenario:
    """The state of the mixed commits: which routes exist, which were changed how."""

    def __init__(self, generated: GeneratedRoutes, *, services: tuple[str, ...], seed: int) -> None:
        self.generated = generated
        self.services = services
        self.rng = random.Random(seed)
        self.own: dict[str, OwnRoute] = {}
        self._namespaces = 0
        self._new_services = 0

    def new_service_names(self, commits: int) -> list[str]:
        """Service names ``new_service`` may use: the endpoints file must list them up front."""
        return [f"svc-n{i}" for i in range(commits + 1)]

    def write_initial(self, repo: Any) -> None:
        for _ in range(INITIAL_OWN_ROUTES):
            self._write(repo, self._new_namespace_route("0"))

    def probes(self) -> list[str]:
        return [r.probe for r in self.own.values()]

    # -- one commit --------------------------------------------------------------------------

    def next_commit(self, repo: Any, number: int) -> Commit:
        ops = COMBOS[(number - 1) % len(COMBOS)]
        touched: set[str] = set()
        checks: dict[str, Check] = {}
        for op in ops:
            what, check = getattr(self, f"_{op}")(repo, number, touched)
            checks[f"{op}: {what}"] = check
        return Commit(number, ops, checks)

    def simple_commit(self, repo: Any, number: int) -> Commit:
        """Today's simple change on the same stack: one generated route's ``x-rev``."""
        what, check = self._bump(repo, number, set(), prefix="s")
        return Commit(number, ("simple",), {f"bump: {what}": check})

    def _new_namespace(self, repo: Any, number: int, touched: set[str]) -> tuple[str, Check]:
        route = self._new_namespace_route(f"m{number}")
        touched.add(route.name)
        self._write(repo, route)
        return route.cluster, route.served()

    def _new_service(self, repo: Any, number: int, touched: set[str]) -> tuple[str, Check]:
        route = OwnRoute(f"svc{self._new_services}", "shop", f"svc-n{self._new_services}", f"m{number}")
        self._new_services += 1
        self.own[route.name] = route
        touched.add(route.name)
        self._write(repo, route)
        return route.cluster, route.served()

    def _cache(self, repo: Any, number: int, touched: set[str]) -> tuple[str, Check]:
        route = self._own_target(touched, lambda r: r.cache_ttl_s is None)
        route.cache_ttl_s = 30 + number
        route.touch(number)
        self._write(repo, route)
        return route.cluster, route.served()

    def _breaker(self, repo: Any, number: int, touched: set[str]) -> tuple[str, Check]:
        route = self._own_target(touched, lambda r: True)
        route.max_connections = 100 + number
        route.touch(number)
        self._write(repo, route)
        served, applied = route.served(), breaker_at(route.cluster, route.max_connections)
        return route.cluster, lambda probe: served(probe) and applied(probe)

    def _validation(self, repo: Any, number: int, touched: set[str]) -> tuple[str, Check]:
        route = self._generated_target(touched)
        route.extra["validate"] = {"query": [{"name": VALIDATION_QUERY, "required": True}]}
        route.rev = f"m{number}"
        self.generated.rewrite(repo, route.index)
        served, enforced = answers(route.probe, route.rev, query=f"{VALIDATION_QUERY}=1"), refused(route.probe, 400)
        return route.probe, lambda probe: served(probe) and enforced(probe)

    def _hosts(self, repo: Any, number: int, touched: set[str]) -> tuple[str, Check]:
        route = self._generated_target(touched)
        route.extra["hosts"] = [HOST]
        route.rev = f"m{number}"
        self.generated.rewrite(repo, route.index)
        return f"{route.probe} on {HOST}", answers(route.probe, route.rev, host=HOST)

    def _removal(self, repo: Any, number: int, touched: set[str]) -> tuple[str, Check]:
        live = [r for r in self.own.values() if r.name not in touched and not r.removed]
        if len(live) > INITIAL_OWN_ROUTES and self.rng.random() < 0.5:
            own = self.rng.choice(live)
            own.removed = True
            touched.add(own.name)
            repo.remove(own.filename)
            return f"{own.probe} (its cluster's last route)", refused(own.probe, 404)
        route = self._generated_target(touched)
        route.removed = True
        self.generated.rewrite(repo, route.index)
        return route.probe, refused(route.probe, 404)

    def _bump(self, repo: Any, number: int, touched: set[str], prefix: str = "m") -> tuple[str, Check]:
        route = self._generated_target(touched)
        route.rev = f"{prefix}{number}"
        self.generated.rewrite(repo, route.index)
        return route.probe, answers(route.probe, route.rev)

    # -- targets -------------------------------------------------------------------------------

    @staticmethod
    def namespaces(commits: int) -> list[str]:
        """Every namespace ``commits`` mixed commits may create, for the Git source's binding
        (``sources.git[].namespaces``): the first one, and at most one per op of a commit."""
        return [f"team-{k}" for k in range(1 + 3 * commits)]

    def _new_namespace_route(self, rev: str) -> OwnRoute:
        k = self._namespaces
        self._namespaces += 1
        route = OwnRoute(f"ns{k}", f"team-{k}", self.services[k % len(self.services)], rev)
        self.own[route.name] = route
        return route

    def _own_target(self, touched: set[str], eligible: Callable[[OwnRoute], bool]) -> OwnRoute:
        candidates = [r for r in self.own.values() if r.name not in touched and not r.removed and eligible(r)]
        if not candidates:  # every own route was used up: a new namespace is one more
            candidates = [self._new_namespace_route("0")]
        route = self.rng.choice(candidates)
        touched.add(route.name)
        return route

    def _generated_target(self, touched: set[str]) -> GeneratedRoute:
        """A generated route no op has changed if one is left, else one whose earlier op
        this commit undoes (ops do not stack: the route keeps only the new op's fields)."""
        live = [r for r in self.generated.routes if not r.removed and f"r{r.index}" not in touched]
        route: GeneratedRoute = self.rng.choice([r for r in live if not r.extra] or live)
        route.extra.clear()
        touched.add(f"r{route.index}")
        return route

    def _write(self, repo: Any, route: OwnRoute) -> None:
        repo.write(route.filename, yaml.safe_dump(route.document(), sort_keys=False))


def op_maxima(records: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Per op: the slowest commit that contained it (ms)."""
    worst: dict[str, float] = {}
    for record in records:
        for op in record["ops"]:
            worst[op] = max(worst.get(op, 0.0), record["latency_ms"])
    return dict(sorted(worst.items()))
