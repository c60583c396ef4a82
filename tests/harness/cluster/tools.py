"""The binaries a cluster runs, and where each comes from.

The Kubernetes components, CoreDNS and Helm are built by scripts/build-kube-tools into
the cache (tools.env lists them); etcd, containerd, runc, the CNI plugins, iptables,
podman, debootstrap and catatonit are Debian packages (scripts/setup test installs them).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.harness.kubernetes import built_tool_paths

CNI_BIN_DIR = Path("/usr/lib/cni")
DEBIAN_PACKAGES = {
    # command (or absolute path) → the Debian package that provides it
    "etcd": "etcd-server",
    "containerd": "containerd",
    "containerd-shim-runc-v2": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    str(CNI_BIN_DIR / "bridge"): "containernetworking-plugins",
    str(CNI_BIN_DIR / "host-local"): "containernetworking-plugins",
    str(CNI_BIN_DIR / "loopback"): "containernetworking-plugins",
    "iptables": "iptables",
    "conntrack": "conntrack",
    "podman": "podman",
    "debootstrap": "debootstrap",
    "catatonit": "catatonit",
    "nsenter": "util-linux",
    "ip": "iproute2",
}


class MissingTool(RuntimeError):
    pass


@dataclass(frozen=True)
class Tools:
    kube_apiserver: str
    kube_controller_manager: str
    kube_scheduler: str
    kubelet: str
    kube_proxy: str
    kubectl: str
    coredns: str
    helm: str
    etcd: str


def which(name: str) -> str | None:
    if name.startswith("/"):
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def missing_packages() -> list[str]:
    return sorted({package for command, package in DEBIAN_PACKAGES.items() if which(command) is None})


def find() -> Tools:
    """Every tool, or MissingTool naming what to run."""
    missing = missing_packages()
    if missing:
        raise MissingTool(f"Debian packages missing: {' '.join(missing)} (scripts/setup test installs them)")
    built = {name.replace("-", "_"): path for name, path in built_tool_paths().items()}
    absent = [str(path) for path in built.values() if not os.access(path, os.X_OK)]
    if absent:
        raise MissingTool(f"not built: {', '.join(absent)} (run scripts/build-kube-tools)")
    etcd = which("etcd")
    assert etcd is not None
    return Tools(**{key: str(path) for key, path in built.items()}, etcd=etcd)
