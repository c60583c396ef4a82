"""Where one cluster lives: its name, network namespace, addresses and state directory.

Every path and address the other modules use comes from here, so ``up`` and ``down``
(which may run in another process, after an interrupted ``up``) agree on what exists.
Inside the namespace the addresses are fixed (no other cluster can see them); only the
names outside it (namespace, state directory, cgroup parent, CNI network) carry the
cluster's name so two clusters on one machine never share anything.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_NAME = "gatehouse"
NODE_NAME = "gatehouse-node"
NODE_DEVICE = "gh-node"
"""A dummy interface inside the namespace holding the node's address (no link out)."""
NODE_IP = "10.77.0.1"
POD_CIDR = "10.244.0.0/16"
NODE_POD_CIDR = "10.244.0.0/24"
POD_GATEWAY = "10.244.0.1"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
APISERVER_PORT = 6443
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
KUBELET_PORT = 10250
COREDNS_HEALTH_PORT = 8080
_NAME = re.compile(r"[a-z][a-z0-9-]{0,20}")


def state_root() -> Path:
    """``$GATEHOUSE_CLUSTER_DIR``, else /var/lib/gatehouse-cluster: on disk (images are large)."""
    configured = os.environ.get("GATEHOUSE_CLUSTER_DIR")
    return Path(configured) if configured else Path("/var/lib/gatehouse-cluster")


@dataclass(frozen=True)
class Layout:
    """The paths and names of the cluster called ``name``."""

    name: str

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"cluster name {self.name!r}: lowercase letters, digits and dashes, at most 21, starting with a letter")

    # --- outside the namespace: unique per cluster ---

    @property
    def netns(self) -> str:
        return f"{self.name}-cluster"

    @property
    def netns_path(self) -> Path:
        return Path("/run/netns") / self.netns

    @property
    def netns_etc(self) -> Path:
        """``ip netns exec`` bind-mounts the files here over /etc (resolv.conf)."""
        return Path("/etc/netns") / self.netns

    @property
    def state(self) -> Path:
        return state_root() / self.name

    @property
    def cgroup_parent(self) -> str:
        """kubelet's cgroupRoot: every pod's cgroups sit under it in each hierarchy."""
        return f"/{self.name}-cluster"

    @property
    def cni_network(self) -> str:
        """The CNI network name; libcni's result cache (/var/lib/cni/results) is keyed by it."""
        return f"{self.name}-pods"

    # --- inside the state directory ---

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def pids(self) -> Path:
        return self.state / "pids"

    @property
    def config(self) -> Path:
        return self.state / "config"

    @property
    def etcd_data(self) -> Path:
        return self.state / "etcd"

    @property
    def containerd_root(self) -> Path:
        return self.state / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.state / "containerd" / "state"

    @property
    def containerd_socket(self) -> Path:
        return self.state / "containerd" / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.state / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.state / "pod-logs"

    @property
    def cni_conf_dir(self) -> Path:
        return self.state / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.state / "cni" / "ipam"

    @property
    def helm_home(self) -> Path:
        return self.state / "helm"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.config / "admin.kubeconfig"

    @property
    def resolv_conf(self) -> Path:
        return self.config / "resolv.conf"

    @property
    def shared_dirs(self) -> tuple[Path, ...]:
        """Directories outside the state directory that containerd, libcni and the kubelet
        create at fixed paths (containerd's shim sockets in /run/containerd/s, libcni's
        result cache, the kubelet's container-log links). ``up`` records which of them
        already existed; ``down`` removes the others once they are empty."""
        return (Path("/run/containerd/s"), Path("/run/containerd"), Path("/var/lib/cni/results"), Path("/var/lib/cni"),
                Path("/var/log/containers"))

    @property
    def marker(self) -> Path:
        """Written first by ``up``: ``down`` finds a cluster's state by it, even half made."""
        return self.state / "cluster.json"
