"""A real Kubernetes API server for tests: etcd + kube-apiserver, no kubelet or scheduler.

Like controller-runtime's envtest: etcd (Debian's etcd-server) and a kube-apiserver built
from the Kubernetes Go modules by `scripts/build-kube-tools`, both on free loopback ports,
with a generated CA and serving certificate, a static admin token in `system:masters`, RBAC
authorization and service-account signing keys. No controllers run: objects are stored and
served, nothing reconciles them (no pods, no EndpointSlices for Services, no GC).

    api = KubeAPIServer.start(tmp_path)
    try:
        api.kubectl("create", "namespace", "shop")
        api.kubectl("apply", "-f", "-", input=manifest_yaml)
        core = kubernetes.client.CoreV1Api(api.api_client())
        api.restart_apiserver()          # same port, same etcd: data survives
    finally:
        api.stop()

Versions come from `tests/harness/kube/versions.env`, the same file the build script reads.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from .binaries import find_binary, require_binary, running_in_ci
from .ports import free_port
from .processes import ManagedProcess

KUBE_HINT = "run scripts/build-kube-tools"
VERSIONS_FILE = Path(__file__).resolve().parent / "kube" / "versions.env"

ADMIN_USER = "gatehouse-admin"
ADMIN_GROUP = "system:masters"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"


# --- tools --------------------------------------------------------------------------------


def kube_versions() -> dict[str, str]:
    """KEY=VALUE pairs of tests/harness/kube/versions.env (KUBERNETES_VERSION, HELM_VERSION, ...)."""
    versions: dict[str, str] = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        versions[key.strip()] = value.strip().strip("'\"")
    return versions


def cache_dir() -> Path:
    """`$GATEHOUSE_CACHE`, else `~/.cache/gatehouse`: where build-kube-tools puts its results."""
    configured = os.environ.get("GATEHOUSE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "gatehouse"


@dataclass(frozen=True)
class KubeTools:
    """Absolute paths of the four binaries."""

    etcd: str
    kube_apiserver: str
    kubectl: str
    helm: str


KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl")


def built_tool_paths() -> dict[str, Path]:
    """Where scripts/build-kube-tools puts each tool it builds, for the pinned versions: the
    Kubernetes commands, CoreDNS and Helm."""
    versions = kube_versions()
    kube_bin = cache_dir() / "kube" / versions["KUBERNETES_VERSION"] / "bin"
    return {
        **{command: kube_bin / command for command in KUBE_COMMANDS},
        "coredns": cache_dir() / "coredns" / versions["COREDNS_VERSION"] / "bin" / "coredns",
        "helm": cache_dir() / "helm" / versions["HELM_VERSION"] / "bin" / "helm",
    }


def kube_tool_paths() -> dict[str, str | None]:
    """Where each tool the API-server tests use is expected (None for etcd when it is not on
    PATH); no pytest side effects."""
    built = built_tool_paths()
    return {"etcd": find_binary("etcd"), **{name: str(built[name]) for name in ("kube-apiserver", "kubectl", "helm")}}


def kube_tools() -> KubeTools:
    """The pinned etcd, kube-apiserver, kubectl and helm, or end the test.

    Same rule as `require_binary`: a missing tool fails the test under CI=true and skips
    it elsewhere, with the hint to run scripts/build-kube-tools. kube-apiserver, kubectl
    and helm are taken only from the cache for the pinned versions, never from PATH (a
    kubectl on PATH is usually another version).
    """
    paths = kube_tool_paths()
    missing = [
        f"{name} ({path})" if path else name
        for name, path in paths.items()
        if path is None or not (os.path.isfile(path) and os.access(path, os.X_OK))
    ]
    if missing:
        message = f"Kubernetes test tools not found: {', '.join(missing)}: {KUBE_HINT}"
        if running_in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return KubeTools(
        etcd=str(paths["etcd"]),
        kube_apiserver=str(paths["kube-apiserver"]),
        kubectl=str(paths["kubectl"]),
        helm=str(paths["helm"]),
    )


# --- certificates and keys (openssl) ------------------------------------------------------


def _openssl(openssl: str, *args: str) -> None:
    result = subprocess.run([openssl, *args], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {result.stderr.strip()}")


def write_pki(directory: Path) -> dict[str, Path]:
    """A CA, a serving certificate for 127.0.0.1/localhost signed by it, and an RSA key
    for signing service-account tokens. Returns their paths by role."""
    openssl = require_binary("openssl", "apt-get install -y openssl")
    directory.mkdir(parents=True, exist_ok=True)
    paths = {
        "ca_key": directory / "ca.key",
        "ca_cert": directory / "ca.crt",
        "serving_key": directory / "apiserver.key",
        "serving_csr": directory / "apiserver.csr",
        "serving_cert": directory / "apiserver.crt",
        "service_account_key": directory / "service-account.key",
    }
    extensions = directory / "apiserver.ext"
    extensions.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes.default.svc\n"
    )
    _openssl(openssl, "genrsa", "-out", str(paths["ca_key"]), "2048")
    _openssl(
        openssl, "req", "-x509", "-new", "-key", str(paths["ca_key"]), "-sha256", "-days", "3650",
        "-subj", "/CN=gatehouse-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        "-out", str(paths["ca_cert"]),
    )  # fmt: skip
    _openssl(openssl, "genrsa", "-out", str(paths["serving_key"]), "2048")
    _openssl(
        openssl, "req", "-new", "-key", str(paths["serving_key"]), "-subj", "/CN=kube-apiserver",
        "-out", str(paths["serving_csr"]),
    )  # fmt: skip
    _openssl(
        openssl, "x509", "-req", "-in", str(paths["serving_csr"]), "-CA", str(paths["ca_cert"]),
        "-CAkey", str(paths["ca_key"]), "-CAcreateserial", "-sha256", "-days", "3650",
        "-extfile", str(extensions), "-out", str(paths["serving_cert"]),
    )  # fmt: skip
    _openssl(openssl, "genrsa", "-out", str(paths["service_account_key"]), "2048")
    return paths


# --- the API server -----------------------------------------------------------------------


class KubectlError(subprocess.CalledProcessError):
    """kubectl exited non-zero; the message includes its stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr: {self.stderr}\nstdout: {self.output}"


class KubeAPIServer:
    """etcd + kube-apiserver on free loopback ports, with an admin kubeconfig.

    `.url`, `.token` (admin, group system:masters), `.kubeconfig` (path), `.ca_file`,
    `.port`, `.etcd_url`; `kubectl(...)`, `helm(...)`, `api_client()`;
    `kill_apiserver()` / `stop_apiserver()` / `start_apiserver()` / `restart_apiserver()`
    restart only kube-apiserver, on the same port against the same etcd; `stop()` stops
    both (by pid: only processes this object started).
    """

    def __init__(
        self,
        *,
        log_dir: Path,
        tools: KubeTools,
        name: str,
        start_timeout: float,
        extra_apiserver_args: Sequence[str],
    ) -> None:
        self.log_dir = log_dir
        self.tools = tools
        self.name = name
        self.start_timeout = start_timeout
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.port = free_port()
        self.etcd_client_port = free_port()
        self.etcd_peer_port = free_port()
        self.token = secrets.token_hex(24)
        self.state_dir = log_dir / f"{name}-state"
        self.etcd_data_dir = self.state_dir / "etcd-data"
        self.cert_dir = self.state_dir / "certs"
        self.kubeconfig = self.state_dir / "admin.kubeconfig"
        self.token_file = self.state_dir / "tokens.csv"
        self.etcd: ManagedProcess | None = None
        self.apiserver: ManagedProcess | None = None
        self._pki: dict[str, Path] = {}

    @classmethod
    def start(
        cls,
        log_dir: Path,
        *,
        tools: KubeTools | None = None,
        name: str = "kube",
        start_timeout: float = 120.0,
        extra_apiserver_args: Sequence[str] = (),
    ) -> KubeAPIServer:
        """Start etcd and kube-apiserver; return once /readyz is ok and `default` exists.

        Logs: `<log_dir>/<name>-etcd.log`, `<log_dir>/<name>-apiserver.log`; state (etcd data,
        certificates, kubeconfig) under `<log_dir>/<name>-state/`.
        """
        server = cls(
            log_dir=log_dir,
            tools=tools or kube_tools(),
            name=name,
            start_timeout=start_timeout,
            extra_apiserver_args=extra_apiserver_args,
        )
        try:
            server._prepare()
            server._start_etcd()
            server.start_apiserver()
        except BaseException:
            server.stop()
            raise
        return server

    # --- addresses ---

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_client_port}"

    @property
    def ca_file(self) -> Path:
        return self._pki["ca_cert"]

    @property
    def env(self) -> dict[str, str]:
        """os.environ plus KUBECONFIG pointing at the admin kubeconfig (for child processes)."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    # --- setup ---

    def _prepare(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._pki = write_pki(self.cert_dir)
        self.token_file.write_text(f'{self.token},{ADMIN_USER},{ADMIN_USER},"{ADMIN_GROUP}"\n')
        self.token_file.chmod(0o600)
        self._write_kubeconfig()

    def _write_kubeconfig(self) -> None:
        context = f"{self.name}-admin"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": self.name,
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": ADMIN_USER, "user": {"token": self.token}}],
            "contexts": [
                {"name": context, "context": {"cluster": self.name, "user": ADMIN_USER, "namespace": "default"}}
            ],
            "current-context": context,
            "preferences": {},
        }
        # JSON is YAML: kubectl, helm and the Python client all read it.
        self.kubeconfig.write_text(json.dumps(config, indent=2) + "\n")
        self.kubeconfig.chmod(0o600)

    def _start_etcd(self) -> None:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        member = f"{self.name}-etcd"
        argv = [
            self.tools.etcd,
            "--name", member,
            "--data-dir", str(self.etcd_data_dir),
            "--listen-client-urls", self.etcd_url,
            "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{member}={peer}",
            "--initial-cluster-state", "new",
            "--initial-cluster-token", f"{member}-{secrets.token_hex(4)}",
            "--logger", "zap",
            "--log-outputs", "stderr",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}
        self.etcd = ManagedProcess.start(argv, name=f"{self.name}-etcd", log_dir=self.log_dir, env=env)
        self.etcd.wait_until(self.etcd_healthy, self.start_timeout, f"etcd health on {self.etcd_url}")

    def _apiserver_argv(self) -> list[str]:
        return [
            self.tools.kube_apiserver,
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={self.cert_dir}",
            f"--tls-cert-file={self._pki['serving_cert']}",
            f"--tls-private-key-file={self._pki['serving_key']}",
            f"--client-ca-file={self.ca_file}",
            f"--etcd-servers={self.etcd_url}",
            f"--token-auth-file={self.token_file}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={self.url}",
            f"--service-account-key-file={self._pki['service_account_key']}",
            f"--service-account-signing-key-file={self._pki['service_account_key']}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            # As envtest: no controller-manager creates service accounts, so pods could
            # never be admitted with the ServiceAccount plugin on.
            "--disable-admission-plugins=ServiceAccount",
            # The endpoint reconciler refuses a loopback advertise address: the `kubernetes`
            # Service still exists (10.0.0.1), with no endpoints.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            "--v=1",
            *self.extra_apiserver_args,
        ]

    # --- kube-apiserver lifecycle ---

    def start_apiserver(self) -> None:
        """Start kube-apiserver (on `.port`, against the running etcd) and wait until ready."""
        if self.apiserver is not None and self.apiserver.alive():
            raise RuntimeError(f"{self.name}-apiserver is already running (pid {self.apiserver.pid})")
        self.apiserver = ManagedProcess.start(
            self._apiserver_argv(), name=f"{self.name}-apiserver", log_dir=self.log_dir
        )
        self.apiserver.wait_until(self.ready, self.start_timeout, f"/readyz ok on {self.url}")
        # /readyz does not cover the bootstrap controller's `default` namespace.
        self.apiserver.wait_until(
            lambda: self.get_status("/api/v1/namespaces/default") == 200,
            self.start_timeout,
            "namespace default",
        )

    def stop_apiserver(self, timeout: float = 20.0) -> None:
        """Stop kube-apiserver gracefully (SIGTERM, SIGKILL after `timeout`); etcd keeps running."""
        if self.apiserver is not None:
            self.apiserver.stop(timeout)

    def kill_apiserver(self) -> None:
        """SIGKILL kube-apiserver at once (a crash); etcd keeps running."""
        if self.apiserver is not None:
            self.apiserver.kill()

    def restart_apiserver(self, *, crash: bool = False) -> None:
        """Stop (or with crash=True, SIGKILL) kube-apiserver and start it again on the same port."""
        if crash:
            self.kill_apiserver()
        else:
            self.stop_apiserver()
        self.start_apiserver()

    def stop(self) -> None:
        """Stop kube-apiserver, then etcd (each by its own pid)."""
        try:
            if self.apiserver is not None:
                self.apiserver.stop(20.0)
        finally:
            if self.etcd is not None:
                self.etcd.stop(10.0)

    # --- probes ---

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def request(
        self, method: str, path: str, body: Any = None, timeout: float = 10.0
    ) -> tuple[int, Any]:
        """One admin request to the API (JSON in and out); returns (status, decoded body)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Accept": "application/json",
                **({"Content-Type": "application/json"} if data is not None else {}),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.ssl_context()) as response:
                status, payload = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, payload = error.code, error.read()
        try:
            return status, json.loads(payload) if payload else None
        except ValueError:
            return status, payload.decode("utf-8", errors="replace")

    def get_status(self, path: str) -> int | None:
        """HTTP status of an admin GET, or None when the server does not answer."""
        try:
            return self.request("GET", path, timeout=2.0)[0]
        except (OSError, ssl.SSLError):
            return None

    def ready(self) -> bool:
        """True when GET /readyz answers 200 ok."""
        try:
            status, body = self.request("GET", "/readyz", timeout=2.0)
        except (OSError, ssl.SSLError):
            return False
        return status == 200 and body == "ok"

    def etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.etcd_url + "/health", timeout=2.0) as response:
                return bool(json.loads(response.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    # --- clients ---

    def kubectl(
        self,
        *args: str,
        input: str | None = None,  # noqa: A002 - same name as subprocess.run's
        check: bool = True,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl against this server as admin; raise KubectlError on failure
        unless check=False."""
        return self._run([self.tools.kubectl, f"--kubeconfig={self.kubeconfig}", *args], input, check, timeout)

    def wait_established(self, crd: str, timeout: float = 60.0) -> None:
        """Until the CRD is Established and its served versions are in discovery, which
        kubectl reads to map a kind: discovery can lag behind Established by a moment, and
        an apply in that moment fails with "no matches for kind". Not ``kubectl wait
        --for=condition=Established``: it fails at once ("status.conditions accessor error:
        <nil>") when it reads the CRD before the API server has written any condition, as a
        loaded machine shows."""
        deadline = time.monotonic() + timeout
        while True:
            status, found = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
            if status == 200 and self._established_and_discovered(found):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"crd/{crd} not Established and discovered after {timeout:.0f}s: {status} {found}")
            time.sleep(0.2)

    def _established_and_discovered(self, crd: dict[str, Any]) -> bool:
        conditions = {c.get("type"): c.get("status") for c in crd.get("status", {}).get("conditions") or []}
        if conditions.get("Established") != "True":
            return False
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        for version in (v["name"] for v in crd["spec"]["versions"] if v.get("served")):
            status, listing = self.request("GET", f"/apis/{group}/{version}")
            if status != 200 or plural not in {r.get("name") for r in listing.get("resources", [])}:
                return False
        return True

    def helm(
        self,
        *args: str,
        input: str | None = None,  # noqa: A002
        check: bool = True,
        timeout: float = 300.0,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned helm against this server as admin, with its cache/config/data dirs
        under the state dir (nothing read from or written to ~/.config/helm)."""
        helm_home = self.state_dir / "helm"
        helm_env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CACHE_HOME": str(helm_home / "cache"),
            "HELM_CONFIG_HOME": str(helm_home / "config"),
            "HELM_DATA_HOME": str(helm_home / "data"),
            **(env or {}),
        }
        return self._run([self.tools.helm, *args], input, check, timeout, env=helm_env)

    @staticmethod
    def _run(
        argv: list[str],
        input_text: str | None,
        check: bool,
        timeout: float,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            argv,
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            stdin=None if input_text is not None else subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, result.stdout, result.stderr)
        return result

    def api_client(self) -> Any:
        """A `kubernetes.client.ApiClient` for the admin kubeconfig (close it when done)."""
        from kubernetes import config

        new_client: Callable[..., Any] = config.new_client_from_config  # the package is untyped
        return new_client(config_file=str(self.kubeconfig))

    # --- context manager ---

    def __enter__(self) -> KubeAPIServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (
            f"KubeAPIServer(url={self.url!r}, etcd={self.etcd_url!r}, "
            f"apiserver={self.apiserver!r}, etcd_process={self.etcd!r})"
        )
