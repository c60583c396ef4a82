"""One single-node Kubernetes cluster from real components, inside its own network namespace.

    cluster = Cluster("gatehouse")
    cluster.up()                       # images, components, node Ready (then chart.py installs)
    cluster.kubectl("get", "pods", "-A")
    cluster.down()                     # everything it made, by pid, mount and path

``up`` is also what ``scripts/cluster up`` runs; the processes it starts outlive it and
``down`` (any later process) finds them again from the state directory.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from . import cgroups, components, daemons, images, layout, network, teardown, tools
from .pki import Pki

T = TypeVar("T")


class ClusterError(RuntimeError):
    pass


class KubectlError(ClusterError):
    def __init__(self, argv: Sequence[str], result: subprocess.CompletedProcess[str]) -> None:
        self.result = result
        super().__init__(f"{' '.join(argv[-8:])}: exit {result.returncode}\nstderr: {result.stderr.strip()}\nstdout: {result.stdout.strip()[-2000:]}")


class Cluster:
    def __init__(self, name: str = layout.DEFAULT_NAME) -> None:
        self.layout = layout.Layout(name)
        self.pki = Pki(self.layout)
        self.timings: dict[str, float] = {}
        self.images: dict[str, images.Image] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._tools: tools.Tools | None = None

    @property
    def tools(self) -> tools.Tools:
        if self._tools is None:
            self._tools = tools.find()
        return self._tools

    # --- running things inside -----------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.pki.kubeconfig("admin")

    def env(self) -> dict[str, str]:
        """The environment of a command run inside: KUBECONFIG, helm's own directories, the
        cached kubectl and helm first on PATH."""
        home = self.layout.helm_home
        kube_bin = str(Path(self.tools.kubectl).parent)
        helm_bin = str(Path(self.tools.helm).parent)
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
            "PATH": f"{kube_bin}:{helm_bin}:{os.environ.get('PATH', '')}",
        }

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        return network.exec_argv(self.layout, argv)

    def run(self, argv: Sequence[str], *, input: str | None = None, check: bool = True,  # noqa: A002
            timeout: float = 120.0, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``argv`` inside the namespace (its resolv.conf, KUBECONFIG set), output captured."""
        full = self.exec_argv(argv)
        result = subprocess.run(full, input=input, capture_output=True, text=True, timeout=timeout,
                                env={**self.env(), **(env or {})},
                                stdin=None if input is not None else subprocess.DEVNULL, check=False)
        if check and result.returncode != 0:
            raise KubectlError(full, result)
        return result

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120.0,  # noqa: A002
                as_identity: str = "admin") -> subprocess.CompletedProcess[str]:
        kubeconfig = self.pki.kubeconfig(as_identity)
        return self.run([self.tools.kubectl, f"--kubeconfig={kubeconfig}", *args], input=input, check=check, timeout=timeout)

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def helm(self, *args: str, check: bool = True, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
        return self.run([self.tools.helm, *args], check=check, timeout=timeout)

    def inside(self, function: Callable[..., T], *args: Any) -> T:
        """Call ``function(*args)`` on a thread inside the namespace (network.enter)."""
        if self._executor is None:
            self._executor = network.executor(self.layout)
        return self._executor.submit(function, *args).result()

    def http(self, url: str, *, headers: Mapping[str, str] | None = None, timeout: float = 5.0,
             method: str = "GET", body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        """One HTTP request from inside the namespace: (status, lower-cased headers, body)."""
        def request() -> tuple[int, dict[str, str], bytes]:
            req = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
            try:
                with urllib.request.urlopen(req, timeout=timeout) as response:  # noqa: S310 - http inside the cluster
                    return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
            except urllib.error.HTTPError as error:
                return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()
        return self.inside(request)

    # --- state ---------------------------------------------------------------------------

    def exists(self) -> bool:
        return self.layout.marker.exists() or network.exists(self.layout)

    def running(self) -> bool:
        """All recorded daemons alive and the API server ready."""
        if not self.layout.marker.exists():
            return False
        alive = daemons.recorded(self.layout)
        if not set(_DAEMONS) <= set(alive):
            return False
        return self._apiserver_ready()

    def describe(self) -> dict[str, Any]:
        if not self.layout.marker.exists():
            return {}
        return dict(json.loads(self.layout.marker.read_text()))

    def _record(self, **fields: Any) -> None:
        data = self.describe()
        data.update(fields)
        self.layout.marker.write_text(json.dumps(data, indent=2) + "\n")

    # --- up ----------------------------------------------------------------------------

    def _step(self, name: str, started: float) -> None:
        self.timings[name] = round(time.monotonic() - started, 1)

    def up(self, say: Callable[[str], None] = print) -> None:
        """Images, namespace, components; returns once the node is Ready and kube-system's
        service accounts exist. A failure leaves the state for ``down`` (and raises)."""
        start = time.monotonic()
        if self.running():
            say(f"cluster {self.layout.name}: already up; images rebuilt if their sources changed")
            self.images = images.build_all(self.layout.logs / "image-build.log")
            images.import_into(self.layout.containerd_socket, list(self.images.values()))
            self._record(images={name: image.reference for name, image in self.images.items()})
            return
        if self.exists():
            say(f"cluster {self.layout.name}: removing what an earlier run left")
            self.down(say)
        self.tools  # noqa: B018 - fail now when a tool is missing
        self.layout.state.mkdir(parents=True, exist_ok=True)
        self.layout.state.chmod(0o700)
        self._record(name=self.layout.name, netns=self.layout.netns, state=str(self.layout.state), started=time.time(),
                     pid=os.getpid(), existed_before=[str(path) for path in self.layout.shared_dirs if path.exists()])
        self.layout.logs.mkdir(exist_ok=True)

        step = time.monotonic()
        say("images: building or reusing (podman, cached by image id)")
        self.images = images.build_all(self.layout.logs / "image-build.log")
        self._record(images={name: image.reference for name, image in self.images.items()})
        self._step("images", step)

        step = time.monotonic()
        network.create(self.layout)
        self.pki.write()
        containerd_config = components.write_containerd_config(self.layout, self.images["pause"].reference)
        components.write_cni_config(self.layout)
        self._step("namespace+pki", step)

        step = time.monotonic()
        t, lay, pki = self.tools, self.layout, self.pki
        daemons.start(lay, "etcd", network.exec_argv(lay, components.etcd_argv(lay, t)))
        daemons.start(lay, "containerd", network.nsenter_argv(lay, components.containerd_argv(lay, containerd_config)))
        daemons.wait_until(lambda: self.inside(_etcd_healthy), 60, "etcd health", lay, "etcd")
        daemons.start(lay, "kube-apiserver", network.exec_argv(lay, components.apiserver_argv(lay, t, pki)))
        imported: list[BaseException] = []
        importer = threading.Thread(target=self._import_images, args=(imported,), name="image-import", daemon=True)
        daemons.wait_until(self.layout.containerd_socket.exists, 30, "containerd's socket", lay, "containerd")
        importer.start()
        daemons.wait_until(self._apiserver_ready, 120, "kube-apiserver /readyz", lay, "kube-apiserver")
        self._step("apiserver", step)

        step = time.monotonic()
        self.kubectl("apply", "--server-side", "-f", "-", input=components.bootstrap_manifests(), as_identity="super-admin")
        daemons.start(lay, "kube-controller-manager", network.exec_argv(lay, components.controller_manager_argv(lay, t, pki)))
        daemons.start(lay, "kube-scheduler", network.exec_argv(lay, components.scheduler_argv(lay, t, pki)))
        daemons.start(lay, "kube-proxy", network.exec_argv(lay, components.kube_proxy_argv(t, components.write_kube_proxy_config(lay, pki))))
        daemons.start(lay, "coredns", network.exec_argv(lay, components.coredns_argv(t, components.write_corefile(lay, pki))))
        kubelet_config = components.write_kubelet_config(lay, pki)
        cgroups.create_parent(lay)
        daemons.start(lay, "kubelet", network.nsenter_argv(lay, components.kubelet_argv(lay, t, pki, kubelet_config)))
        daemons.wait_until(self._node_ready, 120, f"node {layout.NODE_NAME} Ready", lay, "kubelet")
        daemons.wait_until(lambda: self.kubectl("get", "serviceaccount", "default", check=False).returncode == 0,
                           60, "the default service account", lay, "kube-controller-manager")
        self._step("node", step)

        step = time.monotonic()
        importer.join()
        if imported:
            raise ClusterError(f"importing the images into containerd failed: {imported[0]}")
        self._step("image import (waited)", step)
        self.timings["up"] = round(time.monotonic() - start, 1)
        self._record(timings=self.timings)

    def _import_images(self, failures: list[BaseException]) -> None:
        started = time.monotonic()
        try:
            daemons.wait_until(self._containerd_answers, 60, "containerd", self.layout, "containerd")
            images.import_into(self.layout.containerd_socket, list(self.images.values()))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            failures.append(exc)
        self.timings["image import"] = round(time.monotonic() - started, 1)

    def _containerd_answers(self) -> bool:
        return subprocess.run(["ctr", "--address", str(self.layout.containerd_socket), "version"],
                              capture_output=True, timeout=10, check=False).returncode == 0

    def _ssl(self, identity: str = "super-admin") -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.path(f"{identity}.crt")), str(self.pki.path(f"{identity}.key")))
        return context

    def _apiserver_ready(self) -> bool:
        def ready() -> bool:
            try:
                url = f"https://{layout.NODE_IP}:{layout.APISERVER_PORT}/readyz"
                with urllib.request.urlopen(url, timeout=2, context=self._ssl()) as response:  # noqa: S310
                    return bool(response.status == 200)
            except (OSError, ssl.SSLError):
                return False
        if not network.exists(self.layout) or not self.pki.exists():
            return False
        return self.inside(ready)

    def _node_ready(self) -> bool:
        result = self.kubectl("get", "node", layout.NODE_NAME, "-o",
                              'jsonpath={.status.conditions[?(@.type=="Ready")].status}', check=False)
        return result.returncode == 0 and result.stdout.strip() == "True"

    # --- down ----------------------------------------------------------------------------

    def down(self, say: Callable[[str], None] = print) -> list[str]:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        leftovers = teardown.down(self.layout, log=os.environ.get("GATEHOUSE_CLUSTER_VERBOSE") == "1")
        for item in leftovers:
            say(f"could not remove: {item}")
        return leftovers


_DAEMONS = ("etcd", "containerd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "coredns", "kubelet")


def _etcd_healthy() -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{layout.ETCD_CLIENT_PORT}/health", timeout=2) as response:  # noqa: S310
            return bool(json.loads(response.read()).get("health") == "true")
    except (OSError, ValueError):
        return False
