"""The cluster's network namespace: every address, route and rule of the cluster is in it.

``create`` makes the namespace with ``ip netns add`` and, inside it only: ``lo`` up, a
bridge ``gh-node`` with no ports holding the node's address (this machine's kernel has
no dummy interfaces; a bridge is the other device that can hold an address without a
link out), and one route, the Service range, on that bridge, so that a process in the
namespace can connect to a ClusterIP (kube-proxy's DNAT runs after the route lookup).
There is no default route: nothing in the namespace can reach anything outside it.
The CNI bridge plugin adds ``cni0`` and the pods' veths when pods start, also inside.
Nothing is added to the root namespace.

Processes run inside with ``ip netns exec`` (which also bind-mounts
/etc/netns/<ns>/resolv.conf over /etc/resolv.conf: names resolve through CoreDNS), except
containerd and kubelet: ``ip netns exec`` gives its command a fresh /sys in which
/sys/fs/cgroup is empty, so those two use ``nsenter --net`` (the network namespace only)
and get the resolv.conf by their own settings.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shutil
import subprocess
from collections.abc import Sequence

from . import layout


class NetworkError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {result.stderr.strip() or f'exit {result.returncode}'}")
    return result


def exists(cluster: layout.Layout) -> bool:
    return cluster.netns_path.exists()


def create(cluster: layout.Layout) -> None:
    """The namespace, its node address and Service route, and its resolv.conf."""
    if not exists(cluster):
        _ip("netns", "add", cluster.netns)
    inside = ("netns", "exec", cluster.netns, "ip")

    def configure(*args: str) -> None:
        _ip(*inside, *args)

    configure("link", "set", "lo", "up")
    if _ip(*inside, "link", "show", layout.NODE_DEVICE, check=False).returncode != 0:
        configure("link", "add", layout.NODE_DEVICE, "type", "bridge")
    configure("addr", "replace", f"{layout.NODE_IP}/32", "dev", layout.NODE_DEVICE)
    configure("link", "set", layout.NODE_DEVICE, "up")
    configure("route", "replace", layout.SERVICE_CIDR, "dev", layout.NODE_DEVICE)
    # Pods and Services: forwarding between cni0's ports, and bridged replies seen by
    # iptables (kube-proxy's un-DNAT of a pod answering a pod on the same bridge).
    sysctl(cluster, "net.ipv4.ip_forward", "1")
    sysctl(cluster, "net.bridge.bridge-nf-call-iptables", "1")
    write_resolv_conf(cluster)


def sysctl(cluster: layout.Layout, key: str, value: str) -> None:
    _ip("netns", "exec", cluster.netns, "sysctl", "-q", "-w", f"{key}={value}")


def resolv_conf_text() -> str:
    search = " ".join(f"{ns}.svc.{layout.CLUSTER_DOMAIN}" for ns in ("default",))
    return (
        "# Written by scripts/cluster: names resolve through the cluster's CoreDNS only.\n"
        f"nameserver {layout.DNS_SERVICE_IP}\n"
        f"search {search} svc.{layout.CLUSTER_DOMAIN} {layout.CLUSTER_DOMAIN}\n"
        "options ndots:5 timeout:1 attempts:2\n"
    )


def write_resolv_conf(cluster: layout.Layout) -> None:
    """For kubelet (--resolv-conf) and for ``ip netns exec`` (/etc/netns/<ns>/resolv.conf)."""
    cluster.config.mkdir(parents=True, exist_ok=True)
    cluster.resolv_conf.write_text(resolv_conf_text())
    cluster.netns_etc.mkdir(parents=True, exist_ok=True)
    (cluster.netns_etc / "resolv.conf").write_text(resolv_conf_text())


def exec_argv(cluster: layout.Layout, argv: Sequence[str]) -> list[str]:
    """``argv`` inside the namespace with its resolv.conf (exec'd: the pid stays the child's)."""
    return ["ip", "netns", "exec", cluster.netns, *argv]


def nsenter_argv(cluster: layout.Layout, argv: Sequence[str]) -> list[str]:
    """``argv`` in the namespace's network only, keeping the host's /sys (cgroups)."""
    return ["nsenter", f"--net={cluster.netns_path}", "--", *argv]


def pids(cluster: layout.Layout) -> list[int]:
    if not exists(cluster):
        return []
    result = _ip("netns", "pids", cluster.netns, check=False)
    return [int(word) for word in result.stdout.split()]


def remove(cluster: layout.Layout) -> None:
    """The namespace (after its processes are gone) and /etc/netns/<ns>."""
    if exists(cluster):
        _ip("netns", "del", cluster.netns, check=False)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(cluster.netns_path)  # left when `ip netns del` failed half-way
    shutil.rmtree(cluster.netns_etc, ignore_errors=True)
    with contextlib.suppress(OSError):
        cluster.netns_etc.parent.rmdir()  # /etc/netns, when no other namespace has a file there


_CLONE_NEWNET = 0x40000000


def enter(cluster: layout.Layout) -> None:
    """Move the calling thread (only it) into the cluster's namespace.

    setns(2) on a network namespace applies to the calling thread; a socket keeps the
    namespace it was created in. So a thread pool whose threads called this opens its
    connections inside the cluster while the rest of the process stays outside (the
    test process reaches ClusterIPs and pod IPs this way, without a process per request).
    Name lookups in such a thread still read the machine's /etc/resolv.conf: use addresses.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(cluster.netns_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise NetworkError(f"setns({cluster.netns_path}): {os.strerror(errno)}")
    finally:
        os.close(fd)


def executor(cluster: layout.Layout, workers: int = 4) -> concurrent.futures.ThreadPoolExecutor:
    """Threads inside the cluster's namespace (see ``enter``)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"netns-{cluster.name}",
                                                 initializer=enter, initargs=(cluster,))
