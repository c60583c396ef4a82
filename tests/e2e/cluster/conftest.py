"""One real single-node cluster for every test in this directory (tests/harness/cluster).

Brought up once (the package-scoped ``kube``), with the chart installed as a platform
team would for the tests' needs: the ext_authz sidecar with one issuer (its JWKS served
from the node's address inside the namespace), the ratelimit sidecar, the trial Redis
and NetworkPolicies; plus the example backend and Route (examples/k8s/) and a second
echo backend for weighted routes. The last test (test_root_namespace.py) takes it down
and compares the machine's own network namespace with what it was before; the fixture's
teardown takes it down too, whatever happened.

Needs root (network namespaces, cgroups, mounts), the Debian packages scripts/setup test
installs and the tools scripts/build-kube-tools builds: missing any of them fails the
tests under CI=true and skips them elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.harness.binaries import running_in_ci
from tests.harness.cluster import Cluster, chart, daemons, layout, network
from tests.harness.cluster.tools import MissingTool, find
from tests.harness.issuer import TestIssuer

HERE = Path(__file__).resolve().parent
NAME_PREFIX = "ghe2e"
ISSUER = "https://issuer.cluster.test/"
JWKS_PORT = 8099
TIMEOUT = 1800
"""Per test, the cluster's bring-up included (the first test's setup): on a fresh machine
that is a debootstrap and two image builds, several minutes on 2 cores."""
ORDER = ["test_install.py", "test_routes.py", "test_auth_ratelimit.py", "test_disruption.py", "test_root_namespace.py"]
"""Install checks (no restarts yet) first, the disruptions late, the teardown check last."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mine = [i for i, item in enumerate(items) if Path(str(item.fspath)).parent == HERE]
    if not mine:
        return
    block = [items[i] for i in mine]
    for item in block:
        item.add_marker(pytest.mark.timeout(TIMEOUT))
    rank = {name: position for position, name in enumerate(ORDER)}
    block.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(ORDER)))
    for i, item in zip(mine, block, strict=True):
        items[i] = item


def _unavailable(message: str) -> None:
    if running_in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def root_namespace() -> dict[str, list[str]]:
    """The machine's own addresses (without the lifetimes that count down), routes, links
    and iptables rules (without comments and counters)."""
    def lines(*args: str) -> list[str]:
        return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=True).stdout.splitlines()
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, timeout=30, check=True).stdout.splitlines()
    return {
        "iptables": sorted(re.sub(r"\[\d+:\d+\]", "", line) for line in rules if not line.startswith("#")),
        "addr": sorted(re.sub(r"\s+(valid|preferred)_lft \S+", "", line).strip() for line in lines("-o", "addr", "show")),
        "route": sorted(lines("route", "show")),
        "route6": sorted(lines("-6", "route", "show")),
        "link": sorted(re.sub(r"^\d+: ", "", line.split("\\")[0]) for line in lines("-o", "link", "show")),
    }


def _sweep_stale() -> None:
    """Clusters of earlier test runs whose process is gone (killed outright)."""
    root = layout.state_root()
    names = {p.name for p in root.iterdir()} if root.is_dir() else set()
    names |= {n.removesuffix("-cluster") for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                                                   check=False).stdout.split() if n.endswith("-cluster")}
    for name in sorted(names):
        match = re.fullmatch(rf"{NAME_PREFIX}(\d+)", name)
        if match and int(match.group(1)) != os.getpid() and not daemons.alive(int(match.group(1))):
            Cluster(name).down(lambda _: None)


@dataclass
class KubeSession:
    cluster: Cluster
    issuer: TestIssuer
    before: dict[str, list[str]]
    gateway: str
    namespace: str = chart.NAMESPACE
    release: str = chart.RELEASE
    notes: dict[str, Any] = field(default_factory=dict)

    def token(self, **claims: Any) -> str:
        return str(self.issuer.token(**claims))

    def pods(self, component: str) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/component={component}"
        items = self.cluster.kubectl_json("-n", self.namespace, "get", "pods", "-l", selector)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def apply(self, manifest: dict[str, Any] | str) -> None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        self.cluster.kubectl("apply", "-f", "-", input=text)

    def route(self, name: str, spec: dict[str, Any], namespace: str = chart.EXAMPLE_NAMESPACE) -> dict[str, Any]:
        """A Route; one that says nothing of ``auth`` requires a token for the issuer's
        audience, since the chart requires routes that read tokens to name one
        (``extAuthz.requireAudience``, on by default)."""
        spec = spec if "auth" in spec else {**spec, "auth": {"audiences": ["api"]}}
        return {"apiVersion": "gatehouse.io/v1alpha1", "kind": "Route", "metadata": {"name": name, "namespace": namespace}, "spec": spec}

    def conditions(self, name: str, namespace: str = chart.EXAMPLE_NAMESPACE) -> dict[str, dict[str, Any]]:
        result = self.cluster.kubectl("-n", namespace, "get", "routes.gatehouse.io", name, "-o", "json", check=False)
        if result.returncode != 0:
            return {}
        return {c["type"]: c for c in json.loads(result.stdout).get("status", {}).get("conditions", [])}

    def get(self, path: str, *, headers: dict[str, str] | None = None, base: str | None = None) -> tuple[int, dict[str, str], bytes]:
        """GET through the gateway Service (or ``base``), by default with a valid token: with
        ext_authz on, routes without ``auth`` require one (auth.required defaults to true)."""
        if headers is None:
            headers = {"authorization": f"Bearer {self.default_token}"}
        return self.cluster.http((base or self.gateway) + path, headers=headers, timeout=5)

    @property
    def default_token(self) -> str:
        if "token" not in self.notes:
            self.notes["token"] = self.token(sub="e2e-user")
        return str(self.notes["token"])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def wait_for(check: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")


def _test_values(path: Path) -> Path:
    values = {
        "extAuthz": {"enabled": True, "issuers": [{"issuer": ISSUER, "jwksUrl": f"http://{layout.NODE_IP}:{JWKS_PORT}/jwks.json",
                                                   "audiences": ["api"]}]},
        "rateLimit": {"enabled": True},
        "networkPolicy": {"enabled": True},
    }
    path.write_text(json.dumps(values))
    return path


SECOND_BACKEND = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: orders-v2, namespace: shop, labels: {app: orders-v2}}
spec:
  replicas: 1
  selector: {matchLabels: {app: orders-v2}}
  template:
    metadata: {labels: {app: orders-v2}}
    spec:
      automountServiceAccountToken: false
      securityContext: {runAsNonRoot: true, runAsUser: 10001, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: echo
          image: gatehouse:0.1.0
          imagePullPolicy: Never
          command: ["python", "/echo/echo.py", "--name", "orders-v2", "--host", "0.0.0.0", "--port", "8080"]
          ports: [{name: http, containerPort: 8080}]
          readinessProbe: {httpGet: {path: /health, port: http}, periodSeconds: 2}
          securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
          volumeMounts: [{name: echo, mountPath: /echo, readOnly: true}]
      volumes: [{name: echo, configMap: {name: echo-upstream}}]
---
apiVersion: v1
kind: Service
metadata: {name: orders-v2, namespace: shop}
spec:
  selector: {app: orders-v2}
  ports: [{name: http, port: 8080, targetPort: http}]
"""


@pytest.fixture(scope="package")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSession]:
    if os.geteuid() != 0:
        _unavailable("the cluster tests need root (network namespaces, cgroups, mounts)")
    try:
        find()
    except MissingTool as exc:
        _unavailable(f"cannot run a cluster: {exc}")
    _sweep_stale()
    before = root_namespace()
    cluster = Cluster(f"{NAME_PREFIX}{os.getpid()}")
    try:
        started = time.monotonic()
        cluster.up(lambda message: print(f"cluster: {message}", flush=True))
        issuer = TestIssuer(issuer=ISSUER, audience="api")
        jwks_dir = cluster.layout.state / "jwks"
        jwks_dir.mkdir(exist_ok=True)
        issuer.write_jwks(jwks_dir / "jwks.json")
        daemons.start(cluster.layout, "jwks", network.exec_argv(cluster.layout, [
            "python3", "-m", "http.server", str(JWKS_PORT), "--bind", layout.NODE_IP, "--directory", str(jwks_dir)]))
        chart.tag_app_version(cluster)
        install_started = time.monotonic()
        chart.install(cluster, ["--values", str(_test_values(tmp_path_factory.mktemp("values") / "values.json"))])
        cluster.timings["chart"] = round(time.monotonic() - install_started, 1)
        chart.apply_example(cluster)
        cluster.kubectl("apply", "-f", "-", input=SECOND_BACKEND)
        cluster.kubectl("-n", "shop", "rollout", "status", "deployment/orders-v2", "--timeout=180s", timeout=200)
        chart.wait_served(cluster, headers={"authorization": f"Bearer {issuer.token()}"})
        cluster.timings["session ready"] = round(time.monotonic() - started, 1)
        print(f"cluster: ready for the tests: {cluster.timings}", flush=True)
        yield KubeSession(cluster=cluster, issuer=issuer, before=before, gateway=chart.gateway_url(cluster))
    finally:
        if os.environ.get("GATEHOUSE_CLUSTER_KEEP") == "1":
            print(f"cluster: kept for debugging (GATEHOUSE_CLUSTER_KEEP=1): GATEHOUSE_CLUSTER={cluster.layout.name} "
                  "scripts/cluster exec -- kubectl get pods -A; scripts/cluster down removes it", flush=True)
        else:
            cluster.down(lambda message: print(f"cluster: {message}", flush=True))
