"""What ``scripts/cluster up`` puts on the cluster: the chart (trial Redis on) with the
locally built images, and the example backend and Route of examples/k8s/, then proves a
request is served through the gateway Service.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import images
from .cluster import Cluster, KubectlError

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "gatehouse"
SINGLE_NODE_VALUES = Path(__file__).resolve().parent / "single-node-values.yaml"
RELEASE = "gatehouse"
NAMESPACE = "gatehouse"
EXAMPLE_NAMESPACE = "shop"
EXAMPLE_PATH = "/api/v2/orders/42"
APP_VERSION_TAG = "0.1.0"


class ChartError(RuntimeError):
    pass


def image_values(cluster: Cluster) -> list[str]:
    """--set flags that point the chart at the imported images, never pulled."""
    gatehouse, redis = cluster.images["gatehouse"], cluster.images["redis"]
    return [
        "--set", f"image.repository={gatehouse.repository}",
        "--set", f"image.tag={gatehouse.tag}",
        "--set", "image.pullPolicy=Never",
        "--set", "redis.enabled=true",
        "--set", f"redis.image.repository={redis.repository}",
        "--set", f"redis.image.tag={redis.tag}",
        "--set", "redis.image.pullPolicy=Never",
    ]  # fmt: skip


def install(cluster: Cluster, extra: Sequence[str] = (), *, release: str = RELEASE, namespace: str = NAMESPACE,
            timeout: str = "5m") -> None:
    """helm upgrade --install with the images' values and ``extra`` flags, waiting for Ready."""
    cluster.helm("upgrade", "--install", release, str(CHART), "--namespace", namespace, "--create-namespace",
                 "--values", str(SINGLE_NODE_VALUES), *image_values(cluster), *extra, "--wait", "--timeout", timeout, timeout=900)


def tag_app_version(cluster: Cluster) -> None:
    """The Gatehouse image also as gatehouse:<appVersion>, the name the Dockerfile's header
    builds and examples/k8s/echo-backend.yaml runs."""
    target = f"{images.GATEHOUSE_REPOSITORY}:{APP_VERSION_TAG}"
    images.tag(cluster.layout.containerd_socket, cluster.images["gatehouse"].reference, target)


def apply_example(cluster: Cluster) -> None:
    cluster.kubectl("create", "namespace", EXAMPLE_NAMESPACE, "--dry-run=client", "-o", "yaml")
    manifests = [
        cluster.kubectl("create", "namespace", EXAMPLE_NAMESPACE, "--dry-run=client", "-o", "yaml").stdout,
        cluster.kubectl("-n", EXAMPLE_NAMESPACE, "create", "configmap", "echo-upstream",
                        f"--from-file={REPO / 'examples' / 'upstream' / 'echo.py'}", "--dry-run=client", "-o", "yaml").stdout,
        (REPO / "examples" / "k8s" / "echo-backend.yaml").read_text(),
        (REPO / "examples" / "k8s" / "route.yaml").read_text(),
    ]
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(manifests))
    cluster.kubectl("-n", EXAMPLE_NAMESPACE, "rollout", "status", "deployment/order-service", "--timeout=180s", timeout=200)


def service_ip(cluster: Cluster, name: str, namespace: str = NAMESPACE) -> str:
    return str(cluster.kubectl("-n", namespace, "get", "service", name, "-o", "jsonpath={.spec.clusterIP}").stdout.strip())


def gateway_url(cluster: Cluster, release: str = RELEASE, namespace: str = NAMESPACE) -> str:
    return f"http://{service_ip(cluster, f'{release}-gateway', namespace)}:8080"


def wait_served(cluster: Cluster, path: str = EXAMPLE_PATH, timeout: float = 60.0,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    url = gateway_url(cluster) + path
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            status, answer_headers, body = cluster.http(url, timeout=3, headers=headers)
            if status == 200:
                return status, answer_headers, body
            last = (status, body[:200])
        except OSError as exc:
            last = exc
        time.sleep(0.5)
    raise ChartError(f"GET {url} not 200 within {timeout:.0f}s: {last}")


def install_all(cluster: Cluster, say: Callable[[str], None] = print) -> None:
    started = time.monotonic()
    say("installing the chart (trial Redis on, images imported, pullPolicy Never)")
    tag_app_version(cluster)
    try:
        install(cluster)
    except KubectlError as exc:
        pods = cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
        raise ChartError(f"helm install failed: {exc}\n{pods}") from exc
    cluster.timings["chart"] = round(time.monotonic() - started, 1)
    started = time.monotonic()
    say("applying the example backend and Route (examples/k8s/)")
    apply_example(cluster)
    status, headers, body = wait_served(cluster)
    upstream = headers.get("x-upstream") or json.loads(body).get("upstream")
    say(f"GET {EXAMPLE_PATH} through the gateway Service: {status} from {upstream}")
    status, body = status_page(cluster)
    if status != 200:
        raise ChartError(f"GET {admin_url()}/status with the read credential answered {status}: {body[:200]!r}")
    say(f"GET /status on the control plane with the read credential: {status}")
    cluster.timings["example"] = round(time.monotonic() - started, 1)


def admin_url(release: str = RELEASE, namespace: str = NAMESPACE) -> str:
    return f"http://{release}-control-plane.{namespace}.svc.cluster.local:19000"


def read_credential_command(release: str = RELEASE, namespace: str = NAMESPACE) -> str:
    """The shell command that prints the admin port's read credential (the chart's Secret)."""
    return f"kubectl -n {namespace} get secret {release}-control-plane-admin -o jsonpath={{.data.read-credential}} | base64 -d"


def status_page(cluster: Cluster) -> tuple[int, bytes]:
    """The control plane's /status as the printed line asks for it: with the read credential."""
    encoded = cluster.kubectl("-n", NAMESPACE, "get", "secret", f"{RELEASE}-control-plane-admin", "-o",
                              "jsonpath={.data.read-credential}").stdout.strip()
    credential = base64.b64decode(encoded).decode()
    ip = service_ip(cluster, f"{RELEASE}-control-plane")
    status, _, body = cluster.http(f"http://{ip}:19000/status", headers={"authorization": f"Bearer {credential}"}, timeout=5)
    return status, body


def instructions(cluster: Cluster) -> str:
    name = "" if cluster.layout.name == "gatehouse" else f"GATEHOUSE_CLUSTER={cluster.layout.name} "
    run = f"{name}scripts/cluster exec --"
    gateway = f"http://{RELEASE}-gateway.{NAMESPACE}.svc.cluster.local:8080"
    status = f"""sh -c 'curl -s -H "Authorization: Bearer $({read_credential_command()})" {admin_url()}/status'"""
    return f"""
The cluster runs inside the network namespace {cluster.layout.netns}: reach it through
`scripts/cluster exec -- CMD` (KUBECONFIG is set, names resolve through CoreDNS).

  gateway:      {run} curl -s {gateway}{EXAMPLE_PATH}
  status:       {run} {status}
  routes:       {run} kubectl get gr -A
  pods:         {run} kubectl get pods -A
  a shell:      {run} bash

Edit examples/k8s/route.yaml and `{run} kubectl apply -f examples/k8s/route.yaml`: Envoy
serves the change within a second, without a restart. `make cluster-down` removes it all.
"""
