"""A single-node Kubernetes cluster from real components, for ``make cluster`` and the
cluster e2e tests (tests/e2e/cluster/): etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kubelet, kube-proxy, CoreDNS, containerd, runc and the CNI bridge, all in
one network namespace made for it, with images built locally from the Dockerfile.
docs/cluster.md describes it; ``scripts/cluster up|down|exec|status`` drives it.
"""

from .cluster import Cluster, ClusterError, KubectlError

__all__ = ["Cluster", "ClusterError", "KubectlError"]
