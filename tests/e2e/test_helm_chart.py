"""The Helm chart (charts/gatehouse) against the pinned helm and a real kube-apiserver.

- `helm lint --strict` is clean, with defaults and with every optional part that renders
  something real switched on;
- values.schema.json refuses unknown keys and wrong types; the templates refuse
  inconsistent values;
- what the chart renders for the programs is what they accept: the control-plane config
  loads with `control_plane.config.load_config`, the Envoy bootstrap passes
  `envoy --mode validate` with the Deployment's own arguments, the ext_authz config loads
  with `ext_authz.config.load_ext_authz_config`, the ratelimit config with
  `ratelimit_svc.config.load_ratelimit_config`, the telemetry config with
  `telemetry.config.load_telemetry_config` (Kafka or stdout sink), the `accessLog` and
  `audit` blocks appear exactly when telemetry / Kafka are on, and every container runs a
  command that exists;
- `kubectl apply --dry-run=server` accepts every rendering, with no Pod Security
  ("restricted") warning;
- `helm install` for real, then the control plane runs with the chart's ConfigMap and the
  chart's ServiceAccount token (least-privilege RBAC is enough: it syncs, takes the Lease,
  writes Route status), and Envoy runs with the chart's bootstrap and arguments, serves the
  example Route, exposes only /ready and /stats on its health port, and the preStop hook
  drains it;
- `helm install` with ext_authz on: the generated admin credential survives `helm upgrade`,
  and `gatehouse ext-authz` runs with the installed ConfigMap and Secret (the Deployment's
  own arguments): ready on its probe port, decides with the configured issuer, and
  `gatehouse revoke` with the Secret's credential revokes a token through the admin port;
- `helm install` with rate limits on: `gatehouse ratelimit` runs with the installed ConfigMap
  and the Deployment's own arguments, gets its limits from a control plane running the
  installed config, turns ready on its probe port, and counts a Route's limit in Redis on
  the localhost port Envoy is given;
- `helm install` with telemetry on: `gatehouse telemetry` runs with the installed ConfigMap
  and the Deployment's own arguments, turns ready on its probe port, and writes an access
  event to stdout for an entry streamed to the address the control plane gives Envoy;
- route breakers (on by default): the control plane gets both credentials and the shared
  board's ConfigMap, telemetry (only when on) the tally credential alone and every replica
  through a headless Service; `helm install` keeps the generated credentials across
  `helm upgrade`, and the control plane's ServiceAccount may create ConfigMaps and touch
  only the board's (a list or watch by `metadata.name` field selector included) on the
  real API server; the installed control plane takes tallies and operator moves with the
  installed credentials.

Needs the tools from scripts/build-kube-tools; under CI=true a missing tool fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import base64
import urllib.error
import urllib.request

import grpc
import pytest
import yaml
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from envoy.service.auth.v3 import attribute_context_pb2, external_auth_pb2, external_auth_pb2_grpc
from google.rpc import code_pb2
from redis import Redis as RedisClient

from control_plane.config import load_config
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from ext_authz.config import load_ext_authz_config
from gatehouse.envoy_bootstrap import OverloadSettings, overload_manager
from ratelimit_svc.config import load_ratelimit_config
from telemetry.config import load_telemetry_config
from tests.harness.control_plane import ControlPlaneProcess
from tests.harness.envoy import envoy_binary
from tests.harness.http_client import Client, get, wait_for
from tests.harness.issuer import JwksServer, TestIssuer
from tests.harness.kubernetes import KubeAPIServer, KubeTools, kube_tools
from tests.harness.netns import TestNetwork
from tests.harness.ports import free_port
from tests.harness.processes import ManagedProcess
from tests.harness.redis import RedisServer
from tests.harness.upstream import EchoUpstream
from tests.harness.window_clock import settle
from tests.unit.telemetry.entries import full_entry

pytestmark = pytest.mark.timeout(600)

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "gatehouse"
CRD = CHART / "crds" / "routes.gatehouse.io.yaml"
EXAMPLE_ROUTE = REPO_ROOT / "examples" / "k8s" / "route.yaml"
EXAMPLE_BACKEND = REPO_ROOT / "examples" / "k8s" / "backend.yaml"

RELEASE = "gh"
NAMESPACE = "gatehouse-system"
CONTROL_PLANE = f"{RELEASE}-gatehouse-control-plane"
GATEWAY = f"{RELEASE}-gatehouse-gateway"

# Every optional part that renders something real except ext_authz (its own variant
# below): the ratelimit and telemetry sidecars, Kafka (access and audit events), the
# in-chart Redis, Git, NetworkPolicies, TLS on the gateway listener, load shedding ...
KAFKA_SERVERS = ["kafka-0.kafka:9092", "kafka-1.kafka:9092"]
# `--set` splits on commas: the list is escaped, as a user would have to.
WITH_KAFKA = ["--set", "kafka.bootstrapServers=" + "\\, ".join(KAFKA_SERVERS)]
ALL_ON = [
    "--set", "networkPolicy.enabled=true,redis.enabled=true,rateLimit.enabled=true,telemetry.enabled=true",
    "--set", "controlPlane.git.enabled=true,controlPlane.git.repo=https://git.example.com/routes.git",
    "--set", "controlPlane.git.path=routes,controlPlane.kubernetes.namespaces={shop}",
    "--set", "gateway.service.type=LoadBalancer,gateway.service.externalTrafficPolicy=Local",
    "--set", "gateway.autoscaling.enabled=false,gateway.replicas=3",
    "--set", "gateway.tls.secretName=gateway-cert,gateway.maxRequestHeadersKb=32,gateway.envoy.overload.maxConnections=20000",
    "--set-json", 'gateway.loadShedding={"latencyTarget":"250ms"}',
    *WITH_KAFKA, "--set", "redis.url=",
    "--set-json", 'networkPolicy.controlPlane.adminFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]',
    "--set-json",
    'networkPolicy.upstreams=[{"namespace":"shop","podSelector":{"matchLabels":{"app":"order-service"}},'
    '"ports":[{"port":8080,"protocol":"TCP"}],"extraFrom":[{"podSelector":{"matchLabels":{"role":"batch"}}}]}]',
]  # fmt: skip
ISSUER = "https://auth.example.com/"
JWKS_URL = "https://auth.example.com/.well-known/jwks.json"
ISSUERS = [
    {"issuer": ISSUER, "jwksUrl": JWKS_URL, "audiences": ["api"], "algorithms": ["RS256", "ES256"], "leeway": "45s",
     "requiredClaims": ["exp", "sub"], "requireJti": True, "claimHeaders": {"x-user-id": "sub", "x-scope": "scope"}},
    {"issuer": "https://partners.example.com/", "jwksUrl": "https://partners.example.com/jwks", "jwks": {"timeout": "3s"}},
]  # fmt: skip
WITH_ISSUERS = ["--set-json", f"extAuthz.issuers={json.dumps(ISSUERS)}"]
# ext_authz with everything it can have: issuers, revocation on the in-chart Redis, the
# admin API open to one peer behind a NetworkPolicy.
EXT_AUTHZ_ON = [
    "--set", "extAuthz.enabled=true,extAuthz.admin.enabled=true,redis.enabled=true,networkPolicy.enabled=true",
    *WITH_ISSUERS,
    "--set-json", 'extAuthz.admin.from=[{"podSelector":{"matchLabels":{"app":"revocation-bot"}}}]',
]  # fmt: skip
SIDECARS_ON = ["--set", "extAuthz.enabled=true,rateLimit.enabled=true,telemetry.enabled=true,redis.enabled=true", *WITH_ISSUERS, *WITH_KAFKA]
# The ratelimit sidecar with every value set away from its default.
RATE_LIMIT_ON = [
    "--set", "rateLimit.enabled=true,rateLimit.timeout=150ms,rateLimit.failClosed=true,rateLimit.logLevel=debug",
    "--set", "rateLimit.redis.timeout=80ms,rateLimit.hybrid.maxBatch=40,rateLimit.port=8085,rateLimit.metricsPort=9105",
]  # fmt: skip

VARIANTS = {"defaults": [], "all-optional-parts": ALL_ON, "ext-authz": EXT_AUTHZ_ON}
EXT_AUTHZ = f"{RELEASE}-gatehouse-ext-authz"
EXT_AUTHZ_ADMIN_SECRET = f"{RELEASE}-gatehouse-ext-authz-admin"
RATELIMIT = f"{RELEASE}-gatehouse-ratelimit"
TELEMETRY = f"{RELEASE}-gatehouse-telemetry"
AUDIT_SPOOL = "/var/lib/gatehouse/audit-spool"
GATEWAY_TLS_DIR = "/etc/gatehouse/tls"
# The route breakers' Secret (generated by the chart) and their board's ConfigMap (created by
# the control plane, never rendered) share this name.
BREAKERS = f"{RELEASE}-gatehouse-breakers"
BREAKERS_DIR = "/etc/gatehouse/breakers"
CONTROL_PLANE_REPLICAS = f"{RELEASE}-gatehouse-control-plane-replicas"
ROUTE_ACKS = f"{RELEASE}-gatehouse-route-acks"
"""The ConfigMap the replicas share their Envoys' ACKs through (created by the control plane)."""
CONTROL_PLANE_ADMIN = f"{RELEASE}-gatehouse-control-plane-admin"
ADMIN_DIR = "/etc/gatehouse/admin"
DRAIN_SECONDS = 3


# --- helpers ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tools() -> KubeTools:
    return kube_tools()


def run_helm(tools: KubeTools, home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The pinned helm, with cache/config/data under `home` (never ~/.config/helm)."""
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    result = subprocess.run([tools.helm, *args], capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}\n{result.stdout}")
    return result


def template(tools: KubeTools, home: Path, *values: str) -> str:
    return run_helm(tools, home, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *values).stdout


def objects(manifest: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(manifest) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every container of every Deployment, as '<deployment>/<container>'."""
    found = {}
    for doc in docs:
        if doc["kind"] == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                found[f"{doc['metadata']['name']}/{container['name']}"] = container
    return found


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


# --- lint, schema, template guards --------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_helm_lint_is_clean(tools: KubeTools, helm_home: Path, variant: str) -> None:
    result = run_helm(tools, helm_home, "lint", "--strict", str(CHART), "--namespace", NAMESPACE, *VARIANTS[variant])
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "bogus=1"], "bogus"),
        (["--set", "gateway.replicaz=3"], "replicaz"),
        (["--set", "controlPlane.git.enabeld=true"], "enabeld"),
        (["--set", "gateway.service.type=Ingress"], "type"),
        (["--set", "controlPlane.xdsPort=http"], "xdsPort"),
        (["--set", "gateway.envoy.concurrency=0"], "concurrency"),
        (["--set", "controlPlane.debounce.quiet=20"], "quiet"),
        (["--set", "redis.url=localhost:6379"], "url"),
        (["--set", "controlPlane.git.enabled=true"], "repo"),
        (["--set-json", 'networkPolicy.upstreams=[{"namespace":"shop","podSelectr":{}}]'], "podSelectr"),
        (["--set", "extAuthz.revocation.onUnavailable=sometimes"], "onUnavailable"),
        (["--set", "extAuthz.revocation.onUnavailable=lastknown"], "onUnavailable"),
        (["--set", "extAuthz.revocation.lastKnownFor=60"], "lastKnownFor"),
        (["--set-json", 'extAuthz.command=["gatehouse","ext-authz"]'], "command"),
        (["--set-json", 'extAuthz.issuers=[{"issuer":"a","jwksUrl":"ftp://keys"}]'], "jwksUrl"),
        (["--set-json", 'extAuthz.issuers=[{"issuer":"a"}]'], "jwksUrl"),
        (["--set-json", 'extAuthz.issuers=[{"issuer":"a","jwksUrl":"https://k","algorithms":["HS256"]}]'], "algorithms"),
        (["--set-json", 'extAuthz.issuers=[{"issuer":"a","jwksUrl":"https://k","audience":["api"]}]'], "audience"),
        (["--set-json", 'extAuthz.issuers=[{"issuer":"a","jwksUrl":"https://k","claimHeaders":{"X-User":"sub"}}]'], "X-User"),
        (["--set", "extAuthz.admin.existingSecret=Not_A_Name"], "existingSecret"),
        (["--set", "extAuthz.failOpen=yes"], "failOpen"),
        (["--set-json", 'rateLimit.command=["gatehouse","ratelimit"]'], "command"),
        (["--set", "rateLimit.expectedInstances=0"], "expectedInstances"),
        (["--set", "rateLimit.expectedInstances=two"], "expectedInstances"),
        (["--set", "rateLimit.timeout=100"], "timeout"),
        (["--set", "rateLimit.redis.timeout=50"], "timeout"),
        (["--set", "rateLimit.redis.url=redis://elsewhere:6379/0"], "url"),
        (["--set", "rateLimit.hybrid.maxBatch=0"], "maxBatch"),
        (["--set", "rateLimit.failClosed=yes"], "failClosed"),
        (["--set", "rateLimit.metricsPort=0"], "metricsPort"),
        (["--set", "rateLimit.logLevel=loud"], "logLevel"),
        (["--set", "telemetry.enabled=yes"], "enabled"),
        (["--set", "telemetry.port=0"], "port"),
        (["--set", "telemetry.metricsPort=70000"], "metricsPort"),
        (["--set", "telemetry.logLevel=loud"], "logLevel"),
        (["--set", "telemetry.envoyFlushInterval=1"], "envoyFlushInterval"),
        (["--set", "telemetry.envoyBufferSize=-1"], "envoyBufferSize"),
        (["--set", "telemetry.buffer.maxEvents=0"], "maxEvents"),
        (["--set", "telemetry.sink=stdout"], "sink"),
        (["--set-json", 'telemetry.command=["gatehouse","telemetry"]'], "command"),
        (["--set", "kafka.bootstrapServers=kafka-0.kafka"], "bootstrapServers"),  # no port
        (["--set", "kafka.bootstrapServers=kafka-0.kafka:9092\\,"], "bootstrapServers"),  # an empty entry
        (["--set", "kafka.bootstrapServers=kafka://kafka-0:9092"], "bootstrapServers"),
        (["--set", "kafka.auditTopic="], "auditTopic"),
        (["--set", "kafka.accessLogTopic=access log"], "accessLogTopic"),
        (["--set", "kafka.requestTimeout=5"], "requestTimeout"),
        (["--set", "audit.spool.maxBytes=100"], "maxBytes"),
        (["--set", "audit.spool.sizeLimit=1Gi"], "sizeLimit"),
        (["--set", "audit.spool.persistentVolumeClaim=audit"], "persistentVolumeClaim"),
        (["--set", "audit.batchSize=0"], "batchSize"),
        (["--set", "gateway.maxRequestHeadersKb=0"], "maxRequestHeadersKb"),
        (["--set", "gateway.maxRequestHeadersKb=8193"], "maxRequestHeadersKb"),
        (["--set", "gateway.maxRequestBodyBytes=-1"], "maxRequestBodyBytes"),
        (["--set", "gateway.maxRequestBodyBytes=10MB"], "maxRequestBodyBytes"),
        (["--set-string", "gateway.routeStats=yes"], "routeStats"),
        (["--set-json", "gateway.tls.secretName=3"], "secretName"),
        (["--set", "gateway.tls.secretName=Gateway_Cert"], "secretName"),
        (["--set", "gateway.tls.subPath=tls.crt"], "subPath"),
        (["--set", "gateway.loadShedding.latencyTarget=200ms,gateway.loadShedding.maxConcurrency=0"], "maxConcurrency"),
        (["--set", "gateway.loadShedding.maxConcurrency=64"], "latencyTarget"),  # the target is required
        (["--set", "gateway.loadShedding.latencyTarget=200"], "latencyTarget"),
        (["--set-json", 'gateway.loadShedding={"latencyTarget":"200ms","percentile":99}'], "percentile"),
        (["--set", "gateway.envoy.overload.maxHeapPercent=80"], "maxHeapPercent"),
        (["--set", "gateway.envoy.overload.maxConnections=0"], "maxConnections"),
        (["--set", "gateway.envoy.overload.maxHeapBytes=512Mi"], "maxHeapBytes"),
        (["--set", "gateway.envoy.overload.enabled=yes"], "enabled"),
        (["--set", "tracing.enabled=true,tracing.otlpAddress=collector,tracing.samplingPercent=50"], "otlpAddress"),
        (["--set", "tracing.enabled=true,tracing.otlpAddress=collector:4317,tracing.samplingPercent=101"], "samplingPercent"),
        (["--set", "tracing.enabled=true"], "otlpAddress"),
        (["--set", "breakers.enabled=yes"], "enabled"),
        (["--set", "breakers.existingSecret=Edge_Breakers"], "existingSecret"),
        (["--set", "breakers.tallies.flushInterval=200"], "flushInterval"),
        (["--set", "breakers.tallies.timeout=1"], "timeout"),
        (["--set", "breakers.tallies.controlPlane=http://elsewhere:19000"], "controlPlane"),
        (["--set", "breakers.operatorCredential=letmein"], "operatorCredential"),
    ],
)
def test_schema_refuses_unknown_and_mistyped_values(tools: KubeTools, helm_home: Path, values: list[str], message: str) -> None:
    result = run_helm(tools, helm_home, "template", RELEASE, str(CHART), *values, check=False)
    assert result.returncode != 0, f"helm template {values} was accepted"
    assert "schema" in result.stderr and message in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "gateway.drainSeconds=30,gateway.terminationGracePeriodSeconds=30"], "must be larger than gateway.drainSeconds"),
        (["--set", "gateway.port=9901"], "ports collide"),
        (["--set", "rateLimit.enabled=true,redis.enabled=true,rateLimit.port=9902"], "ports collide"),
        (["--set", "rateLimit.enabled=true,redis.enabled=true,rateLimit.metricsPort=8080"], "ports collide"),
        (["--set", "rateLimit.enabled=true,redis.enabled=true,rateLimit.port=9003", *EXT_AUTHZ_ON], "ports collide"),
        (["--set", "rateLimit.enabled=true"], "rateLimit.enabled=true needs a Redis for the rate-limit counters: set redis.url"),
        (["--set", "rateLimit.enabled=true,redis.enabled=false,redis.url="], "rateLimit.enabled=true needs a Redis"),
        (["--set", "gateway.autoscaling.minReplicas=5,gateway.autoscaling.maxReplicas=3"], "minReplicas"),
        (["--set", "extAuthz.enabled=true,redis.enabled=true"], "extAuthz.enabled=true needs at least one trusted issuer in extAuthz.issuers"),
        (["--set", "extAuthz.enabled=true", *WITH_ISSUERS], "extAuthz.revocation.enabled=true needs a Redis: set redis.url"),
        (["--set", "extAuthz.enabled=true,extAuthz.revocation.enabled=false,extAuthz.admin.enabled=true", *WITH_ISSUERS],
         "extAuthz.admin.enabled=true needs extAuthz.revocation.enabled=true"),
        (["--set", "extAuthz.enabled=true,redis.enabled=true", "--set-json",
          'extAuthz.issuers=[{"issuer":"a","jwksUrl":"https://k/1"},{"issuer":"a","jwksUrl":"https://k/2"}]'], 'issuer "a" is listed twice'),
        (["--set", "extAuthz.enabled=true,redis.enabled=true,extAuthz.metricsPort=9902", *WITH_ISSUERS], "ports collide"),
        (["--set", "extAuthz.enabled=true,redis.enabled=true,extAuthz.admin.enabled=true,extAuthz.admin.port=8080", *WITH_ISSUERS],
         "ports collide"),
        (["--set", "telemetry.enabled=true,telemetry.port=8080"], "ports collide"),
        (["--set", "telemetry.enabled=true,telemetry.metricsPort=9902"], "ports collide"),
        (["--set", "telemetry.enabled=true,telemetry.metricsPort=9004,rateLimit.enabled=true,redis.enabled=true"], "telemetry.metricsPort"),
        (["--set", "telemetry.enabled=true,telemetry.port=9003", *EXT_AUTHZ_ON], "ports collide"),
    ],
)
def test_templates_refuse_inconsistent_values(tools: KubeTools, helm_home: Path, values: list[str], message: str) -> None:
    result = run_helm(tools, helm_home, "template", RELEASE, str(CHART), *values, check=False)
    assert result.returncode != 0, f"helm template {values} was accepted"
    assert message in result.stderr, result.stderr


# --- what the programs get ----------------------------------------------------------------


def envoy_argv(container: dict[str, Any], bootstrap: Path, pod_name: str) -> list[str]:
    """The Deployment's Envoy command line, for this machine: the venv's envoy, the
    bootstrap file at `bootstrap`, $(POD_NAME) expanded as the kubelet would."""
    assert container["command"] == ["envoy"], container["command"]
    args = [a.replace("$(POD_NAME)", pod_name) for a in container["args"]]
    args[args.index("-c") + 1] = str(bootstrap)
    return [envoy_binary(), *args]


@pytest.mark.parametrize("variant", VARIANTS)
def test_rendered_config_and_bootstrap_are_accepted_by_the_programs(
    tools: KubeTools, helm_home: Path, tmp_path: Path, variant: str
) -> None:
    docs = objects(template(tools, helm_home, *VARIANTS[variant]))

    # The control plane: its ConfigMap loads as the control plane loads it.
    config_map = find(docs, "ConfigMap", CONTROL_PLANE)
    config_file = tmp_path / "control-plane.yaml"
    config_file.write_text(config_map["data"]["control-plane.yaml"])
    config = load_config(config_file)
    assert config.sources.kubernetes is not None
    assert config.sources.kubernetes.kubeconfig is None  # in-cluster: the ServiceAccount
    assert config.sources.kubernetes.lease_namespace == NAMESPACE
    deployment = find(docs, "Deployment", CONTROL_PLANE)
    pod = deployment["spec"]["template"]["spec"]
    (cp,) = pod["containers"]
    assert [*cp["command"], *cp["args"][:3]] == ["gatehouse", "control-plane", "--config", "/etc/gatehouse/control-plane.yaml"]
    ports = {p["name"]: p["containerPort"] for p in cp["ports"]}
    assert config.xds.address == f"0.0.0.0:{ports['xds']}" and config.admin.address == f"0.0.0.0:{ports['admin']}"
    assert cp["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert cp["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    env = {e["name"]: e for e in cp["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    mounts = {m["mountPath"] for m in cp["volumeMounts"]}
    if variant == "all-optional-parts":
        (git,) = config.sources.git
        assert (git.repo, git.branch, git.path) == ("https://git.example.com/routes.git", "main", "routes")
        assert git.cache_dir is not None and any(git.cache_dir.startswith(m + "/") for m in mounts), (git.cache_dir, mounts)
        assert config.sources.kubernetes.namespaces == ["shop"]
    else:
        assert config.sources.git == []
    assert config.gateway.listener_port == 8080
    # TLS and load shedding exactly when set (ALL_ON sets them).
    if variant == "all-optional-parts":
        assert config.gateway.tls is not None and config.gateway.tls.cert_file == f"{GATEWAY_TLS_DIR}/tls.crt"
        assert config.gateway.load_shedding is not None and config.gateway.load_shedding.latency_target == 250
        assert config.gateway.max_request_headers_kb == 32
    else:
        assert config.gateway.tls is None and config.gateway.load_shedding is None
        assert config.gateway.max_request_headers_kb == 60
    # Envoy calls the ratelimit sidecar of its own pod exactly when it runs.
    if variant == "all-optional-parts":
        assert config.rate_limit is not None and config.rate_limit.address == "127.0.0.1:8081"
    else:
        assert config.rate_limit is None
    # ... streams its access log to the telemetry sidecar of its own pod exactly when it runs,
    # and audit events go to Kafka exactly when there is one, spooled on the pod's volume.
    if variant == "all-optional-parts":
        assert config.access_log is not None and config.access_log.address == "127.0.0.1:8083"
        assert config.audit is not None and config.audit.kafka is not None
        assert config.audit.kafka.bootstrap_servers == KAFKA_SERVERS
        assert config.audit.spool_dir == AUDIT_SPOOL and AUDIT_SPOOL in mounts
        volume, _ = volume_file(pod, cp, config.audit.spool_dir + "/audit.spool.jsonl")
        assert "emptyDir" in volume
    else:
        assert config.access_log is None and config.audit is None
        assert AUDIT_SPOOL not in mounts

    # The gateway: the bootstrap passes `envoy --mode validate` with the Deployment's args.
    bootstrap_map = find(docs, "ConfigMap", GATEWAY)
    bootstrap_file = tmp_path / "bootstrap.yaml"
    bootstrap_file.write_text(bootstrap_map["data"]["bootstrap.yaml"])
    gateway_pod = find(docs, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    envoy = next(c for c in gateway_pod["containers"] if c["name"] == "envoy")
    argv = envoy_argv(envoy, bootstrap_file, "gh-gatehouse-gateway-7d9f8-abcde")
    assert "--disable-hot-restart" in argv
    # The exact command line of the pod, in validate mode (no hot restart: no shared memory).
    result = subprocess.run([*argv, "--mode", "validate"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr

    bootstrap = yaml.safe_load(bootstrap_file.read_text())
    assert bootstrap["node"]["cluster"] == "gateway"
    # The overload manager is on by default, so the validation above covered it.
    max_connections = 20_000 if variant == "all-optional-parts" else 50_000
    assert bootstrap["overload_manager"] == overload_manager(OverloadSettings(max_connections=max_connections, max_heap_bytes=429_496_729))
    xds = bootstrap["static_resources"]["clusters"][0]
    address = xds["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    service = find(docs, "Service", CONTROL_PLANE)
    xds_port = next(p["port"] for p in service["spec"]["ports"] if p["targetPort"] == "xds")
    assert (address["address"], address["port_value"]) == (f"{CONTROL_PLANE}.{NAMESPACE}.svc.cluster.local", xds_port)
    assert bootstrap["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    # Not ready until the first configuration arrived, however long that takes.
    dynamic = bootstrap["dynamic_resources"]
    assert dynamic["cds_config"]["initial_fetch_timeout"] == dynamic["lds_config"]["initial_fetch_timeout"] == "0s"
    assert gateway_pod["automountServiceAccountToken"] is False
    assert envoy["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert gateway_pod["terminationGracePeriodSeconds"] > int(argv[argv.index("--drain-time-s") + 1])


def gatehouse_subcommand_exists(name: str) -> bool:
    result = subprocess.run([sys.executable, "-m", "gatehouse", name, "--help"], capture_output=True, text=True, timeout=60)
    return result.returncode == 0


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_rendered_container_runs_a_command_that_exists(tools: KubeTools, helm_home: Path, variant: str) -> None:
    found = containers(objects(template(tools, helm_home, *VARIANTS[variant])))
    expected = {f"{CONTROL_PLANE}/control-plane", f"{GATEWAY}/envoy"}
    if variant in ("all-optional-parts", "ext-authz"):
        expected.add(f"{RELEASE}-gatehouse-redis/redis")
    if variant == "ext-authz":
        expected.add(f"{GATEWAY}/ext-authz")
    if variant == "all-optional-parts":
        expected |= {f"{GATEWAY}/ratelimit", f"{GATEWAY}/telemetry"}
    assert set(found) == expected
    for name, container in found.items():
        if container.get("command") == ["gatehouse"]:
            assert gatehouse_subcommand_exists(container["args"][0]), name


IN_CHART_REDIS = f"redis://{RELEASE}-gatehouse-redis.{NAMESPACE}.svc.cluster.local:6379/0"


def test_sidecars_render_only_when_enabled_on_localhost(tools: KubeTools, helm_home: Path) -> None:
    docs = objects(template(tools, helm_home, *SIDECARS_ON))
    pod = find(docs, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    by_name = {c["name"]: c for c in pod["containers"]}
    assert set(by_name) == {"envoy", "ext-authz", "ratelimit", "telemetry"}
    # Each sidecar: the gRPC service on localhost; only its probe/metrics port on the pod IP.
    rl_config = yaml.safe_load(find(docs, "ConfigMap", RATELIMIT)["data"]["ratelimit.yaml"])
    assert rl_config["listen"] == "127.0.0.1:8081"
    assert [(p["name"], p["containerPort"]) for p in by_name["ratelimit"]["ports"]] == [("rl-metrics", 9004)]
    authz_config = yaml.safe_load(find(docs, "ConfigMap", EXT_AUTHZ)["data"]["ext-authz.yaml"])
    assert authz_config["listen"] == "127.0.0.1:9001"
    assert [(p["name"], p["containerPort"]) for p in by_name["ext-authz"]["ports"]] == [("authz-metrics", 9003)]
    tm_config = yaml.safe_load(find(docs, "ConfigMap", TELEMETRY)["data"]["telemetry.yaml"])
    assert tm_config["listen"] == "127.0.0.1:8083"
    assert [(p["name"], p["containerPort"]) for p in by_name["telemetry"]["ports"]] == [("tm-metrics", 9005)]
    sidecars = ("ext-authz", "ratelimit", "telemetry")
    for name in sidecars:
        assert by_name[name]["resources"]["requests"]["cpu"]  # the HPA needs every container's request
        assert by_name[name]["securityContext"] == by_name["envoy"]["securityContext"]
    # Each mounts its own config at /etc/gatehouse: different volumes, one per container.
    mounts = {name: {m["mountPath"]: m["name"] for m in by_name[name]["volumeMounts"]} for name in sidecars}
    assert [mounts[name]["/etc/gatehouse"] for name in sidecars] == ["ext-authz-config", "ratelimit-config", "telemetry-config"]
    for i, first in enumerate(sidecars):
        for second in sidecars[i + 1 :]:
            assert set(mounts[first].values()).isdisjoint(mounts[second].values()), (first, second)
    # With Kafka, only ext_authz (of the sidecars) spools audit events.
    assert mounts["ext-authz"][AUDIT_SPOOL] == "ext-authz-audit-spool"
    assert AUDIT_SPOOL not in mounts["ratelimit"] and AUDIT_SPOOL not in mounts["telemetry"]
    cp_config = yaml.safe_load(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    # The lean path by default: Envoy's HTTP check on the sidecar's HTTP port.
    assert (cp_config["extAuthz"]["address"], cp_config["extAuthz"]["protocol"], cp_config["rateLimit"]["address"]) == (
        "127.0.0.1:9006", "http", "127.0.0.1:8081"
    )
    assert authz_config["http"]["listen"] == "127.0.0.1:9006"
    assert cp_config["accessLog"]["address"] == "127.0.0.1:8083"
    # Nothing of ext_authz, ratelimit or telemetry while they are off (a Redis alone renders
    # none of them; Kafka alone only the control plane's audit block).
    plain = objects(template(tools, helm_home, "--set", "redis.enabled=true", *WITH_ISSUERS, *WITH_KAFKA))
    assert not [d for d in plain if any(part in d["metadata"]["name"] for part in ("ext-authz", "ratelimit", "telemetry"))]
    plain_cp = yaml.safe_load(find(plain, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    assert "extAuthz" not in plain_cp and "rateLimit" not in plain_cp and "accessLog" not in plain_cp
    assert plain_cp["audit"]["kafka"]["bootstrapServers"] == KAFKA_SERVERS
    assert {c["name"] for c in find(plain, "Deployment", GATEWAY)["spec"]["template"]["spec"]["containers"]} == {"envoy"}


def volume_file(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The volume behind an absolute file path of a container, and the path inside it (the
    deepest mount holding it, as in the container: /etc/gatehouse/breakers within
    /etc/gatehouse)."""
    for mount in sorted(container["volumeMounts"], key=lambda m: -len(m["mountPath"])):
        if path.startswith(mount["mountPath"] + "/"):
            (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
            return volume, path[len(mount["mountPath"]) + 1 :]
    raise AssertionError(f"{path} is on no volume of {container['name']}")


@pytest.mark.parametrize("redis", ["in-chart", "external"])
def test_rendered_ext_authz_config_loads_and_envoy_is_pointed_at_the_sidecar(
    tools: KubeTools, helm_home: Path, tmp_path: Path, redis: str
) -> None:
    values = [*EXT_AUTHZ_ON, "--set", "extAuthz.timeout=400ms,extAuthz.revocation.onUnavailable=lastKnown"]
    if redis == "external":
        values += ["--set", "redis.enabled=false,redis.url=rediss://redis.example.com:6380/2"]
    docs = objects(template(tools, helm_home, *values))

    # The sidecar's config, as `gatehouse ext-authz` loads it.
    config_file = tmp_path / "ext-authz.yaml"
    config_file.write_text(find(docs, "ConfigMap", EXT_AUTHZ)["data"]["ext-authz.yaml"])
    config = load_ext_authz_config(config_file)
    assert config.listen == "127.0.0.1:9001"
    assert config.metrics.listen == "0.0.0.0:9003"  # the kubelet probes the pod IP
    assert [(i.issuer, i.jwks_url) for i in config.issuers] == [(ISSUER, JWKS_URL), ("https://partners.example.com/", "https://partners.example.com/jwks")]
    first, second = config.issuers
    assert (first.audiences, first.algorithms, first.leeway, first.require_jti) == (["api"], ["RS256", "ES256"], 45_000, True)
    assert first.claim_headers == {"x-user-id": "sub", "x-scope": "scope"}
    assert second.jwks.timeout == 3_000 and second.audiences == [] and second.require_jti is True  # model defaults
    assert config.revocation is not None
    assert config.revocation.redis_url == (IN_CHART_REDIS if redis == "in-chart" else "rediss://redis.example.com:6380/2")
    assert (config.revocation.on_unavailable, config.revocation.timeout) == ("lastKnown", 250)
    assert config.admin is not None
    assert config.admin.listen == "0.0.0.0:9002"  # admin.from names a peer: reachable on the pod IP

    # The Deployment runs exactly that file, probes the metrics port, mounts the credential.
    pod = find(docs, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "ext-authz")
    assert [*sidecar["command"], *sidecar["args"][:3]] == ["gatehouse", "ext-authz", "--config", "/etc/gatehouse/ext-authz.yaml"]
    volume, name = volume_file(pod, sidecar, sidecar["args"][2])
    assert (volume["configMap"]["name"], name) == (EXT_AUTHZ, "ext-authz.yaml")
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    assert ports == {"authz-metrics": 9003, "authz-admin": 9002}
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "authz-metrics"}
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "authz-metrics"}
    volume, name = volume_file(pod, sidecar, config.admin.credential_file)
    assert volume["secret"]["secretName"] == EXT_AUTHZ_ADMIN_SECRET
    assert volume["secret"]["items"] == [{"key": "credential", "path": name}]
    mount = next(m for m in sidecar["volumeMounts"] if m["name"] == volume["name"])
    assert mount["readOnly"] is True
    secret = find(docs, "Secret", EXT_AUTHZ_ADMIN_SECRET)
    assert len(base64.b64decode(secret["data"]["credential"])) >= 16
    assert sidecar["securityContext"] == next(c for c in pod["containers"] if c["name"] == "envoy")["securityContext"]
    assert "checksum/ext-authz" in find(docs, "Deployment", GATEWAY)["spec"]["template"]["metadata"]["annotations"]

    # The control plane sends Envoy to the sidecar of its own pod.
    cp_file = tmp_path / "control-plane.yaml"
    cp_file.write_text(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    cp_config = load_config(cp_file)
    assert cp_config.ext_authz is not None
    assert (cp_config.ext_authz.address, cp_config.ext_authz.timeout, cp_config.ext_authz.fail_open) == ("127.0.0.1:9006", 400, False)
    assert cp_config.ext_authz.protocol == "http"
    # Over HTTP the sidecar takes the routes' rules from the control plane's xDS Service.
    assert config.http is not None and config.http.listen == "127.0.0.1:9006"
    assert config.http.routes.xds.address == f"{CONTROL_PLANE}.{NAMESPACE}.svc.cluster.local:{cp_config.xds.address.rpartition(':')[2]}"
    grpc_docs = objects(template(tools, helm_home, *values, "--set", "extAuthz.protocol=grpc"))
    grpc_cp = tmp_path / "control-plane-grpc.yaml"
    grpc_cp.write_text(find(grpc_docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    assert (load_config(grpc_cp).ext_authz.address, load_config(grpc_cp).ext_authz.protocol) == ("127.0.0.1:9001", "grpc")  # type: ignore[union-attr]

    # Only admin.from reaches the admin port; clients, probes and metrics reach theirs.
    policy = find(docs, "NetworkPolicy", GATEWAY)["spec"]
    open_rule, admin_rule = policy["ingress"]
    assert "from" not in open_rule and {p["port"] for p in open_rule["ports"]} == {8080, 9902, 9003}
    assert admin_rule == {"from": [{"podSelector": {"matchLabels": {"app": "revocation-bot"}}}], "ports": [{"port": 9002, "protocol": "TCP"}]}


def test_ext_authz_admin_defaults_to_localhost_and_takes_an_existing_secret(tools: KubeTools, helm_home: Path, tmp_path: Path) -> None:
    values = ["--set", "extAuthz.enabled=true,extAuthz.admin.enabled=true,redis.url=redis://redis.example.com:6379/0", *WITH_ISSUERS]
    existing = ["--set", "extAuthz.admin.existingSecret=authz-admin,extAuthz.admin.existingSecretKey=token"]
    docs = objects(template(tools, helm_home, *values, *existing))
    config_file = tmp_path / "ext-authz.yaml"
    config_file.write_text(find(docs, "ConfigMap", EXT_AUTHZ)["data"]["ext-authz.yaml"])
    config = load_ext_authz_config(config_file)
    assert config.admin is not None and config.admin.listen == "127.0.0.1:9002"  # port-forward only
    others = {"breakers", "control-plane-admin"}  # their own credentials, not ext_authz's admin
    generated = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["labels"]["app.kubernetes.io/component"] not in others]
    assert not generated  # the user's Secret is used, none generated
    pod = find(docs, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "ext-authz")
    assert "authz-admin" not in {p["name"] for p in sidecar["ports"]}
    volume, name = volume_file(pod, sidecar, config.admin.credential_file)
    assert volume["secret"]["secretName"] == "authz-admin"
    assert volume["secret"]["items"] == [{"key": "token", "path": name}]

    # Revocation off: no Redis needed, no admin, no revocation block.
    docs = objects(template(tools, helm_home, "--set", "extAuthz.enabled=true,extAuthz.revocation.enabled=false", *WITH_ISSUERS))
    config_file.write_text(find(docs, "ConfigMap", EXT_AUTHZ)["data"]["ext-authz.yaml"])
    config = load_ext_authz_config(config_file)
    assert config.revocation is None and config.admin is None


@pytest.mark.parametrize("redis", ["in-chart", "external"])
def test_rendered_ratelimit_config_loads_and_envoy_is_pointed_at_the_sidecar(
    tools: KubeTools, helm_home: Path, tmp_path: Path, redis: str
) -> None:
    values = [*RATE_LIMIT_ON, "--set", "networkPolicy.enabled=true", *EXT_AUTHZ_ON]
    if redis == "external":
        values += ["--set", "redis.enabled=false,redis.url=rediss://redis.example.com:6380/2"]
    docs = objects(template(tools, helm_home, *values))

    # The sidecar's config, as `gatehouse ratelimit` loads it.
    config_file = tmp_path / "ratelimit.yaml"
    config_file.write_text(find(docs, "ConfigMap", RATELIMIT)["data"]["ratelimit.yaml"])
    config = load_ratelimit_config(config_file)
    assert config.listen == "127.0.0.1:8085"  # only the Envoy of the same pod calls it
    assert config.metrics.listen == "0.0.0.0:9105"  # the kubelet probes the pod IP
    assert config.redis.url == (IN_CHART_REDIS if redis == "in-chart" else "rediss://redis.example.com:6380/2")
    assert (config.redis.timeout, config.hybrid.max_batch) == (80, 40)
    assert config.expected_instances == 10  # autoscaling on: gateway.autoscaling.maxReplicas
    # The limits come from the control plane's xDS Service, as the pod's own node.
    service = find(docs, "Service", CONTROL_PLANE)
    xds_port = next(p["port"] for p in service["spec"]["ports"] if p["targetPort"] == "xds")
    assert config.policies.xds.address == f"{CONTROL_PLANE}.{NAMESPACE}.svc.cluster.local:{xds_port}"
    assert config.policies.xds.cluster == "ratelimit"
    assert "nodeId" not in yaml.safe_load(config_file.read_text())["policies"]["xds"]  # POD_NAME, per pod

    # The Deployment runs exactly that file and probes the metrics port.
    gateway = find(docs, "Deployment", GATEWAY)
    pod = gateway["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "ratelimit")
    assert [*sidecar["command"], *sidecar["args"]] == ["gatehouse", "ratelimit", "--config", "/etc/gatehouse/ratelimit.yaml", "--log-level", "debug"]
    assert gatehouse_subcommand_exists(sidecar["args"][0])
    volume, name = volume_file(pod, sidecar, sidecar["args"][2])
    assert (volume["configMap"]["name"], name) == (RATELIMIT, "ratelimit.yaml")
    assert {p["name"]: p["containerPort"] for p in sidecar["ports"]} == {"rl-metrics": 9105}
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "rl-metrics"}
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "rl-metrics"}
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"  # the xDS node id
    assert sidecar["securityContext"] == next(c for c in pod["containers"] if c["name"] == "envoy")["securityContext"]
    assert sidecar["resources"]["requests"]["cpu"]  # the HPA needs every container's request
    assert sidecar["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "15"]  # outlives Envoy's drain
    assert "checksum/ratelimit" in gateway["spec"]["template"]["metadata"]["annotations"]

    # The control plane sends Envoy to the sidecar of its own pod.
    cp_file = tmp_path / "control-plane.yaml"
    cp_file.write_text(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    cp_config = load_config(cp_file)
    assert cp_config.rate_limit is not None
    assert (cp_config.rate_limit.address, cp_config.rate_limit.timeout, cp_config.rate_limit.fail_closed) == ("127.0.0.1:8085", 150, True)

    # The gateway pods' policy keeps the sidecar's metrics port open, like ext_authz's.
    policy = find(docs, "NetworkPolicy", GATEWAY)["spec"]
    assert {p["port"] for p in policy["ingress"][0]["ports"]} == {8080, 9902, 9003, 9105}
    # ... and the control plane takes xDS from the gateway pods, where the sidecar runs.
    cp_policy = find(docs, "NetworkPolicy", CONTROL_PLANE)["spec"]["ingress"][0]
    assert cp_policy["from"][0]["podSelector"]["matchLabels"] == gateway["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], 10),  # autoscaling on: maxReplicas, so the local fallback never admits more than a limit
        (["--set", "gateway.autoscaling.maxReplicas=6"], 6),
        (["--set", "gateway.autoscaling.enabled=false,gateway.replicas=3"], 3),
        (["--set", "gateway.autoscaling.enabled=false,gateway.replicas=0"], 1),
        (["--set", "rateLimit.expectedInstances=4"], 4),
    ],
)
def test_ratelimit_expected_instances_follows_the_gateway(
    tools: KubeTools, helm_home: Path, tmp_path: Path, values: list[str], expected: int
) -> None:
    docs = objects(template(tools, helm_home, "--set", "rateLimit.enabled=true,redis.url=redis://redis.example.com:6379/0", *values))
    config_file = tmp_path / "ratelimit.yaml"
    config_file.write_text(find(docs, "ConfigMap", RATELIMIT)["data"]["ratelimit.yaml"])
    assert load_ratelimit_config(config_file).expected_instances == expected


@pytest.mark.parametrize("sink", ["kafka", "stdout"])
def test_rendered_telemetry_config_loads_and_envoy_streams_to_the_sidecar(
    tools: KubeTools, helm_home: Path, tmp_path: Path, sink: str
) -> None:
    values = [
        "--set", "telemetry.enabled=true,telemetry.port=8093,telemetry.metricsPort=9115,telemetry.logLevel=debug",
        "--set", "telemetry.buffer.maxEvents=2000,telemetry.buffer.batchSize=50",
        "--set", "telemetry.envoyBufferSize=0,telemetry.envoyFlushInterval=250ms,networkPolicy.enabled=true",
        "--set", "kafka.accessLogTopic=edge.access,kafka.auditTopic=edge.audit,kafka.requestTimeout=3s",
        *EXT_AUTHZ_ON,
    ]  # fmt: skip
    if sink == "kafka":
        values += WITH_KAFKA
    docs = objects(template(tools, helm_home, *values))

    # The sidecar's config, as `gatehouse telemetry` loads it.
    config_file = tmp_path / "telemetry.yaml"
    config_file.write_text(find(docs, "ConfigMap", TELEMETRY)["data"]["telemetry.yaml"])
    config = load_telemetry_config(config_file)
    assert config.listen == "127.0.0.1:8093"  # only the Envoy of the same pod streams to it
    assert config.metrics.listen == "0.0.0.0:9115"  # the kubelet probes the pod IP
    assert (config.buffer.max_events, config.buffer.batch_size) == (2000, 50)
    if sink == "kafka":
        kafka = config.sink.kafka
        assert kafka is not None and config.sink.stdout is None and config.sink.file is None
        assert kafka.bootstrap_servers == KAFKA_SERVERS  # the comma list, split and trimmed
        assert (kafka.access_log_topic, kafka.audit_topic, kafka.request_timeout) == ("edge.access", "edge.audit", 3_000)
        assert kafka.client_id == "gatehouse-telemetry"
    else:
        assert config.sink.stdout is not None and config.sink.kafka is None and config.sink.file is None
    assert "audit" not in yaml.safe_load(config_file.read_text())  # telemetry spools nothing itself

    # The Deployment runs exactly that file, probes the metrics port, outlives Envoy's drain.
    gateway = find(docs, "Deployment", GATEWAY)
    pod = gateway["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "telemetry")
    assert [*sidecar["command"], *sidecar["args"]] == ["gatehouse", "telemetry", "--config", "/etc/gatehouse/telemetry.yaml", "--log-level", "debug"]
    assert gatehouse_subcommand_exists(sidecar["args"][0])
    volume, name = volume_file(pod, sidecar, sidecar["args"][2])
    assert (volume["configMap"]["name"], name) == (TELEMETRY, "telemetry.yaml")
    assert {p["name"]: p["containerPort"] for p in sidecar["ports"]} == {"tm-metrics": 9115}
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "tm-metrics"}
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "tm-metrics"}
    assert sidecar["securityContext"] == next(c for c in pod["containers"] if c["name"] == "envoy")["securityContext"]
    assert sidecar["resources"]["requests"]["cpu"]  # the HPA needs every container's request
    assert sidecar["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "15"]
    assert {m["mountPath"] for m in sidecar["volumeMounts"]} == {"/etc/gatehouse", BREAKERS_DIR, "/tmp"}  # breakers: on by default
    assert "checksum/telemetry" in gateway["spec"]["template"]["metadata"]["annotations"]

    # The control plane sends every Envoy's access log to the sidecar of its own pod.
    cp_file = tmp_path / "control-plane.yaml"
    cp_file.write_text(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    cp_config = load_config(cp_file)
    assert cp_config.access_log is not None
    assert (cp_config.access_log.address, cp_config.access_log.buffer_size, cp_config.access_log.flush_interval) == ("127.0.0.1:8093", 0, 250)
    # Audit events (control plane and ext_authz) go to Kafka exactly when there is one.
    authz_file = tmp_path / "ext-authz.yaml"
    authz_file.write_text(find(docs, "ConfigMap", EXT_AUTHZ)["data"]["ext-authz.yaml"])
    authz_config = load_ext_authz_config(authz_file)
    for audit in (cp_config.audit, authz_config.audit):
        if sink == "kafka":
            assert audit is not None and audit.kafka is not None
            assert (audit.kafka.bootstrap_servers, audit.kafka.audit_topic, audit.kafka.request_timeout) == (KAFKA_SERVERS, "edge.audit", 3_000)
        else:
            assert audit is None

    # The gateway pods' policy keeps the sidecar's metrics port open, like the others'.
    policy = find(docs, "NetworkPolicy", GATEWAY)["spec"]
    assert {p["port"] for p in policy["ingress"][0]["ports"]} == {8080, 9902, 9003, 9115}


# --- route circuit breakers ---------------------------------------------------------------


def secret_value(secret: dict[str, Any], key: str) -> str:
    return base64.b64decode(secret["data"][key]).decode()


def test_breakers_are_wired_by_default_into_the_control_plane(tools: KubeTools, helm_home: Path, tmp_path: Path) -> None:
    docs = objects(template(tools, helm_home))

    # Two generated credentials, long and random, in the chart's Secret.
    secret = find(docs, "Secret", BREAKERS)
    assert set(secret["data"]) == {"tally-credential", "operator-credential"}
    tally, operator = secret_value(secret, "tally-credential"), secret_value(secret, "operator-credential")
    for value in (tally, operator):
        assert len(value) >= 32 and value.isascii() and value.isalnum(), value
    assert tally != operator
    # The board is the control plane's to create: no ConfigMap of its name is rendered (an
    # upgrade would wipe the breakers' states).
    assert not [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == BREAKERS]

    # The control plane's config, as it loads it: both credential files and the board.
    config_file = tmp_path / "control-plane.yaml"
    config_file.write_text(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    config = load_config(config_file)
    assert config.breakers.tally_credential_file == f"{BREAKERS_DIR}/tally-credential"
    assert config.breakers.operator_credential_file == f"{BREAKERS_DIR}/operator-credential"
    kubernetes = config.sources.kubernetes
    assert kubernetes is not None and kubernetes.breaker_board is not None
    assert kubernetes.breaker_board.config_map == BREAKERS and kubernetes.lease_namespace == NAMESPACE  # the board's namespace

    # Both files are the Secret's keys, on a read-only mount in the control-plane container.
    deployment = find(docs, "Deployment", CONTROL_PLANE)
    pod = deployment["spec"]["template"]["spec"]
    (cp,) = pod["containers"]
    volumes = []
    for path in (config.breakers.tally_credential_file, config.breakers.operator_credential_file):
        volume, name = volume_file(pod, cp, path)
        assert volume["secret"]["secretName"] == BREAKERS and {"key": name, "path": name} in volume["secret"]["items"]
        volumes.append(volume)
    assert volumes[0] is volumes[1]
    (mount,) = [m for m in cp["volumeMounts"] if m["name"] == volumes[0]["name"]]
    assert mount == {"name": volumes[0]["name"], "mountPath": BREAKERS_DIR, "readOnly": True}, mount
    # Without telemetry nothing counts the calls: no credential in the gateway pods at all.
    gateway = find(docs, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    assert not [v for v in gateway["volumes"] if "secret" in v]

    # One address per ready replica for telemetry: a headless Service on the admin port ...
    service = find(docs, "Service", CONTROL_PLANE_REPLICAS)["spec"]
    assert service["clusterIP"] == "None" and "publishNotReadyAddresses" not in service
    assert service["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["ports"] == [{"name": "http-admin", "port": 19000, "targetPort": "admin", "protocol": "TCP", "appProtocol": "http"}]
    # ... that the control plane's ServiceMonitor does not select (no replica scraped twice).
    monitored = objects(template(tools, helm_home, "--set", "monitoring.serviceMonitor.enabled=true"))
    selector = find(monitored, "ServiceMonitor", CONTROL_PLANE)["spec"]["selector"]["matchLabels"]
    assert selector.items() <= find(monitored, "Service", CONTROL_PLANE)["metadata"]["labels"].items()
    assert not selector.items() <= find(monitored, "Service", CONTROL_PLANE_REPLICAS)["metadata"]["labels"].items()

    # RBAC: create ConfigMaps (no name exists yet), and the rest on the board's name only;
    # bound to the control plane's ServiceAccount, also without status writing.
    role = find(docs, "Role", f"{CONTROL_PLANE}-breakers")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [BREAKERS], "verbs": ["get", "patch", "list", "watch"]},
    ]
    binding = find(docs, "RoleBinding", f"{CONTROL_PLANE}-breakers")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": NAMESPACE}]
    no_status = objects(template(tools, helm_home, "--set", "controlPlane.kubernetes.writeStatus=false"))
    assert [d["metadata"]["name"] for d in no_status if d["kind"] == "Role"] == [f"{CONTROL_PLANE}-breakers"]


def test_the_replicas_share_route_acks_through_one_configmap_granted_by_name(tools: KubeTools, helm_home: Path, tmp_path: Path) -> None:
    """Issue 25: with several replicas the Lease holder writes the status of Routes whose
    Envoys are connected to the others; they share their ACKs through a ConfigMap."""
    docs = objects(template(tools, helm_home, "--set", "controlPlane.replicas=2"))
    config_file = tmp_path / "control-plane.yaml"
    config_file.write_text(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    kubernetes = load_config(config_file).sources.kubernetes
    assert kubernetes is not None and kubernetes.route_acks is not None
    assert kubernetes.route_acks.config_map == ROUTE_ACKS and kubernetes.lease_namespace == NAMESPACE
    assert not [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == ROUTE_ACKS], "the control plane's, never rendered"
    role = find(docs, "Role", f"{CONTROL_PLANE}-route-acks")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [ROUTE_ACKS], "verbs": ["get", "patch", "list", "watch"]},
    ]
    binding = find(docs, "RoleBinding", f"{CONTROL_PLANE}-route-acks")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": CONTROL_PLANE, "namespace": NAMESPACE}]
    # No status writing: nothing to share, no grant.
    off = objects(template(tools, helm_home, "--set", "controlPlane.kubernetes.writeStatus=false"))
    assert not [d for d in off if d["metadata"]["name"].endswith("-route-acks")]
    assert "routeAcks" not in yaml.safe_load(find(off, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])["sources"]["kubernetes"]


def test_breaker_tallies_go_from_telemetry_to_every_replica_with_the_tally_credential_alone(
    tools: KubeTools, helm_home: Path, tmp_path: Path
) -> None:
    values = [*SIDECARS_ON, "--set", "networkPolicy.enabled=true,breakers.tallies.flushInterval=50ms,breakers.tallies.timeout=300ms"]
    docs = objects(template(tools, helm_home, *values))

    # Telemetry's config, as it loads it: every address of the headless Service, each flush.
    config_file = tmp_path / "telemetry.yaml"
    config_file.write_text(find(docs, "ConfigMap", TELEMETRY)["data"]["telemetry.yaml"])
    tallies = load_telemetry_config(config_file).breaker_tallies
    assert tallies is not None
    (port,) = find(docs, "Service", CONTROL_PLANE_REPLICAS)["spec"]["ports"]
    assert tallies.control_plane == [f"http://{CONTROL_PLANE_REPLICAS}.{NAMESPACE}.svc.cluster.local:{port['port']}"]
    assert tallies.every_address is True
    assert (tallies.credential_file, tallies.flush_interval, tallies.timeout) == (f"{BREAKERS_DIR}/tally-credential", 50, 300)

    # Only the tally key, read-only, in the telemetry container; in no other container.
    pod = find(docs, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    by_name = {c["name"]: c for c in pod["containers"]}
    assert set(by_name) == {"envoy", "ext-authz", "ratelimit", "telemetry"}
    volume, name = volume_file(pod, by_name["telemetry"], tallies.credential_file)
    assert volume["secret"] == {"secretName": BREAKERS, "defaultMode": 0o444, "items": [{"key": "tally-credential", "path": name}]}
    (mount,) = [m for m in by_name["telemetry"]["volumeMounts"] if m["name"] == volume["name"]]
    assert mount == {"name": volume["name"], "mountPath": BREAKERS_DIR, "readOnly": True}, mount
    assert [v["name"] for v in pod["volumes"] if v.get("secret", {}).get("secretName") == BREAKERS] == [volume["name"]]
    for other in ("envoy", "ext-authz", "ratelimit"):
        mounts = by_name[other]["volumeMounts"]
        assert volume["name"] not in {m["name"] for m in mounts} and not [m for m in mounts if m["mountPath"].startswith(BREAKERS_DIR)], other

    # What telemetry sends is what the control plane checks: the same key of the same Secret.
    cp_file = tmp_path / "control-plane.yaml"
    cp_file.write_text(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    cp_config = load_config(cp_file)
    assert cp_config.breakers.tally_credential_file is not None
    cp_pod = find(docs, "Deployment", CONTROL_PLANE)["spec"]["template"]["spec"]
    cp_volume, cp_name = volume_file(cp_pod, cp_pod["containers"][0], cp_config.breakers.tally_credential_file)
    assert cp_volume["secret"]["secretName"] == BREAKERS and {"key": "tally-credential", "path": cp_name} in cp_volume["secret"]["items"]

    # The control plane's admin port takes the gateway pods' tallies, next to their xDS; it
    # stays closed to them while no telemetry posts any.
    (gateway_rule,) = find(docs, "NetworkPolicy", CONTROL_PLANE)["spec"]["ingress"]  # adminFrom: nobody
    assert gateway_rule["from"][0]["podSelector"]["matchLabels"] == find(docs, "Deployment", GATEWAY)["spec"]["selector"]["matchLabels"]
    assert [p["port"] for p in gateway_rule["ports"]] == ["xds", "admin"]
    plain = objects(template(tools, helm_home, "--set", "networkPolicy.enabled=true"))
    (plain_rule,) = find(plain, "NetworkPolicy", CONTROL_PLANE)["spec"]["ingress"]
    assert [p["port"] for p in plain_rule["ports"]] == ["xds"]

    # The headless Service's name stays a DNS label with the longest prefix, and telemetry
    # dials exactly that name.
    long_name = "a" * 60
    docs = objects(template(tools, helm_home, "--set", f"telemetry.enabled=true,fullnameOverride={long_name}"))
    (service,) = [d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"]
    name = service["metadata"]["name"]
    assert len(name) <= 63 and name.endswith("-control-plane-replicas"), name
    raw = yaml.safe_load(find(docs, "ConfigMap", f"{long_name[:49]}-telemetry")["data"]["telemetry.yaml"])
    assert raw["breakerTallies"]["controlPlane"] == [f"http://{name}.{NAMESPACE}.svc.cluster.local:19000"]


def test_breakers_off_render_none_of_it_and_an_existing_secret_is_used(tools: KubeTools, helm_home: Path, tmp_path: Path) -> None:
    values = [*SIDECARS_ON, "--set", "networkPolicy.enabled=true"]
    docs = objects(template(tools, helm_home, *values, "--set", "breakers.enabled=false"))
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    breaker_objects = {("Secret", BREAKERS), ("Service", CONTROL_PLANE_REPLICAS), ("Role", f"{CONTROL_PLANE}-breakers"), ("RoleBinding", f"{CONTROL_PLANE}-breakers")}
    assert not breaker_objects & names
    raw = yaml.safe_load(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    assert "breakers" not in raw and "breakerBoard" not in raw["sources"]["kubernetes"]
    config_file = tmp_path / "control-plane.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    config = load_config(config_file)
    assert config.breakers.tally_credential_file is None and config.breakers.operator_credential_file is None
    assert "breakerTallies" not in yaml.safe_load(find(docs, "ConfigMap", TELEMETRY)["data"]["telemetry.yaml"])
    for name, container in containers(docs).items():
        assert not [m for m in container.get("volumeMounts", []) if m["mountPath"].startswith(BREAKERS_DIR)], name
    assert [p["port"] for p in find(docs, "NetworkPolicy", CONTROL_PLANE)["spec"]["ingress"][0]["ports"]] == ["xds"]

    # An existing Secret: none generated, both pods mount that one's keys.
    docs = objects(template(tools, helm_home, *values, "--set", "breakers.existingSecret=edge-breakers"))
    assert ("Secret", BREAKERS) not in {(d["kind"], d["metadata"]["name"]) for d in docs}
    config_file.write_text(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    config = load_config(config_file)
    cp_pod = find(docs, "Deployment", CONTROL_PLANE)["spec"]["template"]["spec"]
    gateway_pod = find(docs, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    telemetry = next(c for c in gateway_pod["containers"] if c["name"] == "telemetry")
    for pod, container, path in (
        (cp_pod, cp_pod["containers"][0], config.breakers.tally_credential_file),
        (cp_pod, cp_pod["containers"][0], config.breakers.operator_credential_file),
        (gateway_pod, telemetry, f"{BREAKERS_DIR}/tally-credential"),
    ):
        assert path is not None
        volume, name = volume_file(pod, container, path)
        assert volume["secret"]["secretName"] == "edge-breakers" and {"key": name, "path": name} in volume["secret"]["items"]


# --- the control plane's admin port (issue 24, item 7) -------------------------------------


def test_the_admin_port_is_closed_by_default_with_generated_credentials(tools: KubeTools, helm_home: Path, tmp_path: Path) -> None:
    docs = objects(template(tools, helm_home))

    # Two generated credentials, long and random, in the chart's Secret.
    secret = find(docs, "Secret", CONTROL_PLANE_ADMIN)
    assert set(secret["data"]) == {"operator-credential", "read-credential"}
    operator, reader = secret_value(secret, "operator-credential"), secret_value(secret, "read-credential")
    for value in (operator, reader):
        assert len(value) >= 32 and value.isascii() and value.isalnum(), value
    assert operator != reader and operator not in {secret_value(find(docs, "Secret", BREAKERS), k) for k in ("tally-credential", "operator-credential")}

    # The config, as the control plane loads it: both files, and reads open to nobody.
    config_file = tmp_path / "control-plane.yaml"
    config_file.write_text(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    admin = load_config(config_file).admin
    assert (admin.operator_credential_file, admin.read_credential_file) == (f"{ADMIN_DIR}/operator-credential", f"{ADMIN_DIR}/read-credential")
    assert admin.open_reads == "never"  # not even kubectl port-forward (a loopback peer) reads without it

    # Both files are the Secret's keys, on a read-only mount of the control-plane container alone.
    pod = find(docs, "Deployment", CONTROL_PLANE)["spec"]["template"]["spec"]
    (cp,) = pod["containers"]
    for path in (admin.operator_credential_file, admin.read_credential_file):
        volume, name = volume_file(pod, cp, path)
        assert volume["secret"] == {"secretName": CONTROL_PLANE_ADMIN, "defaultMode": 0o444, "items": [
            {"key": "operator-credential", "path": "operator-credential"}, {"key": "read-credential", "path": "read-credential"}]}
        assert name in ("operator-credential", "read-credential")
    (mount,) = [m for m in cp["volumeMounts"] if m["mountPath"] == ADMIN_DIR]
    assert mount["readOnly"] is True
    every = objects(template(tools, helm_home, *SIDECARS_ON))
    for name, container in containers(every).items():
        if name != f"{CONTROL_PLANE}/control-plane":
            assert not [m for m in container.get("volumeMounts", []) if m["mountPath"].startswith(ADMIN_DIR)], name

    # The operator may open reads to port-forwards (loopback) or to the pod network (private).
    for choice in ("loopback", "private"):
        chosen = objects(template(tools, helm_home, "--set", f"controlPlane.admin.openReads={choice}"))
        assert yaml.safe_load(find(chosen, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])["admin"]["openReads"] == choice
    refused = run_helm(tools, helm_home, "template", RELEASE, str(CHART), "--set", "controlPlane.admin.openReads=always", check=False)
    assert refused.returncode != 0 and "openReads" in refused.stderr, refused.stderr

    # An existing Secret: none generated, the control plane mounts that one's keys.
    docs = objects(template(tools, helm_home, "--set", "controlPlane.admin.existingSecret=edge-admin"))
    assert ("Secret", CONTROL_PLANE_ADMIN) not in {(d["kind"], d["metadata"]["name"]) for d in docs}
    pod = find(docs, "Deployment", CONTROL_PLANE)["spec"]["template"]["spec"]
    volume, _ = volume_file(pod, pod["containers"][0], f"{ADMIN_DIR}/read-credential")
    assert volume["secret"]["secretName"] == "edge-admin"
    assert load_config(config_file).admin.webhook_secret_file is None  # by default, no webhook signature syncs

    # A Git host's webhook secret: its Secret's key mounted, and the config names it.
    docs = objects(template(tools, helm_home, "--set", "controlPlane.admin.webhookSecret=git-hook"))
    config_file.write_text(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    webhook_file = load_config(config_file).admin.webhook_secret_file
    assert webhook_file is not None
    pod = find(docs, "Deployment", CONTROL_PLANE)["spec"]["template"]["spec"]
    volume, name = volume_file(pod, pod["containers"][0], webhook_file)
    assert volume["secret"] == {"secretName": "git-hook", "defaultMode": 0o444, "items": [{"key": "webhook-secret", "path": name}]}
    refused = run_helm(tools, helm_home, "template", RELEASE, str(CHART), "--set", "controlPlane.admin.webhookSecret=Not_A_Name", check=False)
    assert refused.returncode != 0 and "webhookSecret" in refused.stderr, refused.stderr


def test_rendered_audit_blocks_load_and_spool_on_emptydirs(tools: KubeTools, helm_home: Path, tmp_path: Path) -> None:
    values = [*EXT_AUTHZ_ON, *WITH_KAFKA, "--set", "audit.spool.maxBytes=1048576,audit.maxPending=500,audit.batchSize=20"]
    docs = objects(template(tools, helm_home, *values))
    pods = {
        "control-plane": (find(docs, "Deployment", CONTROL_PLANE)["spec"]["template"]["spec"], CONTROL_PLANE, "control-plane.yaml"),
        "ext-authz": (find(docs, "Deployment", GATEWAY)["spec"]["template"]["spec"], EXT_AUTHZ, "ext-authz.yaml"),
    }
    spool_volumes = []
    for component, (pod, config_map, key) in pods.items():
        config_file = tmp_path / key
        config_file.write_text(find(docs, "ConfigMap", config_map)["data"][key])
        config = (load_config if component == "control-plane" else load_ext_authz_config)(config_file)
        audit = config.audit
        assert audit is not None and audit.kafka is not None, component
        assert audit.kafka.bootstrap_servers == KAFKA_SERVERS
        assert (audit.kafka.audit_topic, audit.kafka.client_id) == ("gatehouse.audit", f"gatehouse-{component}")
        assert (audit.spool_max_bytes, audit.max_pending, audit.batch_size) == (1_048_576, 500, 20)
        # An absolute spoolDir (a relative one would land in the read-only ConfigMap
        # directory), on a writable emptyDir of exactly this container, twice maxBytes big.
        assert audit.spool_dir == AUDIT_SPOOL
        container = next(c for c in pod["containers"] if c["name"] == component)
        volume, _ = volume_file(pod, container, f"{audit.spool_dir}/audit.spool.jsonl")
        assert volume["emptyDir"] == {"sizeLimit": "2097152"}, volume
        mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
        assert not mount.get("readOnly")
        others = [c for c in pod["containers"] if c is not container]
        assert all(volume["name"] not in {m["name"] for m in c["volumeMounts"]} for c in others)  # one process per spool
        spool_volumes.append(volume)
    assert len(spool_volumes) == 2
    # The spool settings change the configs, so the pods roll.
    changed = objects(template(tools, helm_home, *values, "--set", "audit.batchSize=30"))
    for name in (CONTROL_PLANE, GATEWAY):
        before = find(docs, "Deployment", name)["spec"]["template"]["metadata"]["annotations"]
        after = find(changed, "Deployment", name)["spec"]["template"]["metadata"]["annotations"]
        assert before != after, name


def test_tracing_reaches_the_control_plane_only_when_enabled(tools: KubeTools, helm_home: Path, tmp_path: Path) -> None:
    config_file = tmp_path / "control-plane.yaml"
    config_file.write_text(find(objects(template(tools, helm_home)), "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    assert load_config(config_file).tracing is None  # off by default
    values = ["--set", "tracing.enabled=true,tracing.otlpAddress=otel-collector.observability:4317",
              "--set-json", "tracing.samplingPercent=12.5", "--set", "tracing.serviceName=edge,tracing.timeout=2s"]
    config_file.write_text(find(objects(template(tools, helm_home, *values)), "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    tracing = load_config(config_file).tracing
    assert tracing is not None
    assert (tracing.otlp_address, tracing.sampling_percent, tracing.service_name, tracing.timeout) == (
        "otel-collector.observability:4317", 12.5, "edge", 2_000)

    # The sidecars report their spans to the same collector, each as itself.
    docs = objects(template(tools, helm_home, *values, *SIDECARS_ON))
    for name, key, load, service in ((EXT_AUTHZ, "ext-authz.yaml", load_ext_authz_config, "gatehouse-ext-authz"),
                                     (RATELIMIT, "ratelimit.yaml", load_ratelimit_config, "gatehouse-ratelimit")):
        sidecar_file = tmp_path / key
        sidecar_file.write_text(find(docs, "ConfigMap", name)["data"][key])
        export = load(sidecar_file).tracing
        assert export is not None, key
        assert (export.otlp_address, export.service_name, export.timeout) == ("otel-collector.observability:4317", service, 2_000)
    docs = objects(template(tools, helm_home, *SIDECARS_ON))
    for name, key in ((EXT_AUTHZ, "ext-authz.yaml"), (RATELIMIT, "ratelimit.yaml")):
        assert "tracing" not in yaml.safe_load(find(docs, "ConfigMap", name)["data"][key])  # off by default


def test_gateway_limits_tls_and_load_shedding_reach_the_control_plane_and_envoy(
    tools: KubeTools, helm_home: Path, tmp_path: Path
) -> None:
    values = [
        *SIDECARS_ON,  # sidecars too: the key must reach the envoy container and no other
        "--set", "gateway.maxRequestHeadersKb=16,gateway.maxRequestBodyBytes=1048576,gateway.tls.secretName=gw-cert",
        "--set", "gateway.routeStats=false",
        "--set-json", 'gateway.loadShedding={"latencyTarget":"200ms","maxConcurrency":64}',
    ]  # fmt: skip
    docs = objects(template(tools, helm_home, *values))

    # The control plane's config, as it loads it.
    config_file = tmp_path / "control-plane.yaml"
    config_file.write_text(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    config = load_config(config_file)
    gateway = config.gateway
    assert (gateway.max_request_headers_kb, gateway.max_request_body_bytes) == (16, 1_048_576)
    assert gateway.route_stats is False
    assert gateway.tls is not None and gateway.load_shedding is not None
    assert (gateway.tls.cert_file, gateway.tls.key_file) == (f"{GATEWAY_TLS_DIR}/tls.crt", f"{GATEWAY_TLS_DIR}/tls.key")
    assert (gateway.load_shedding.latency_target, gateway.load_shedding.max_concurrency) == (200, 64)

    # Those file names are the Secret's two keys, on a read-only mount of the whole
    # directory (no subPath: subPath mounts never see a rotated Secret) in the envoy
    # container, and in no other container of the pod.
    deployment = find(docs, "Deployment", GATEWAY)
    pod = deployment["spec"]["template"]["spec"]
    envoy = next(c for c in pod["containers"] if c["name"] == "envoy")
    volumes = []
    for path, key in ((gateway.tls.cert_file, "tls.crt"), (gateway.tls.key_file, "tls.key")):
        volume, name = volume_file(pod, envoy, path)
        assert volume["secret"]["secretName"] == "gw-cert"
        assert {"key": key, "path": name} in volume["secret"]["items"]
        volumes.append(volume)
    assert volumes[0] is volumes[1]  # one volume: the pair rotates together
    (mount,) = [m for m in envoy["volumeMounts"] if m["name"] == volumes[0]["name"]]
    assert mount == {"name": volumes[0]["name"], "mountPath": GATEWAY_TLS_DIR, "readOnly": True}, mount
    others = [c for c in pod["containers"] if c is not envoy]
    assert {c["name"] for c in others} == {"ext-authz", "ratelimit", "telemetry"}
    assert all(volumes[0]["name"] not in {m["name"] for m in c["volumeMounts"]} for c in others)
    # Envoy is told to watch the certificate's directory (control_plane/translator/tls.py):
    # exactly the mount, where the kubelet swaps the ..data link on rotation.
    assert PurePosixPath(gateway.tls.cert_file).parent == PurePosixPath(mount["mountPath"])
    assert PurePosixPath(gateway.tls.key_file).parent == PurePosixPath(mount["mountPath"])
    # The Service tells load balancers and meshes the port now speaks HTTPS.
    [port] = find(docs, "Service", GATEWAY)["spec"]["ports"]
    assert port["appProtocol"] == "https"

    # The defaults: the control plane's own limits, spelled out; no TLS, no shedding, no
    # Secret volume.
    docs = objects(template(tools, helm_home))
    raw = yaml.safe_load(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    assert raw["gateway"] == {
        "listenerAddress": "0.0.0.0", "listenerPort": 8080, "maxRequestHeadersKb": 60, "maxRequestBodyBytes": 10_485_760,
        "routeStats": True,
    }
    config_file.write_text(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    config = load_config(config_file)
    assert config.gateway.tls is None and config.gateway.load_shedding is None
    pod = find(docs, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    (envoy,) = pod["containers"]
    assert [m["mountPath"] for m in envoy["volumeMounts"]] == ["/etc/envoy"]
    assert [v["name"] for v in pod["volumes"]] == ["bootstrap"]
    [port] = find(docs, "Service", GATEWAY)["spec"]["ports"]
    assert port["appProtocol"] == "http"


def memory_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity in bytes (the binary suffixes the chart uses)."""
    for suffix, factor in (("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30)):
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    return int(quantity)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], OverloadSettings(max_connections=50_000, max_heap_bytes=429_496_729)),
        # Past 2^31, and through --set's integers as well as values.yaml's: never 2.147483648e+09.
        (["--set", "gateway.envoy.overload.maxConnections=1000,gateway.envoy.overload.maxHeapBytes=2147483648"],
         OverloadSettings(max_connections=1000, max_heap_bytes=2_147_483_648)),
        (["--set-json", 'gateway.envoy.overload={"maxConnections":7,"maxHeapBytes":3000000000}'],
         OverloadSettings(max_connections=7, max_heap_bytes=3_000_000_000)),
        (["--set", "gateway.envoy.overload.enabled=false"], None),
    ],
)  # fmt: skip
def test_rendered_bootstrap_has_the_overload_manager_gatehouse_bootstrap_renders(
    tools: KubeTools, helm_home: Path, tmp_path: Path, values: list[str], expected: OverloadSettings | None
) -> None:
    docs = objects(template(tools, helm_home, *values))
    bootstrap_file = tmp_path / "bootstrap.yaml"
    bootstrap_file.write_text(find(docs, "ConfigMap", GATEWAY)["data"]["bootstrap.yaml"])
    bootstrap = yaml.safe_load(bootstrap_file.read_text())
    if expected is None:
        assert "overload_manager" not in bootstrap
    else:
        assert bootstrap["overload_manager"] == overload_manager(expected)
        # Integers as integers (429496729.0 would compare equal above).
        rendered = json.dumps(bootstrap["overload_manager"], sort_keys=True)
        assert rendered == json.dumps(overload_manager(expected), sort_keys=True)

    # Envoy accepts it, with the Deployment's own command line.
    pod = find(docs, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    envoy = next(c for c in pod["containers"] if c["name"] == "envoy")
    argv = envoy_argv(envoy, bootstrap_file, "gh-gatehouse-gateway-7d9f8-abcde")
    result = subprocess.run([*argv, "--mode", "validate"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr

    if not values:
        # The default heap budget leaves room under the default memory limit (80 %), so
        # Envoy sheds load before the kernel kills it.
        limit = memory_bytes(envoy["resources"]["limits"]["memory"])
        assert expected is not None and expected.max_heap_bytes == int(limit * 0.8)
    # A different overload setting is a different bootstrap: the gateway pods roll.
    default = objects(template(tools, helm_home))
    annotations = find(docs, "Deployment", GATEWAY)["spec"]["template"]["metadata"]["annotations"]
    default_annotations = find(default, "Deployment", GATEWAY)["spec"]["template"]["metadata"]["annotations"]
    assert (annotations["checksum/bootstrap"] == default_annotations["checksum/bootstrap"]) == (not values)


# --- the real API server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(tools: KubeTools, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    server = KubeAPIServer.start(tmp_path_factory.mktemp("kube"), tools=tools)
    try:
        # The CRD for real first, so Route objects validate against it.
        server.kubectl("apply", "--server-side", "-f", str(CRD))
        server.wait_established("routes.gatehouse.io")
        for namespace in (NAMESPACE, "shop", "monitoring"):
            server.kubectl("create", "namespace", namespace)
        # Pod Security "restricted": dry runs of workloads print a warning on any violation.
        server.kubectl(
            "label", "namespace", NAMESPACE,
            "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted",
        )  # fmt: skip
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("variant", [*VARIANTS, "sidecars"])
def test_server_side_dry_run_accepts_the_rendered_chart(api: KubeAPIServer, tools: KubeTools, helm_home: Path, variant: str) -> None:
    values = SIDECARS_ON if variant == "sidecars" else VARIANTS[variant]
    manifest = template(tools, helm_home, *values)
    kinds = sorted({f"{d['kind']}" for d in objects(manifest)})
    result = api.kubectl("apply", "--dry-run=server", "-f", "-", input=manifest)
    created = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(created) == len(objects(manifest)), result.stdout
    assert "Warning" not in result.stderr, result.stderr  # e.g. "would violate PodSecurity"
    expected = {"ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"}
    assert expected <= set(kinds), kinds
    if variant == "all-optional-parts":
        assert "NetworkPolicy" in kinds and "HorizontalPodAutoscaler" not in kinds
    else:
        assert "HorizontalPodAutoscaler" in kinds


def test_pod_security_warnings_would_be_seen(api: KubeAPIServer, tools: KubeTools, helm_home: Path) -> None:
    """The check above is live: a gateway that keeps its capabilities draws the warning."""
    docs = objects(template(tools, helm_home))
    deployment = find(docs, "Deployment", GATEWAY)
    del deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]
    result = api.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(deployment))
    assert "would violate PodSecurity" in result.stderr and "capabilities" in result.stderr, result.stderr


def test_examples_are_accepted_by_the_api_server_and_by_gatehouse_validate(api: KubeAPIServer) -> None:
    result = subprocess.run([sys.executable, "-m", "gatehouse", "validate", str(EXAMPLE_ROUTE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    for path in (EXAMPLE_BACKEND, EXAMPLE_ROUTE):
        api.kubectl("apply", "--dry-run=server", "-f", str(path))


def can_i(api: KubeAPIServer, user: str, verb: str, resource: str, namespace: str | None = None, name: str = "") -> bool:
    resource, _, subresource = resource.partition("/")
    target = f"{resource}/{name}" if name else resource
    args = ["auth", "can-i", verb, target, f"--as={user}", *(["-n", namespace] if namespace else ["--all-namespaces"])]
    if subresource:
        args.append(f"--subresource={subresource}")
    result = api.kubectl(*args, check=False)
    return result.stdout.strip() == "yes"


def service_account_kubeconfig(api: KubeAPIServer, directory: Path, service_account: str, namespace: str = NAMESPACE) -> Path:
    token = api.kubectl("create", "token", service_account, "-n", namespace, "--duration=1h").stdout.strip()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": api.url, "certificate-authority": str(api.ca_file)}}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "test", "user": service_account}}],
        "current-context": "sa",
    }
    path = directory / "service-account.kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def route_conditions(api: KubeAPIServer) -> dict[str, dict[str, Any]]:
    out = api.kubectl("get", "route", "orders-by-id", "-n", "shop", "-o", "json").stdout
    return {c["type"]: c for c in (json.loads(out).get("status") or {}).get("conditions", [])}


def loopback(text: str) -> str:
    """The chart binds 0.0.0.0 (the pod IP); on this shared machine, bind loopback."""
    return text.replace("0.0.0.0", "127.0.0.1")


def test_helm_install_then_control_plane_and_envoy_run_with_what_the_chart_installed(
    api: KubeAPIServer, tmp_path: Path, test_network: TestNetwork
) -> None:
    envoy_bin = envoy_binary()
    ports = {name: free_port() for name in ("xds", "cp_admin", "http", "envoy_admin", "health")}
    install = api.helm(
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--set", "networkPolicy.enabled=true,redis.enabled=true",
        # examples/k8s/backend.yaml: a selector-less Service whose slice the example writes.
        "--set-json", 'controlPlane.kubernetes.endpointSlices.trustedManagers=["endpointslice-controller.k8s.io","examples.gatehouse.io"]',
        "--set", f"controlPlane.xdsPort={ports['xds']},controlPlane.adminPort={ports['cp_admin']}",
        "--set", f"gateway.port={ports['http']},gateway.envoy.adminPort={ports['envoy_admin']}",
        "--set", f"gateway.envoy.healthPort={ports['health']},gateway.envoy.concurrency=1,gateway.drainSeconds={DRAIN_SECONDS}",
    )  # fmt: skip
    assert "kubectl apply -f examples/k8s/route.yaml" in install.stdout and "kubectl get gr" in install.stdout, install.stdout
    processes: list[ManagedProcess] = []
    upstream: EchoUpstream | None = None
    control_plane: ControlPlaneProcess | None = None
    try:
        # RBAC: exactly what the control plane needs, nothing more.
        sa = f"system:serviceaccount:{NAMESPACE}:{CONTROL_PLANE}"
        for verb, resource, namespace, name in [
            ("list", "routes.gatehouse.io", None, ""),
            ("watch", "routes.gatehouse.io", "shop", ""),
            ("patch", "routes.gatehouse.io/status", "shop", ""),
            ("watch", "services", None, ""),
            ("list", "endpointslices.discovery.k8s.io", None, ""),
            ("create", "leases.coordination.k8s.io", NAMESPACE, ""),
            ("update", "leases.coordination.k8s.io", NAMESPACE, "gatehouse-control-plane"),
            ("list", "referencegrants.gateway.networking.k8s.io", None, ""),
            ("watch", "referencegrants.gateway.networking.k8s.io", None, ""),
        ]:
            assert can_i(api, sa, verb, resource, namespace, name), f"{sa} cannot {verb} {resource} {name}"
        for verb, resource, namespace, name in [
            ("create", "routes.gatehouse.io", "shop", ""),
            ("update", "routes.gatehouse.io", "shop", ""),
            ("patch", "routes.gatehouse.io", "shop", ""),
            ("delete", "routes.gatehouse.io", "shop", ""),
            ("get", "secrets", NAMESPACE, ""),
            ("list", "pods", None, ""),
            ("get", "configmaps", NAMESPACE, ""),
            ("update", "services", "shop", ""),
            ("create", "leases.coordination.k8s.io", "shop", ""),
            ("update", "leases.coordination.k8s.io", NAMESPACE, "someone-elses-lease"),
            ("delete", "leases.coordination.k8s.io", NAMESPACE, "gatehouse-control-plane"),
            ("get", "referencegrants.gateway.networking.k8s.io", "shop", "some-grant"),
            ("create", "referencegrants.gateway.networking.k8s.io", "shop", ""),
            ("update", "referencegrants.gateway.networking.k8s.io", "shop", ""),
            ("delete", "referencegrants.gateway.networking.k8s.io", "shop", ""),
        ]:
            assert not can_i(api, sa, verb, resource, namespace, name), f"{sa} may {verb} {resource} {name}"
        # The route ACKs' ConfigMap (the replicas' Envoys, for the status): that name alone.
        for verb, name in [("create", ""), ("get", ROUTE_ACKS), ("patch", ROUTE_ACKS), ("list", ROUTE_ACKS), ("watch", ROUTE_ACKS)]:
            assert can_i(api, sa, verb, "configmaps", NAMESPACE, name), f"{sa} cannot {verb} configmaps {name}"
        for verb, namespace, name in [
            ("list", NAMESPACE, ""), ("patch", NAMESPACE, "someone-elses"), ("update", NAMESPACE, ROUTE_ACKS),
            ("delete", NAMESPACE, ROUTE_ACKS), ("create", "shop", ""), ("get", "shop", ROUTE_ACKS),
        ]:
            assert not can_i(api, sa, verb, "configmaps", namespace, name), f"{sa} may {verb} configmaps {name} in {namespace}"
        gateway_sa = f"system:serviceaccount:{NAMESPACE}:{GATEWAY}"
        assert not can_i(api, gateway_sa, "list", "routes.gatehouse.io")
        assert not can_i(api, gateway_sa, "get", "configmaps", NAMESPACE)

        # The backend of the example Route: its Service, and an EndpointSlice pointing at an
        # echo upstream. The API server refuses loopback addresses in EndpointSlices, so the
        # upstream listens on a 10.x address inside the session's test namespace.
        host = test_network.address()
        upstream = EchoUpstream.start("order-service", log_dir=tmp_path, host=host, network=test_network)
        backend = objects(EXAMPLE_BACKEND.read_text())
        endpoint_slice = find(backend, "EndpointSlice", "order-service-manual")
        endpoint_slice["ports"][0]["port"] = upstream.port
        endpoint_slice["endpoints"] = [{**endpoint_slice["endpoints"][0], "addresses": [host]}]
        api.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(backend))

        # Envoy: the installed bootstrap, the installed Deployment's arguments.
        bootstrap = yaml.safe_load(
            loopback(json.loads(api.kubectl("get", "configmap", GATEWAY, "-n", NAMESPACE, "-o", "json").stdout)["data"]["bootstrap.yaml"])
        )
        xds = bootstrap["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
        xds["endpoint"]["address"]["socket_address"]["address"] = "127.0.0.1"  # the Service's DNS name, here
        bootstrap_path = tmp_path / "bootstrap.yaml"
        bootstrap_path.write_text(yaml.safe_dump(bootstrap))
        deployment = json.loads(api.kubectl("get", "deployment", GATEWAY, "-n", NAMESPACE, "-o", "json").stdout)
        pod_spec = deployment["spec"]["template"]["spec"]
        envoy = next(c for c in pod_spec["containers"] if c["name"] == "envoy")
        pod_name = f"{GATEWAY}-{uuid.uuid4().hex[:5]}"
        argv = envoy_argv(envoy, bootstrap_path, pod_name)
        argv[0] = envoy_bin
        processes.append(ManagedProcess.start(argv, name="gateway-envoy", log_dir=tmp_path))
        health = ports["health"]
        # No control plane yet: Envoy runs but stays initializing, so the readiness probe
        # fails (listeners, the health listener included, open only once initialized).
        admin = ports["envoy_admin"]
        wait_for(lambda: probe(admin, "/ready") == 503, 30, "Envoy's admin API answering /ready 503")
        time.sleep(2)
        assert probe(admin, "/ready") == 503 and probe(health, "/ready") != 200 and probe(ports["http"], "/") == 0

        # The control plane: the installed ConfigMap, with the ServiceAccount's token.
        installed = json.loads(api.kubectl("get", "configmap", CONTROL_PLANE, "-n", NAMESPACE, "-o", "json").stdout)
        config = yaml.safe_load(loopback(installed["data"]["control-plane.yaml"]))
        assert "kubeconfig" not in config["sources"]["kubernetes"]
        config["sources"]["kubernetes"]["kubeconfig"] = str(service_account_kubeconfig(api, tmp_path, CONTROL_PLANE))
        localize_credentials(api, config, CONTROL_PLANE, NAMESPACE, tmp_path / "cp-volumes")
        config_path = tmp_path / "control-plane.yaml"
        config_path.write_text(yaml.safe_dump(config))
        control_plane = ControlPlaneProcess(config_path, log_dir=tmp_path, xds_port=ports["xds"], admin_port=ports["cp_admin"])
        control_plane.start(timeout=60)  # /readyz: every watch listed with the ServiceAccount's rights
        wait_for(lambda: probe(health, "/ready") == 200, 30, "Envoy ready once the control plane answers")

        # Only /ready and /stats/prometheus of the admin API are on the health port.
        assert get(health, "/stats/prometheus").status == 200
        assert get(health, "/quitquitquit", method="POST").status == 404
        assert get(health, "/config_dump").status == 404
        assert get(health, "/ready", method="POST").status == 404

        # The example Route, applied as a user would: served, Accepted and Programmed.
        api.kubectl("apply", "-f", str(EXAMPLE_ROUTE))
        wait_for(lambda: probe(ports["http"], "/api/v2/orders/42") == 200, 15, "Envoy serving the example Route")
        reply = get(ports["http"], "/api/v2/orders/42")
        assert (reply.upstream, reply.headers.get("x-route")) == ("order-service", "orders-by-id")
        wait_for(lambda: route_conditions(api).get("Programmed", {}).get("status") == "True", 15, "Programmed=True (status written)", interval=0.3)
        assert route_conditions(api)["Accepted"]["status"] == "True"
        lease = json.loads(api.kubectl("get", "lease", "gatehouse-control-plane", "-n", NAMESPACE, "-o", "json").stdout)
        assert lease["spec"]["holderIdentity"], lease
        # Its Envoys' ACK, shared for the other replicas: the control plane created and
        # patched the ConfigMap, and watches it, with the ServiceAccount's rights alone.
        def shared_ack() -> bool:
            found = api.kubectl("get", "configmap", ROUTE_ACKS, "-n", NAMESPACE, "-o", "json", check=False)
            if found.returncode != 0:
                return False
            data = json.loads(found.stdout).get("data") or {}
            return any(json.loads(v)["routes"].get("shop/orders-by-id", ["", "x"])[1] == "" for v in data.values())

        wait_for(shared_ack, 10, "the route's ACK in the shared ConfigMap", interval=0.3)
        acks = next(s for s in control_plane.status()["sources"] if s["name"] == "kubernetes")["route_acks"]
        assert acks["synced"] is True and acks["write_errors"] == 0, acks
        # The Envoy identifies itself by its pod name, in the node group "gateway".
        assert pod_name in json.dumps(control_plane.status())

        # The admin port as installed: reads and writes need the installed credentials
        # (control_plane.status() above read with the read credential, as the harness does).
        admin_url = f"http://127.0.0.1:{ports['cp_admin']}"
        read_file, operator_file = config["admin"]["readCredentialFile"], config["admin"]["operatorCredentialFile"]
        assert admin_call(admin_url, "/config") == 401 and admin_call(admin_url, f"/status/node?node={pod_name}&diff=1") == 401
        assert admin_call(admin_url, "/config", Path(read_file).read_text()) == 200
        assert admin_call(admin_url, "/sync", method="POST") == 401
        assert admin_call(admin_url, "/sync", Path(read_file).read_text(), method="POST") == 401
        assert admin_call(admin_url, "/sync", Path(operator_file).read_text(), method="POST") == 200

        # The breakers' credentials as installed: the tally one is telemetry's, the operator
        # one moves breakers (the example Route has none, so this move is a 404, not a 401).
        tally_file, operator_file = config["breakers"]["tallyCredentialFile"], config["breakers"]["operatorCredentialFile"]
        assert post_tallies(ports["cp_admin"], Path(tally_file).read_text()) == 200
        assert post_tallies(ports["cp_admin"], Path(operator_file).read_text()) == 401
        move = [sys.executable, "-m", "gatehouse", "breaker", "open", "shop/orders-by-id", "--admin", f"http://127.0.0.1:{ports['cp_admin']}"]
        refused = subprocess.run([*move, "--credential-file", tally_file], capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and "refused the operator credential" in refused.stderr, refused.stderr
        no_breaker = subprocess.run([*move, "--credential-file", operator_file], capture_output=True, text=True, timeout=60)
        assert no_breaker.returncode == 2 and "with a breaker" in no_breaker.stderr, no_breaker.stderr

        # preStop (the Deployment's own hook): readiness fails at once, listeners drain
        # gracefully (still answering) for drainSeconds, then close; SIGTERM would follow.
        pre_stop = envoy["lifecycle"]["preStop"]["exec"]["command"]
        assert pre_stop[0] == "python3"
        hook = subprocess.Popen([sys.executable, *pre_stop[1:]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_for(lambda: probe(health, "/ready") == 503, 2, "Envoy /ready 503 after the preStop hook started")
            assert probe(ports["http"], "/api/v2/orders/42") == 200  # draining, not refusing
            output, _ = hook.communicate(timeout=DRAIN_SECONDS + 10)
        finally:
            if hook.poll() is None:
                hook.kill()
        assert hook.returncode == 0 and "preStop" not in output, output  # every admin call answered
        wait_for(lambda: probe(ports["http"], "/api/v2/orders/42") == 0, 5, "listeners closed after the drain")
        assert processes[0].alive()  # Envoy itself exits on the SIGTERM that follows preStop
    finally:
        for process in processes:
            process.stop()
        if control_plane is not None:
            control_plane.stop()
        if upstream is not None:
            upstream.stop()

    api.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "60s")
    assert api.kubectl("get", "clusterrole", f"{NAMESPACE}-{RELEASE}-gatehouse-control-plane", check=False).returncode != 0
    # CRDs in crds/ stay (Helm never deletes them): Routes and ReferenceGrants survive an uninstall.
    api.kubectl("get", "crd", "routes.gatehouse.io")
    api.kubectl("get", "crd", "referencegrants.gateway.networking.k8s.io")


def admin_call(url: str, path: str, credential: str | None = None, *, method: str = "GET") -> int:
    headers = {"Authorization": f"Bearer {credential.strip()}"} if credential else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url + path, method=method, headers=headers), timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def post_tallies(port: int, credential: str) -> int:
    """POST an empty tally batch, as telemetry does, with this bearer credential: the status."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/breakers/tallies",
        data=json.dumps({"rulesVersion": "", "tallies": []}).encode(),
        headers={"Authorization": f"Bearer {credential.strip()}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def probe(port: int, path: str, host: str = "127.0.0.1") -> int:
    client = Client(port, host=host, timeout=2.0)
    try:
        return client.request(path).status
    except OSError:
        return 0
    finally:
        client.close()



# --- ext_authz, installed and run ---------------------------------------------------------

AUTHZ_RELEASE = "authz"
AUTHZ_NAMESPACE = "gatehouse-authz"


def materialize_mounts(
    api: KubeAPIServer, pod: dict[str, Any], container: dict[str, Any], root: Path, namespace: str = AUTHZ_NAMESPACE
) -> dict[str, Path]:
    """What the kubelet would mount into `container`: its ConfigMap, Secret and emptyDir
    volumes (those read back from the API server), written under `root`. Returns
    mountPath → local directory."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    mapping = {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        directory = root / mount["name"]
        directory.mkdir(parents=True)
        if "configMap" in volume:
            obj = json.loads(api.kubectl("get", "configmap", volume["configMap"]["name"], "-n", namespace, "-o", "json").stdout)
            for key, value in obj["data"].items():
                (directory / key).write_text(value)
        elif "secret" in volume:
            obj = json.loads(api.kubectl("get", "secret", volume["secret"]["secretName"], "-n", namespace, "-o", "json").stdout)
            for item in volume["secret"]["items"]:
                (directory / item["path"]).write_bytes(base64.b64decode(obj["data"][item["key"]]))
        mapping[mount["mountPath"]] = directory
    return mapping


def local_path(mapping: dict[str, Path], path: str) -> str:
    for mount_path, directory in sorted(mapping.items(), key=lambda item: -len(item[0])):  # the deepest mount
        if path.startswith(mount_path + "/"):
            return str(directory / path[len(mount_path) + 1 :])
    raise AssertionError(f"{path} is on no mounted volume")


def localize_credentials(api: KubeAPIServer, config: dict[str, Any], control_plane: str, namespace: str, root: Path) -> None:
    """Point an installed control-plane config's credential files (the breakers' and the
    admin port's) at local copies of the installed Secrets' keys, laid out as the installed
    Deployment mounts them."""
    pod = json.loads(api.kubectl("get", "deployment", control_plane, "-n", namespace, "-o", "json").stdout)["spec"]["template"]["spec"]
    mounts = materialize_mounts(api, pod, pod["containers"][0], root, namespace=namespace)
    for block, key in [("breakers", "tallyCredentialFile"), ("breakers", "operatorCredentialFile"),
                       ("admin", "operatorCredentialFile"), ("admin", "readCredentialFile")]:
        config[block][key] = local_path(mounts, config[block][key])


def http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def check(stub: Any, authorization: str | None) -> Any:
    headers = {"x-request-id": "chart-test"}
    if authorization is not None:
        headers["authorization"] = authorization
    http = attribute_context_pb2.AttributeContext.HttpRequest(method="GET", path="/orders", headers=headers)
    request = external_auth_pb2.CheckRequest(
        attributes=attribute_context_pb2.AttributeContext(request=attribute_context_pb2.AttributeContext.Request(http=http))
    )
    return stub.Check(request, timeout=10)


def admin_secret(api: KubeAPIServer) -> str:
    name = f"{AUTHZ_RELEASE}-gatehouse-ext-authz-admin"
    secret = json.loads(api.kubectl("get", "secret", name, "-n", AUTHZ_NAMESPACE, "-o", "json").stdout)
    return base64.b64decode(secret["data"]["credential"]).decode()


@pytest.mark.redis
def test_helm_install_with_ext_authz_then_the_sidecar_runs_with_what_the_chart_installed(
    api: KubeAPIServer, tmp_path: Path
) -> None:
    issuer = TestIssuer(issuer="https://auth.example.com/", audience="api")
    jwks = JwksServer(issuer).start()
    redis = RedisServer.start(log_dir=tmp_path / "redis")
    sidecar_process: ManagedProcess | None = None
    try:
        ports = {name: free_port() for name in ("grpc", "metrics", "admin")}
        issuers = [{"issuer": issuer.issuer, "jwksUrl": jwks.url, "audiences": ["api"], "leeway": "10s"}]
        install = api.helm(
            "install", AUTHZ_RELEASE, str(CHART), "--namespace", AUTHZ_NAMESPACE, "--create-namespace",
            "--set", f"extAuthz.enabled=true,extAuthz.admin.enabled=true,redis.url={redis.url}",
            # The gRPC sidecar, checked over gRPC here (the HTTP one needs a control plane:
            # the gateway-wide install test runs it).
            "--set", "extAuthz.protocol=grpc",
            "--set", f"extAuthz.port={ports['grpc']},extAuthz.metricsPort={ports['metrics']},extAuthz.admin.port={ports['admin']}",
            "--set-json", f"extAuthz.issuers={json.dumps(issuers)}",
        )  # fmt: skip
        assert "Authorization: Bearer <JWT>" in install.stdout and issuer.issuer in install.stdout, install.stdout
        assert f"gatehouse revoke --admin 127.0.0.1:{ports['admin']}" in install.stdout, install.stdout

        # The generated credential is kept by upgrades (lookup), whatever else changes.
        credential = admin_secret(api)
        assert len(credential) == 48
        api.helm("upgrade", AUTHZ_RELEASE, str(CHART), "--namespace", AUTHZ_NAMESPACE, "--reuse-values", "--set", "extAuthz.logLevel=debug")
        assert admin_secret(api) == credential

        # The sidecar as the kubelet would start it: the installed Deployment's command and
        # arguments, its ConfigMap and Secret volumes at (local copies of) their mount paths.
        deployment = json.loads(api.kubectl("get", "deployment", f"{AUTHZ_RELEASE}-gatehouse-gateway", "-n", AUTHZ_NAMESPACE, "-o", "json").stdout)
        pod = deployment["spec"]["template"]["spec"]
        sidecar = next(c for c in pod["containers"] if c["name"] == "ext-authz")
        mounts = materialize_mounts(api, pod, sidecar, tmp_path / "volumes")
        args = list(sidecar["args"])
        assert args[:2] == ["ext-authz", "--config"] and args[args.index("--log-level") + 1] == "debug"
        config_path = Path(local_path(mounts, args[2]))
        config = yaml.safe_load(loopback(config_path.read_text()))  # 0.0.0.0 (pod IP) → loopback here
        config["admin"]["credentialFile"] = local_path(mounts, config["admin"]["credentialFile"])
        config_path.write_text(yaml.safe_dump(config))
        args[2] = str(config_path)
        assert sidecar["command"] == ["gatehouse"]
        sidecar_process = ManagedProcess.start([sys.executable, "-m", "gatehouse", *args], name="ext-authz", log_dir=tmp_path)

        # The probes of the Deployment, against the port they name.
        probe_port = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
        readiness, liveness = sidecar["readinessProbe"]["httpGet"], sidecar["livenessProbe"]["httpGet"]
        wait_for(lambda: http_status(probe_port[readiness["port"]], readiness["path"]) == 200, 30, "ext-authz /readyz 200")
        assert http_status(probe_port[liveness["port"]], liveness["path"]) == 200
        assert http_status(ports["metrics"], "/metrics") == 200

        # Decisions with the configured issuer, on the localhost gRPC port Envoy is given.
        control_plane = yaml.safe_load(
            json.loads(api.kubectl("get", "configmap", f"{AUTHZ_RELEASE}-gatehouse-control-plane", "-n", AUTHZ_NAMESPACE, "-o", "json").stdout)[
                "data"
            ]["control-plane.yaml"]
        )
        address = control_plane["extAuthz"]["address"]
        assert address == f"127.0.0.1:{ports['grpc']}"
        token = issuer.token("alice", jti="chart-test-jti", scope="orders:read")
        with grpc.insecure_channel(address) as channel:
            stub = external_auth_pb2_grpc.AuthorizationStub(channel)
            allowed = check(stub, f"Bearer {token}")
            assert allowed.status.code == code_pb2.OK, allowed
            assert {h.header.key: h.header.value for h in allowed.ok_response.headers}["x-user-id"] == "alice"
            assert check(stub, None).denied_response.status.code == 401
            assert check(stub, f"Bearer {TestIssuer(issuer.issuer).token('alice')}").denied_response.status.code == 401

            # `gatehouse revoke` with the Secret's credential, through the admin port (what
            # `kubectl port-forward deployment/<gateway> <port>` gives an operator).
            env = {**os.environ, "GATEHOUSE_ADMIN_CREDENTIAL": "x" * 40}
            revoke = [sys.executable, "-m", "gatehouse", "revoke", "--admin", f"127.0.0.1:{ports['admin']}", "--jti", "chart-test-jti", "--ttl", "1h"]
            refused = subprocess.run(revoke, capture_output=True, text=True, timeout=60, env=env)
            assert refused.returncode == 2 and "refused the credential" in refused.stderr, refused.stderr
            env["GATEHOUSE_ADMIN_CREDENTIAL"] = credential
            done = subprocess.run([*revoke, "--reason", "chart test"], capture_output=True, text=True, timeout=60, env=env)
            assert done.returncode == 0 and "revoked jti chart-test-jti" in done.stdout, done.stdout + done.stderr
            wait_for(lambda: check(stub, f"Bearer {token}").denied_response.status.code == 401, 10, "the revoked token denied")
            other = issuer.token("bob", jti="another-jti")
            assert check(stub, f"Bearer {other}").status.code == code_pb2.OK
    finally:
        if sidecar_process is not None:
            sidecar_process.stop()
        redis.stop()
        jwks.stop()

    api.helm("uninstall", AUTHZ_RELEASE, "--namespace", AUTHZ_NAMESPACE, "--wait", "--timeout", "60s")


# --- ratelimit, installed and run ---------------------------------------------------------

RL_RELEASE = "limits"
RL_NAMESPACE = "gatehouse-limits"
LIMITED_ROUTE = {
    "apiVersion": "gatehouse.io/v1alpha1",
    "kind": "Route",
    "metadata": {"name": "orders-limited", "namespace": "shop"},
    "spec": {
        "match": {"path": "/api/v2/limited/{id}", "methods": ["GET"]},
        "backends": [{"service": "order-service", "port": 8080}],
        "auth": {"required": False},
        "rateLimits": [{"key": "ip", "algorithm": "fixedWindow", "limit": 2, "window": "60s"}],
    },
}


def should_rate_limit(stub: Any, limit_id: str, client_ip: str) -> Any:
    """The request Envoy's ratelimit filter sends for a route's limit keyed by client IP."""
    entries = [
        ratelimit_pb2.RateLimitDescriptor.Entry(key="limit", value=limit_id),
        ratelimit_pb2.RateLimitDescriptor.Entry(key="remote_address", value=client_ip),
    ]
    request = rls_pb2.RateLimitRequest(domain="gatehouse", descriptors=[ratelimit_pb2.RateLimitDescriptor(entries=entries)])
    return stub.ShouldRateLimit(request, timeout=10)


@pytest.mark.redis
def test_helm_install_with_rate_limit_then_the_sidecar_runs_with_what_the_chart_installed(api: KubeAPIServer, tmp_path: Path) -> None:
    redis = RedisServer.start(log_dir=tmp_path / "redis")
    control_plane: ControlPlaneProcess | None = None
    sidecar_process: ManagedProcess | None = None
    cp_name, gateway_name = f"{RL_RELEASE}-gatehouse-control-plane", f"{RL_RELEASE}-gatehouse-gateway"
    try:
        ports = {name: free_port() for name in ("xds", "cp_admin", "grpc", "metrics")}
        install = api.helm(
            "install", RL_RELEASE, str(CHART), "--namespace", RL_NAMESPACE, "--create-namespace",
            "--set", f"rateLimit.enabled=true,redis.url={redis.url},rateLimit.logLevel=debug",
            "--set", f"rateLimit.port={ports['grpc']},rateLimit.metricsPort={ports['metrics']}",
            "--set", f"controlPlane.xdsPort={ports['xds']},controlPlane.adminPort={ports['cp_admin']}",
            "--set", "gateway.autoscaling.enabled=false,gateway.replicas=3",
        )  # fmt: skip
        assert f"gatehouse ratelimit` (127.0.0.1:{ports['grpc']})" in install.stdout, install.stdout
        assert "limit / 3" in install.stdout, install.stdout

        # The control plane with the installed ConfigMap and its ServiceAccount's token.
        installed = json.loads(api.kubectl("get", "configmap", cp_name, "-n", RL_NAMESPACE, "-o", "json").stdout)
        cp_config = yaml.safe_load(loopback(installed["data"]["control-plane.yaml"]))
        assert cp_config["rateLimit"] == {"address": f"127.0.0.1:{ports['grpc']}", "timeout": "100ms", "failClosed": False}
        cp_config["sources"]["kubernetes"]["kubeconfig"] = str(service_account_kubeconfig(api, tmp_path, cp_name, RL_NAMESPACE))
        localize_credentials(api, cp_config, cp_name, RL_NAMESPACE, tmp_path / "cp-volumes")
        cp_path = tmp_path / "control-plane.yaml"
        cp_path.write_text(yaml.safe_dump(cp_config))
        control_plane = ControlPlaneProcess(cp_path, log_dir=tmp_path, xds_port=ports["xds"], admin_port=ports["cp_admin"])
        control_plane.start(timeout=60)

        # The sidecar as the kubelet would start it: the installed Deployment's command,
        # arguments and POD_NAME, its ConfigMap at (a local copy of) its mount path.
        deployment = json.loads(api.kubectl("get", "deployment", gateway_name, "-n", RL_NAMESPACE, "-o", "json").stdout)
        pod = deployment["spec"]["template"]["spec"]
        sidecar = next(c for c in pod["containers"] if c["name"] == "ratelimit")
        mounts = materialize_mounts(api, pod, sidecar, tmp_path / "volumes", namespace=RL_NAMESPACE)
        args = list(sidecar["args"])
        assert sidecar["command"] == ["gatehouse"] and args[:2] == ["ratelimit", "--config"]
        config_path = Path(local_path(mounts, args[2]))
        config = yaml.safe_load(loopback(config_path.read_text()))  # 0.0.0.0 (pod IP) → loopback here
        assert config["redis"]["url"] == redis.url and config["expectedInstances"] == 3
        xds_host = f"{cp_name}.{RL_NAMESPACE}.svc.cluster.local"
        assert config["policies"]["xds"]["address"] == f"{xds_host}:{ports['xds']}"
        config["policies"]["xds"]["address"] = f"127.0.0.1:{ports['xds']}"  # the Service's DNS name, here
        config_path.write_text(yaml.safe_dump(config))
        args[2] = str(config_path)
        pod_name = f"{gateway_name}-{uuid.uuid4().hex[:5]}"
        env = {**os.environ, "POD_NAME": pod_name, "POD_NAMESPACE": RL_NAMESPACE, "HOME": str(mounts["/tmp"])}
        assert {e["name"] for e in sidecar["env"]} == {"POD_NAME", "POD_NAMESPACE", "HOME"}
        sidecar_process = ManagedProcess.start([sys.executable, "-m", "gatehouse", *args], name="ratelimit", log_dir=tmp_path, env=env)

        # Ready on the Deployment's probe once the control plane answered, even with no
        # rate-limited route yet (an empty table is a table).
        probe_port = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
        readiness, liveness = sidecar["readinessProbe"]["httpGet"], sidecar["livenessProbe"]["httpGet"]
        wait_for(lambda: http_status(probe_port[readiness["port"]], readiness["path"]) == 200, 30, "ratelimit /readyz 200")
        assert http_status(probe_port[liveness["port"]], liveness["path"]) == 200
        assert http_status(ports["metrics"], "/metrics") == 200
        # The control plane sees it as the pod (its node id), in node group "ratelimit", on POLICY.
        (proxy,) = [p for p in control_plane.status()["proxies"] if p["node"] == pod_name]
        assert proxy["cluster"] == "ratelimit" and proxy["subscribed"] == ["POLICY"], proxy

        # A Route with a limit: the sidecar enforces it on the port Envoy is given, in Redis.
        api.kubectl("apply", "-f", "-", input=yaml.safe_dump(LIMITED_ROUTE))
        limit_id = "shop/orders-limited#0"
        address = cp_config["rateLimit"]["address"]
        with grpc.insecure_channel(address) as channel:
            stub = rls_pb2_grpc.RateLimitServiceStub(channel)

            def limit_known() -> bool:
                return should_rate_limit(stub, limit_id, "192.0.2.99").statuses[0].current_limit.requests_per_unit == 2

            wait_for(limit_known, 30, "the Route's limit reached the sidecar over ADS")
            settle(60, 3)  # the four calls in one fixed window
            codes = [should_rate_limit(stub, limit_id, "192.0.2.1").overall_code for _ in range(3)]
            assert codes == [rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT]
            denied = should_rate_limit(stub, limit_id, "192.0.2.1")
            assert {h.key for h in denied.response_headers_to_add} >= {"x-ratelimit-limit", "retry-after"}
        with RedisClient.from_url(redis.url, decode_responses=True) as client:
            keys = list(client.scan_iter("gatehouse:rl:*"))
        assert any("192.0.2.1}" in key for key in keys), keys  # counted in the configured Redis
    finally:
        api.kubectl("delete", "route", "orders-limited", "-n", "shop", "--ignore-not-found", check=False)
        if sidecar_process is not None:
            sidecar_process.stop()
        if control_plane is not None:
            control_plane.stop()
        redis.stop()

    api.helm("uninstall", RL_RELEASE, "--namespace", RL_NAMESPACE, "--wait", "--timeout", "60s")


# --- telemetry, installed and run ---------------------------------------------------------

TM_RELEASE = "telemetry"
TM_NAMESPACE = "gatehouse-telemetry"


def test_helm_install_with_telemetry_then_the_sidecar_runs_with_what_the_chart_installed(api: KubeAPIServer, tmp_path: Path) -> None:
    sidecar_process: ManagedProcess | None = None
    cp_name, gateway_name = f"{TM_RELEASE}-gatehouse-control-plane", f"{TM_RELEASE}-gatehouse-gateway"
    try:
        ports = {name: free_port() for name in ("als", "metrics")}
        install = api.helm(
            "install", TM_RELEASE, str(CHART), "--namespace", TM_NAMESPACE, "--create-namespace",
            "--set", f"telemetry.enabled=true,telemetry.port={ports['als']},telemetry.metricsPort={ports['metrics']}",
        )  # fmt: skip
        assert f"gatehouse telemetry` (127.0.0.1:{ports['als']})" in install.stdout, install.stdout
        assert f"logs deployment/{gateway_name} -c telemetry" in install.stdout, install.stdout  # stdout sink
        assert "Audit events" not in install.stdout, install.stdout  # no Kafka

        # The address the control plane gives every Envoy.
        installed = json.loads(api.kubectl("get", "configmap", cp_name, "-n", TM_NAMESPACE, "-o", "json").stdout)
        cp_config = yaml.safe_load(installed["data"]["control-plane.yaml"])
        address = cp_config["accessLog"]["address"]
        assert address == f"127.0.0.1:{ports['als']}" and "audit" not in cp_config

        # The sidecar as the kubelet would start it: the installed Deployment's command and
        # arguments, its ConfigMap at (a local copy of) its mount path.
        deployment = json.loads(api.kubectl("get", "deployment", gateway_name, "-n", TM_NAMESPACE, "-o", "json").stdout)
        pod = deployment["spec"]["template"]["spec"]
        sidecar = next(c for c in pod["containers"] if c["name"] == "telemetry")
        mounts = materialize_mounts(api, pod, sidecar, tmp_path / "volumes", namespace=TM_NAMESPACE)
        args = list(sidecar["args"])
        assert sidecar["command"] == ["gatehouse"] and args[:2] == ["telemetry", "--config"]
        config_path = Path(local_path(mounts, args[2]))
        tm_config = yaml.safe_load(loopback(config_path.read_text()))  # 0.0.0.0 (pod IP) → loopback here
        # The breakers' tally credential, the installed Secret's key where the Deployment mounts it.
        tm_config["breakerTallies"]["credentialFile"] = local_path(mounts, tm_config["breakerTallies"]["credentialFile"])
        config_path.write_text(yaml.safe_dump(tm_config))
        args[2] = str(config_path)
        env = {**os.environ, "HOME": str(mounts["/tmp"])}
        sidecar_process = ManagedProcess.start([sys.executable, "-m", "gatehouse", *args], name="telemetry", log_dir=tmp_path, env=env)

        probe_port = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
        readiness, liveness = sidecar["readinessProbe"]["httpGet"], sidecar["livenessProbe"]["httpGet"]
        wait_for(lambda: http_status(probe_port[readiness["port"]], readiness["path"]) == 200, 30, "telemetry /readyz 200")
        assert http_status(probe_port[liveness["port"]], liveness["path"]) == 200
        assert http_status(ports["metrics"], "/metrics") == 200

        # An entry streamed as Envoy streams it, to the address Envoy is given: one access
        # event on the sidecar's stdout (what `kubectl logs -c telemetry` shows).
        message = als_pb2.StreamAccessLogsMessage()
        message.identifier.node.id = f"{gateway_name}-abcde"
        message.identifier.log_name = "gatehouse"
        message.http_logs.log_entry.append(full_entry())
        with grpc.insecure_channel(address) as channel:
            als_pb2_grpc.AccessLogServiceStub(channel).StreamAccessLogs(iter([message]), timeout=10)
        log_path = sidecar_process.log_path

        def access_events() -> list[str]:
            return [line for line in log_path.read_text().splitlines() if '"type":"access"' in line]

        wait_for(lambda: bool(access_events()), 15, "the access event on the sidecar's stdout")
        (line,) = access_events()
        event = json.loads(line)
        assert (event["path"], event["status"], event["user_id"]) == ("/api/v2/orders/42?x=1", 200, "alice")

        # With Kafka, the notes tell where audit events go and what an emptyDir spool means.
        upgrade = api.helm("upgrade", TM_RELEASE, str(CHART), "--namespace", TM_NAMESPACE, "--reuse-values", *WITH_KAFKA)
        assert "goes to Kafka" in upgrade.stdout and "gatehouse.access-log" in upgrade.stdout, upgrade.stdout
        assert "Audit events of the control plane go to Kafka topic gatehouse.audit" in upgrade.stdout, upgrade.stdout
        assert "NOT pod deletion" in upgrade.stdout, upgrade.stdout
        upgraded = json.loads(api.kubectl("get", "configmap", cp_name, "-n", TM_NAMESPACE, "-o", "json").stdout)
        assert yaml.safe_load(upgraded["data"]["control-plane.yaml"])["audit"]["kafka"]["bootstrapServers"] == KAFKA_SERVERS
    finally:
        if sidecar_process is not None:
            sidecar_process.stop()

    api.helm("uninstall", TM_RELEASE, "--namespace", TM_NAMESPACE, "--wait", "--timeout", "60s")


# --- route breakers, installed ------------------------------------------------------------

BR_RELEASE = "breakers"
BR_NAMESPACE = "gatehouse-breakers"


def test_helm_install_with_breakers_keeps_the_credentials_and_grants_the_board_alone(api: KubeAPIServer) -> None:
    cp_name, gateway_name = f"{BR_RELEASE}-gatehouse-control-plane", f"{BR_RELEASE}-gatehouse-gateway"
    secret_name = board = f"{BR_RELEASE}-gatehouse-breakers"  # the Secret is the chart's; the ConfigMap the control plane's
    install = api.helm(
        "install", BR_RELEASE, str(CHART), "--namespace", BR_NAMESPACE, "--create-namespace", "--set", "telemetry.enabled=true",
    )  # fmt: skip
    assert f"port-forward service/{cp_name} 19000" in install.stdout, install.stdout
    assert "gatehouse breaker status --admin http://127.0.0.1:19000" in install.stdout, install.stdout
    assert f"get secret {secret_name}" in install.stdout and "-o jsonpath='{.data.operator-credential}' | base64 -d" in install.stdout, install.stdout

    def credentials(name: str = secret_name) -> dict[str, str]:
        secret = json.loads(api.kubectl("get", "secret", name, "-n", BR_NAMESPACE, "-o", "json").stdout)
        return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}

    # Two random credentials, generated once and kept by upgrades (lookup).
    generated = credentials()
    assert set(generated) == {"tally-credential", "operator-credential"}
    assert all(len(value) >= 32 and value.isascii() and value.isalnum() for value in generated.values()), generated
    assert generated["tally-credential"] != generated["operator-credential"]
    # The admin port's two, the same way (issue 24, item 7), and the notes say how to read one.
    admin_secret_name = f"{cp_name}-admin"
    admin_generated = credentials(admin_secret_name)
    assert set(admin_generated) == {"operator-credential", "read-credential"}
    assert all(len(value) >= 32 and value.isascii() and value.isalnum() for value in admin_generated.values()), admin_generated
    assert f"get secret {admin_secret_name}" in install.stdout and "{.data.read-credential}" in install.stdout, install.stdout
    api.helm("upgrade", BR_RELEASE, str(CHART), "--namespace", BR_NAMESPACE, "--reuse-values", "--set", "telemetry.logLevel=debug")
    assert credentials() == generated
    assert credentials(admin_secret_name) == admin_generated
    # The notes' command prints the operator credential (the dash needs no escaping).
    printed = api.kubectl("get", "secret", secret_name, "-n", BR_NAMESPACE, "-o", "jsonpath={.data.operator-credential}").stdout
    assert base64.b64decode(printed).decode() == generated["operator-credential"]

    # RBAC: the control plane may create ConfigMaps in its namespace and touch only the board.
    sa = f"system:serviceaccount:{BR_NAMESPACE}:{cp_name}"
    for verb, name in [("create", ""), ("get", board), ("patch", board), ("list", board), ("watch", board)]:
        assert can_i(api, sa, verb, "configmaps", BR_NAMESPACE, name), f"{sa} cannot {verb} configmaps {name}"
    for verb, namespace, name in [
        ("get", BR_NAMESPACE, ""),
        ("list", BR_NAMESPACE, ""),
        ("watch", BR_NAMESPACE, ""),
        ("get", BR_NAMESPACE, f"{cp_name}"),  # its own config
        ("patch", BR_NAMESPACE, "someone-elses"),
        ("update", BR_NAMESPACE, board),
        ("delete", BR_NAMESPACE, board),
        ("create", "shop", ""),
        ("get", "shop", board),
    ]:
        assert not can_i(api, sa, verb, "configmaps", namespace, name), f"{sa} may {verb} configmaps {name} in {namespace}"
    assert not can_i(api, f"system:serviceaccount:{BR_NAMESPACE}:{gateway_name}", "get", "configmaps", BR_NAMESPACE, board)

    # What the control plane does, as its ServiceAccount: creates the board, patches it, lists
    # and watches it by name (fieldSelector=metadata.name=<board>): RBAC's resourceNames
    # cover a list and a watch with that selector, so no wider grant is needed.
    as_sa = f"--as={sa}"
    api.kubectl("create", "configmap", board, "-n", BR_NAMESPACE, as_sa)
    api.kubectl("patch", "configmap", board, "-n", BR_NAMESPACE, "--type=merge", "-p", '{"data": {"shop.orders": "{}"}}', as_sa)
    path = f"/api/v1/namespaces/{BR_NAMESPACE}/configmaps?fieldSelector=metadata.name%3D{board}"
    listed = json.loads(api.kubectl("get", "--raw", f"{path}&limit=500", as_sa).stdout)
    assert [item["metadata"]["name"] for item in listed["items"]] == [board]
    version = listed["metadata"]["resourceVersion"]
    watched = api.kubectl("get", "--raw", f"{path}&watch=true&resourceVersion={version}&allowWatchBookmarks=true&timeoutSeconds=1", as_sa)
    assert "Forbidden" not in watched.stdout, watched.stdout
    by_kubectl = api.kubectl("get", "configmaps", "-n", BR_NAMESPACE, "--field-selector", f"metadata.name={board}", "-w", "--request-timeout=2s", as_sa)
    assert board in by_kubectl.stdout, by_kubectl.stdout
    # ... and nothing else, however it asks.
    api.kubectl("create", "configmap", "someone-elses", "-n", BR_NAMESPACE)
    for args in (
        ["get", "configmaps"],
        ["get", "configmaps", "--field-selector", "metadata.name=someone-elses"],
        ["get", "configmaps", "--field-selector", "metadata.name=someone-elses", "-w", "--request-timeout=2s"],
        ["get", "configmap", "someone-elses"],
        ["delete", "configmap", board],
    ):
        refused = api.kubectl(*args, "-n", BR_NAMESPACE, as_sa, check=False)
        assert refused.returncode != 0 and "Forbidden" in refused.stderr, (args, refused.stdout, refused.stderr)

    # Uninstall removes the chart's Secret and leaves the control plane's board, like the Lease.
    api.helm("uninstall", BR_RELEASE, "--namespace", BR_NAMESPACE, "--wait", "--timeout", "60s")
    assert api.kubectl("get", "secret", secret_name, "-n", BR_NAMESPACE, check=False).returncode != 0
    assert "shop.orders" in json.loads(api.kubectl("get", "configmap", board, "-n", BR_NAMESPACE, "-o", "json").stdout)["data"]
