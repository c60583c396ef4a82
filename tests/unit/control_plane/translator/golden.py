"""Golden cases for the translator: `testdata/in/<case>.yaml` → `testdata/out/<case>.<kind>.yaml`.

An input is a stream of route documents, loaded strictly (any problem fails the case).
Two optional side files:

- `in/<case>.endpoints.yaml`: a static endpoints file; without one, every cluster gets an
  empty ClusterLoadAssignment;
- `in/<case>.breakers.yaml`: breaker phases by route id (`ns/name: {phase: open,
  openFor: 30.2}`), translated at a fixed wall clock (BREAKER_CLOCK) so Retry-After is
  stable; without one, every breaker is CLOSED;
- `in/<case>.settings.yaml`: the gateway the routes are translated for, written as in the
  control plane's config file (`gateway`, `extAuthz`, `rateLimit`, `accessLog`,
  `tracing`), loaded
  strictly (an unknown field fails the case) and turned into GatewaySettings the way the
  control plane does it; without one, the default GatewaySettings().

Every case has the four Envoy kinds; `secrets` (TLS) and `policies` (the route policies
ratelimit_svc receives) are written only when the case has any. Files are rendered by
control_plane/render.py, the renderer `gatehouse render` uses. Shared with
tests/integration/test_envoy_validate.py, which feeds the same cases to Envoy.

Listeners are written once in full, in `out/_shared.listeners.yaml` (the default gateway's:
every listener carries the whole filter chain), and per case as a delta from it
(golden_delta.py): a change to the shared chain rewrites that one file, a change to one
case's listener that case's file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from control_plane.breakers.board import Actor, BreakerBoard, BreakerState, Phase
from control_plane.cache.resource import Resource
from control_plane.config import AccessLogService, ControlPlaneConfig, ExtAuthz, Gateway, RateLimitService, Sources, Tracing
from control_plane.model import Origin, duplicate_problems, parse_route_file
from control_plane.render import resource_data, to_yaml
from control_plane.sources.static_endpoints import StaticEndpointTable, parse_endpoints
from control_plane.translator import EndpointTranslator, GatewaySettings, RouteTranslator, Translation
from control_plane.translator.from_config import gateway_settings
from tests.unit.control_plane.translator.golden_delta import delta
from servicekit.config_file import load_config_file
from servicekit.model import Model

TESTDATA = Path(__file__).parent / "testdata"
IN_DIR = TESTDATA / "in"
OUT_DIR = TESTDATA / "out"
KINDS = ("listeners", "routes", "clusters", "endpoints")
OPTIONAL_KINDS = ("secrets", "policies")
"""Written only when the case has some: most cases have neither."""
ENDPOINTS_SUFFIX = ".endpoints.yaml"
SETTINGS_SUFFIX = ".settings.yaml"
BREAKERS_SUFFIX = ".breakers.yaml"
BREAKER_CLOCK = 1_000_000.0
SHARED = "_shared"
"""The name of the shared golden files (no case has it: a case name comes from ``in/``)."""
DELTA_KINDS = ("listeners",)
"""Kinds written per case as a delta from the shared file of that kind."""
DELTA_HEADER = "# A delta from {shared}: see tests/unit/control_plane/translator/golden_delta.py\n"


class CaseSettings(Model):
    """The part of the control plane's config file that becomes GatewaySettings."""

    gateway: Gateway = Gateway()
    ext_authz: ExtAuthz | None = None
    rate_limit: RateLimitService | None = None
    access_log: AccessLogService | None = None
    tracing: Tracing | None = None
    base_dir: str = "."


def load_settings(path: Path) -> GatewaySettings:
    case = load_config_file(path, CaseSettings)
    if case.gateway.tls is not None:
        # Golden files must not depend on where the checkout is.
        assert Path(case.gateway.tls.cert_file).is_absolute() and Path(case.gateway.tls.key_file).is_absolute(), path
    config = ControlPlaneConfig(
        gateway=case.gateway,
        ext_authz=case.ext_authz,
        rate_limit=case.rate_limit,
        access_log=case.access_log,
        tracing=case.tracing,
        sources=Sources(),
        base_dir=case.base_dir,
    )
    return gateway_settings(config, config.gateway)


def case_names() -> list[str]:
    return sorted(
        path.name[: -len(".yaml")]
        for path in IN_DIR.glob("*.yaml")
        if not path.name.endswith((ENDPOINTS_SUFFIX, SETTINGS_SUFFIX, BREAKERS_SUFFIX))
    )


def expected_path(case: str, kind: str) -> Path:
    return OUT_DIR / f"{case}.{kind}.yaml"


@dataclass(frozen=True)
class CaseResult:
    translation: Translation
    endpoints: tuple[Resource, ...]

    def resources(self, kind: str) -> tuple[Resource, ...]:
        by_kind = {
            "listeners": self.translation.listeners,
            "routes": self.translation.routes,
            "clusters": self.translation.clusters,
            "endpoints": self.endpoints,
            "secrets": self.translation.secrets,
            "policies": self.translation.policies,
        }
        return by_kind[kind]

    def kinds(self) -> tuple[str, ...]:
        """The kinds this case has files for."""
        return KINDS + tuple(kind for kind in OPTIONAL_KINDS if self.resources(kind))

    def data(self, kind: str) -> list[dict[str, Any]]:
        return [resource_data(resource) for resource in self.resources(kind)]

    def rendered(self, kind: str) -> str:
        return to_yaml(self.data(kind))

    def golden(self, kind: str, shared: CaseResult) -> str:
        """The text of the case's golden file: in full, or for DELTA_KINDS as a delta
        from ``shared`` (the translator's current ``shared_result()``, not the shared file:
        a change to the shared output then changes the shared file alone)."""
        if kind not in DELTA_KINDS:
            return self.rendered(kind)
        header = DELTA_HEADER.format(shared=expected_path(SHARED, kind).name)
        return header + to_yaml(delta(self.data(kind), shared.data(kind)))


def case_settings(case: str) -> GatewaySettings:
    path = IN_DIR / f"{case}{SETTINGS_SUFFIX}"
    return load_settings(path) if path.exists() else GatewaySettings()


def case_breakers(case: str) -> dict[str, BreakerState]:
    """The case's breaker phases, moved on a board at BREAKER_CLOCK as the runtime's are."""
    path = IN_DIR / f"{case}{BREAKERS_SUFFIX}"
    if not path.exists():
        return {}
    board = BreakerBoard(clock=lambda: BREAKER_CLOCK)
    for route_id, data in yaml.safe_load(path.read_text()).items():
        board.move(route_id, Phase(data["phase"]), actor=Actor.OPERATOR, reason="golden", open_for=data.get("openFor"))
    return dict(board.states())


def translate_case(case: str) -> CaseResult:
    source = IN_DIR / f"{case}.yaml"
    routes, problems = parse_route_file(source.read_bytes(), Origin("file", source.name))
    problems += duplicate_problems(routes)
    if problems:
        lines = "\n".join(f"  {p}" for p in problems)
        raise AssertionError(f"golden input {source} is invalid:\n{lines}")
    side_file = IN_DIR / f"{case}{ENDPOINTS_SUFFIX}"
    table = (
        parse_endpoints(side_file.read_bytes(), side_file.name) if side_file.exists() else StaticEndpointTable({})
    )
    translator = RouteTranslator(case_settings(case), clock=lambda: BREAKER_CLOCK)
    translation = translator.translate(routes, case_breakers(case))
    endpoints = EndpointTranslator().translate(translation.cluster_refs, table)
    return CaseResult(translation, tuple(endpoints))


def shared_result() -> CaseResult:
    """What the shared golden files hold: a gateway with the default settings and no routes.
    Its listener is every case's but for what the case's settings add (the chain does not
    depend on the routes)."""
    translation = RouteTranslator(GatewaySettings(), clock=lambda: BREAKER_CLOCK).translate([], {})
    return CaseResult(translation, ())


def stale_outputs() -> list[Path]:
    """Expected files that no case produces (no input, an unknown kind, or an optional
    kind the case no longer has)."""
    wanted = {expected_path(case, kind) for case in case_names() for kind in translate_case(case).kinds()}
    wanted |= {expected_path(SHARED, kind) for kind in DELTA_KINDS}
    return sorted(path for path in OUT_DIR.glob("*") if path.is_file() and path not in wanted)
