"""The route schema: one definition for Git files, CRDs and the chart's OpenAPI schema.

Models are strict (unknown fields are errors, no type coercion) and immutable. Field
names follow the YAML (camelCase); the Python attribute names are snake_case.

Each feature of a route is its own module (``match.py``, ``headers.py``, ``auth.py``,
``rate_limits.py``, ``timeouts.py``, ``retries.py``, ``circuit_breaker.py``, ``cache.py``,
...; what they share is ``shared_types.py``), holding its model, its CEL rules and the
Python check of each; a rule that spans features (``SPEC_RULES``) is declared by the
feature it is about and checked here, on ``RouteSpec``, which composes them. The simple
rules are declared once for both languages (``declared_rules.py``);
``tests/e2e/test_crd_cel_parity.py`` holds every CEL rule to its Python check on a real
API server.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from servicekit.model import Model
from control_plane.model.access import Access
from control_plane.model.api_keys import check_api_keys
from control_plane.model.auth import DEFAULT_AUTH, Auth
from control_plane.model.back_pressure import BackPressure
from control_plane.model.backends import BACKENDS_SPEC_RULES, Backend, check_backends
from control_plane.model.cache import CACHE_SPEC_RULES, Cache, check_cache
from control_plane.model.circuit_breaker import FALLBACK_SPEC_RULES, CircuitBreaker, Fallback, check_fallback
from control_plane.model.disabled import Disabled
from control_plane.model.headers import NO_HEADER_RULES, HeaderRules
from control_plane.model.health_check import HealthCheck
from control_plane.model.match import METHODS, HeaderMatch, Match
from control_plane.model.outlier_detection import OutlierDetection
from control_plane.model.rate_limits import RateLimit
from control_plane.model.retries import IDEMPOTENT_METHODS, KEYED_METHODS, RETRIES_SPEC_RULES, Retries, check_retried_methods
from control_plane.model.rewrite import REWRITE_SPEC_RULES, Rewrite, check_rewrite
from control_plane.model.shared_types import HostName, Namespace, ObjectName, cel, unique
from control_plane.model.shield import Shield
from control_plane.model.timeouts import (
    CONNECT_TIMEOUT_MS,
    NO_TIMEOUTS,
    PER_TRY_TIMEOUT_MS,
    REQUEST_TIMEOUT_MS,
    Timeouts,
    check_connect_timeout,
)
from control_plane.model.validation import Validation
from control_plane.model.waiting_room import WaitingRoom

API_VERSION = "gatehouse.io/v1alpha1"
KIND = "Route"


class RouteSpec(Model):
    model_config = cel(
        *FALLBACK_SPEC_RULES,
        *BACKENDS_SPEC_RULES,
        *REWRITE_SPEC_RULES,
        *RETRIES_SPEC_RULES,
        *CACHE_SPEC_RULES,
    )

    hosts: Annotated[list[HostName], AfterValidator(unique), Field(max_length=64)] = []
    match: Match
    backends: Annotated[list[Backend], Field(max_length=64)] = []
    rewrite: Rewrite | None = None
    headers: HeaderRules = Field(default_factory=lambda: NO_HEADER_RULES)
    auth: Auth = Field(default_factory=lambda: DEFAULT_AUTH)
    rate_limits: Annotated[list[RateLimit], Field(max_length=16)] = []
    timeouts: Timeouts = Field(default_factory=lambda: NO_TIMEOUTS)
    retries: Retries | None = None
    circuit_breaker: CircuitBreaker | None = None
    back_pressure: BackPressure | None = None
    fallback: Fallback | None = None
    """Served only while ``circuitBreaker.errorRate`` holds the route OPEN (or HALF_OPEN)."""
    outlier_detection: OutlierDetection | None = None
    health_check: HealthCheck | None = None
    priority: Literal["critical", "high", "normal", "low"] = "normal"
    access: Access | None = None
    shield: Shield | None = None
    cache: Cache | None = None
    """Per-route response cache; see ``Cache``."""
    waiting_room: WaitingRoom | None = None
    """Requests beyond ``admitPerSecond`` queue with a ticket (``waiting_room``)."""
    validate_: Validation | None = Field(default=None, alias="validate")
    """Request validation in the route's HTTP check; see ``control_plane.model.validation``."""
    disabled: Disabled | None = None

    @model_validator(mode="after")
    def _cross_field(self) -> RouteSpec:
        """The rules between features, each declared by its feature; the first broken one wins."""
        check_fallback(self.fallback, self.circuit_breaker)
        check_backends(self.backends, disabled=self.disabled is not None)
        check_rewrite(self.rewrite, self.match)
        check_retried_methods(self.retries, self.match)
        if self.cache is not None:
            check_cache(self.cache, self)
        check_api_keys(self.auth, self.rate_limits)
        check_connect_timeout(self.timeouts, retried=self.retries is not None and self.retries.attempts > 0)
        return self


class ObjectMeta(Model):
    name: ObjectName
    namespace: Namespace = "default"


class RouteDocument(Model):
    """A whole Route as written in a file or stored as a custom resource."""

    api_version: Literal["gatehouse.io/v1alpha1"]
    kind: Literal["Route"]
    metadata: ObjectMeta
    spec: RouteSpec

    @model_validator(mode="after")
    def _distinct_backends(self) -> RouteDocument:
        seen: set[tuple[str, str, int]] = set()
        for index, backend in enumerate(self.spec.backends):
            key = (backend.namespace or self.metadata.namespace, backend.service, backend.port)
            if key in seen:
                raise ValueError(
                    f"spec.backends[{index}]: {key[0]}/{backend.service}:{backend.port} is listed twice"
                )
            seen.add(key)
        return self


__all__ = [
    # This module's own.
    "API_VERSION",
    "KIND",
    "ObjectMeta",
    "RouteDocument",
    "RouteSpec",
    # Re-exported from the feature modules for imports written before the split
    # (new code imports them from their own module).
    "CONNECT_TIMEOUT_MS",
    "IDEMPOTENT_METHODS",
    "KEYED_METHODS",
    "METHODS",
    "PER_TRY_TIMEOUT_MS",
    "REQUEST_TIMEOUT_MS",
    "Access",
    "Auth",
    "BackPressure",
    "CircuitBreaker",
    "HeaderMatch",
    "HealthCheck",
    "OutlierDetection",
    "RateLimit",
    "Retries",
    "Shield",
]
