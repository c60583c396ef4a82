"""The control plane's config file. Documented in docs/control-plane-config.md.

    xds:     {address: 127.0.0.1:18000}
    admin:   {address: 127.0.0.1:19000, operatorCredentialFile: operator-credential}
    gateway: {listenerAddress: 0.0.0.0, listenerPort: 8080}
    nodeGroups: {internal: {listenerPort: 9080}}
    debounce: {quiet: 20ms, maxDelay: 250ms}
    sources:
      git:
        - {name: routes, repo: ../routes-repo, branch: main, path: routes, pollInterval: 1s}
      staticEndpoints: {file: endpoints.yaml, pollInterval: 100ms}
      kubernetes: {kubeconfig: ~/.kube/config, namespaces: [], leaseNamespace: gatehouse}

Relative paths are taken from the config file's directory.
"""

from __future__ import annotations

import os

from pathlib import Path
from typing import Literal, Annotated

from pydantic import AfterValidator, Field, IPvAnyNetwork, model_validator

from servicekit.config_file import HostPort, load_config_file
from servicekit.durations import Duration, Millis
from servicekit.model import Model
from servicekit.audit_output import AuditOutput

Port = Annotated[int, Field(ge=1, le=65535)]


class Listen(Model):
    address: HostPort


class Admin(Listen):
    """The admin HTTP address and who may use it (control_plane/admin_access.py,
    docs/control-plane-config.md "The admin port"). /healthz, /readyz and /metrics are open."""

    operator_credential_file: str | None = None
    """The bearer credential ``POST /sync`` needs; relative to the config file's directory.
    Without it ``POST /sync`` answers 503. A credential of its own, not
    ``breakers.operatorCredentialFile``: a webhook that may sync cannot move a breaker."""
    webhook_secret_file: str | None = None
    """A Git host's webhook secret: ``POST /sync`` is also taken when its
    ``X-Hub-Signature-256`` is ``sha256=`` HMAC-SHA256(secret, body) (GitHub, Gitea and
    Forgejo sign this way; GitHub cannot send a bearer credential). Relative to the config
    file's directory. It only syncs: never a read, never a breaker."""
    read_credential_file: str | None = None
    """The credential the reads need unless ``openReads`` opens them: ``/``, ``/status``,
    ``/status/routes``, ``/status/node``, ``/config``, ``GET /breakers``, sent as
    ``Authorization: Bearer`` (or, from a browser, as the Basic password). The operator
    credential reads too."""
    open_reads: Literal["loopback", "private", "never"] = "loopback"
    """Who reads without a credential, by the address they connect from: ``loopback`` (the
    default: this machine only; with a pod, ``kubectl port-forward``), ``private`` too
    (RFC 1918, fc00::/7 and the other ranges Python's ``ipaddress`` calls private: trust in
    the network, which a NAT or a load balancer in front defeats), ``never``."""


class GatewayTls(Model):
    """TLS termination from files (a mounted Kubernetes Secret works: `tls.crt`, `tls.key`).
    Envoy watches their directory, so a rotated certificate needs no restart."""

    cert_file: Annotated[str, Field(min_length=1)]
    """PEM certificate chain; relative to the config file's directory."""
    key_file: Annotated[str, Field(min_length=1)]
    """PEM private key; relative to the config file's directory."""


class LoadShedding(Model):
    """The concurrency limit on `low` routes (control_plane/translator/load_shedding.py)."""

    latency_target: Annotated[Duration, Field(ge=1, le=60_000)]
    """Low-priority requests slower than this (plus 25%, at p90) make their limit shrink."""
    max_concurrency: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    """The most low-priority requests in flight at once, however fast they are."""


class Gateway(Model):
    listener_address: str = "0.0.0.0"
    listener_port: Port = 8080
    max_request_headers_kb: Annotated[int, Field(ge=1, le=8192)] = 60
    """Request headers beyond this many KiB are answered 431 (Envoy's own limit is 8192)."""
    max_request_body_bytes: Annotated[int, Field(ge=0, le=1 << 40)] = 10 * 1024 * 1024
    """Request bodies beyond this many bytes are answered 413, checked while they stream
    (nothing is buffered for it); 0: no limit."""
    server_header: Annotated[str, Field(max_length=128, pattern=r"^([!-~]([ -~]*[!-~])?)?$")] = "gatehouse"
    """The `server` header on every response; "" sends none. An upstream's own never passes."""
    tls: GatewayTls | None = None
    """Terminate TLS on the listener (TLS 1.2 minimum, HSTS on responses); None: plain HTTP."""
    route_stats: bool = True
    """Per-route Envoy stats (golden signals per route); about 2 KiB of Envoy memory per
    route and virtual host. Off: per-cluster stats only."""
    load_shedding: LoadShedding | None = None
    """Shed `low` routes first when their latency climbs; None: off (the per-priority
    upstream pools apply either way)."""


class ExtAuthz(Model):
    """Where Envoy finds the Authorization service (usually a sidecar on localhost)."""

    address: HostPort | list[HostPort]
    """One address, or several (Envoy balances checks across them): the service's
    ``http.listen`` for ``protocol: http``, its ``listen`` for ``grpc``."""
    protocol: Literal["http", "grpc"] = "http"
    """``http`` (default): Envoy's HTTP ext_authz protocol, one lean call per request that
    also decides the route's rate limits (bench/gateway.py measured it); ``grpc``: the
    gRPC Authorization service, and the route's limits as a second call."""
    forward_headers: list[str] = []
    """Over HTTP, extra request headers the check sees: the ones ``header:<name>`` rate-limit
    keys on authenticated routes name."""
    public_route_limits: bool = True
    """Over HTTP, a public route's rate limits are decided by the same lean call (no token
    is checked), instead of a gRPC call to ratelimit_svc: about a fifth of the CPU per
    decision (bench/gateway.py). If the service cannot answer, such a route follows
    ``rateLimit.failClosed``, as it would with ratelimit_svc. False: they stay there."""
    timeout: Duration = Millis(250)
    fail_open: bool = False
    """If the service cannot answer: false denies with 503 (default), true lets requests through."""
    features: list[Literal["waitingRoom", "apiKeys", "signedUpstreamTokens", "tokenExchange"]] | None = None
    """What the service is configured for: ``waitingRoom`` (its ``http.waitingRoom`` ticket
    key), ``apiKeys`` (a key store: ``revocation``), ``signedUpstreamTokens``
    (``http.upstreamTokens.keyFile``), ``tokenExchange`` (``http.upstreamTokens``). A route
    needing one not listed is refused here (``Accepted=False``, naming the setting). Unset:
    not declared; the service refuses, per route, what it cannot serve (503, fail closed)."""
    require_audience: bool = False
    """A route that reads tokens must name ``auth.audiences`` (refused otherwise, naming the
    route and the field): a token any backend collected then cannot replay on it. The chart
    turns it on (``extAuthz.requireAudience``)."""


class RateLimitService(Model):
    """Where Envoy finds ratelimit_svc (usually a sidecar on localhost)."""

    address: HostPort | list[HostPort]
    timeout: Duration = Millis(100)
    fail_closed: bool = False
    """If the service cannot answer: false lets requests through (default), true answers 500."""


class AccessLogService(Model):
    """Where Envoy streams access-log entries (the telemetry service, `gatehouse telemetry`)."""

    address: HostPort | list[HostPort]
    buffer_size: Annotated[int, Field(ge=0, le=16 * 1024 * 1024)] = 16_384
    """Bytes Envoy buffers before it sends (0: send each entry at once)."""
    flush_interval: Duration = Millis(1000)
    """Envoy sends a partly filled buffer after this long."""


class Tracing(Model):
    """W3C trace context and OTLP spans (docs/tracing.md): Envoy starts or continues a
    ``traceparent`` on every request and reports its spans to an OpenTelemetry collector."""

    otlp_address: HostPort
    """The collector's OTLP/gRPC receiver (``host:port``, usually 4317)."""
    sampling_percent: Annotated[float, Field(ge=0, le=100)] = 100.0
    """Share of the requests that start a new trace which are sampled; a caller's sampled
    ``traceparent`` is followed either way (Envoy's OpenTelemetry tracer honours the flag)."""
    service_name: Annotated[str, Field(min_length=1, max_length=128)] = "gatehouse-gateway"
    """``service.name`` of Envoy's spans."""
    timeout: Duration = Millis(1000)
    """How long Envoy waits for one export to the collector."""


class Breakers(Model):
    """The route breakers' detector (docs/circuit-breaker.md, "Detection")."""

    tally_credential_file: str | None = None
    """The bearer credential telemetry must send with its tallies (``POST /breakers/tallies``
    on the admin address); relative to the config file's directory. Without it the
    endpoint answers 503 and no breaker moves by itself."""
    operator_credential_file: str | None = None
    """The bearer credential an operator sends to open, close, half-open or release a
    breaker (``POST /breakers/{namespace}/{name}/{action}``); relative to the config file's
    directory. A credential of its own, not the tally one, so telemetry cannot pin a
    breaker. Without it those calls answer 503; ``GET /breakers`` needs none."""


class Debounce(Model):
    quiet: Duration = Millis(20)
    max_delay: Duration = Millis(250)

    @model_validator(mode="after")
    def _ordered(self) -> Debounce:
        if self.quiet > self.max_delay:
            raise ValueError("quiet must not exceed maxDelay")
        return self


GitNamespace = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]


def _git_directory(value: str) -> str:
    parts = value.strip("/").split("/")
    if value.startswith("/") or not value.strip("/") or any(p in ("", ".", "..") for p in parts) or "\0" in value:
        raise ValueError(f"{value[:200]!r} is not a directory inside the source's path (relative, no '.' or '..' segments)")
    return value.strip("/")


GitDirectory = Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(_git_directory)]
"""A directory inside the source's path: relative, without ``.`` or ``..`` segments."""


class GitRepo(Model):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")] = "routes"
    repo: str
    branch: str = "main"
    path: str = ""
    poll_interval: Duration = Millis(1000)
    fetch_timeout: Duration = Millis(30_000)
    cache_dir: str | None = None
    namespaces: list[GitNamespace] | None = None
    """The namespaces this repository's Routes and ReferenceGrants may claim
    (control_plane/model/namespace_binding.py). Unset: only ``default``, with a warning at
    start-up; a document naming another is refused, naming this setting."""
    namespaces_by_path: dict[GitDirectory, list[GitNamespace]] = {}
    """Narrower bindings for the files under a directory (relative to ``path``): the
    longest matching directory decides, in place of ``namespaces``."""


class StaticEndpoints(Model):
    file: str
    poll_interval: Duration = Millis(100)


class KubernetesApiKeys(Model):
    """Sync API-key Secrets (label ``gatehouse.io/api-key=true``) into ext_authz's key store
    (control_plane/sources/kubernetes/api_key_secrets.py)."""

    redis_url: str
    """ext_authz's ``revocation.redisUrl``."""
    key_prefix: str = "gatehouse:"
    namespace: str | None = None
    """Where the Secrets are; default: the Lease's namespace (the control plane's own)."""
    timeout: Duration = Millis(250)


class KubernetesBreakerBoard(Model):
    """Share the route breakers' phases between replicas through one ConfigMap
    (control_plane/sources/kubernetes/breaker_board.py; docs/circuit-breaker.md)."""

    config_map: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)]
    """Its name, in the Lease's namespace; the control plane creates it on first use."""


class KubernetesRouteAcks(Model):
    """Share what each replica's Envoys ACKed or NACKed of the Routes through one ConfigMap,
    so the Lease holder's Route status covers every Envoy, whichever replica it is
    connected to (control_plane/sources/kubernetes/route_acks.py; docs/kubernetes.md)."""

    config_map: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)]
    """Its name, in the Lease's namespace; the control plane creates it on first use."""


class KubernetesEndpointSlices(Model):
    """Which EndpointSlices the gateway sends traffic to
    (control_plane/sources/kubernetes/endpoint_trust.py; docs/kubernetes.md, "Endpoints")."""

    trusted_managers: list[Annotated[str, Field(min_length=1, max_length=63)]] = ["endpointslice-controller.k8s.io"]
    """``endpointslice.kubernetes.io/managed-by`` values whose slices are used:
    ``endpointslice-controller.k8s.io`` for Services with a selector, any other for
    selector-less Services. Adding ``endpointslicemirroring-controller.k8s.io`` trusts
    whoever may write Endpoints."""
    address_ranges: list[IPvAnyNetwork] = []
    """The pod and Service ranges (CIDRs) endpoint addresses must fall in; empty: any
    address but loopback, link-local, multicast and unspecified."""


class Kubernetes(Model):
    kubeconfig: str | None = None
    """A kubeconfig file; without one, the pod's service account (in-cluster)."""
    namespaces: list[Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]] = []
    """Watch Routes only in these namespaces; empty means all."""
    lease_namespace: str | None = None
    lease_name: str = "gatehouse-control-plane"
    lease_duration: Duration = Millis(15_000)
    """A leader that has not renewed for this long may be replaced."""
    lease_renew: Duration = Millis(2_000)
    write_status: bool = True
    api_keys: KubernetesApiKeys | None = None
    breaker_board: KubernetesBreakerBoard | None = None
    """Without it each replica keeps its own breakers (right for one replica only)."""
    route_acks: KubernetesRouteAcks | None = None
    """Without it the Route status reflects only the Envoys of the Lease holder (right for one replica only)."""
    endpoint_slices: KubernetesEndpointSlices = KubernetesEndpointSlices()

    @model_validator(mode="after")
    def _renew_within_duration(self) -> Kubernetes:
        if self.lease_renew * 2 > self.lease_duration:
            raise ValueError("leaseRenew must be at most half of leaseDuration")
        return self


class Sources(Model):
    git: list[GitRepo] = []
    static_endpoints: StaticEndpoints | None = None
    kubernetes: Kubernetes | None = None

    @model_validator(mode="after")
    def _unique_names(self) -> Sources:
        names = [g.name for g in self.git]
        if len(names) != len(set(names)):
            raise ValueError("git: each repository needs its own name")
        return self


class ControlPlaneConfig(Model):
    xds: Listen = Listen(address="127.0.0.1:18000")
    admin: Admin = Admin(address="127.0.0.1:19000")
    gateway: Gateway = Gateway()
    ext_authz: ExtAuthz | None = None
    rate_limit: RateLimitService | None = None
    access_log: AccessLogService | None = None
    tracing: Tracing | None = None
    """Distributed tracing over OTLP; None (the default): off, no trace work in Envoy."""
    audit: AuditOutput | None = None
    """Audit events (config applied, rejected, NACKed) to Kafka; without it, to the log."""
    node_groups: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")], Gateway] = {}
    """Envoys whose node.cluster names a group here listen where the group says; the rest
    use `gateway`. Routes, clusters and endpoints are the same for every group."""
    rate_limits_without_limiter: Literal["refuse", "serveUnlimited"] = "refuse"
    """A route with ``rateLimits`` when ``rateLimit`` is not configured: ``refuse`` (the
    default) does not serve it (``Accepted=False``); ``serveUnlimited`` serves it without
    its limits, with the route's ``Enforced=False`` condition saying so."""
    debounce: Debounce = Debounce()
    breakers: Breakers = Breakers()
    sources: Sources
    base_dir: Annotated[str, Field(exclude=True)] = "."

    def resolve(self, path: str) -> Path:
        candidate = Path(path).expanduser()
        return candidate if candidate.is_absolute() else (Path(self.base_dir) / candidate).resolve()

    def absolute(self, path: str) -> str:
        """Like ``resolve`` but keeps symlinks: Envoy must watch a Secret volume's stable
        ``tls.crt`` → ``..data/`` links, not the timestamped directory they point at today."""
        candidate = Path(path).expanduser()
        return str(candidate if candidate.is_absolute() else Path(os.path.abspath(Path(self.base_dir) / candidate)))

    def repo_location(self, repo: str) -> str:
        """Local repository paths are resolved like files; URLs pass through."""
        if "://" in repo or repo.startswith("git@"):
            return repo
        return str(self.resolve(repo))


def load_config(path: Path) -> ControlPlaneConfig:
    return load_config_file(path, ControlPlaneConfig)
