"""The configuration and command line of each cluster component.

Pure functions of the layout, the tools and the PKI: they write files and return argv,
they start nothing (cluster.py does, in order). Each setting that is not a component's
default says why it is set.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import layout
from .pki import Pki
from .tools import CNI_BIN_DIR, Tools

def etcd_argv(cluster: layout.Layout, tools: Tools) -> list[str]:
    # Plain HTTP on the namespace's loopback: only the API server (same namespace) connects.
    url = f"http://127.0.0.1:{layout.ETCD_CLIENT_PORT}"
    peer = f"http://127.0.0.1:{layout.ETCD_PEER_PORT}"
    return [
        tools.etcd,
        "--name", "gatehouse-node",
        "--data-dir", str(cluster.etcd_data),
        "--listen-client-urls", url,
        "--advertise-client-urls", url,
        "--listen-peer-urls", peer,
        "--initial-advertise-peer-urls", peer,
        "--initial-cluster", f"gatehouse-node={peer}",
        "--initial-cluster-state", "new",
        "--logger", "zap",
        "--log-outputs", "stderr",
    ]  # fmt: skip


def apiserver_argv(cluster: layout.Layout, tools: Tools, pki: Pki) -> list[str]:
    p = pki.path
    return [
        tools.kube_apiserver,
        f"--advertise-address={layout.NODE_IP}",
        f"--secure-port={layout.APISERVER_PORT}",
        f"--etcd-servers=http://127.0.0.1:{layout.ETCD_CLIENT_PORT}",
        f"--tls-cert-file={p('apiserver.crt')}",
        f"--tls-private-key-file={p('apiserver.key')}",
        f"--client-ca-file={pki.ca_cert}",
        f"--kubelet-client-certificate={p('apiserver-kubelet-client.crt')}",
        f"--kubelet-client-key={p('apiserver-kubelet-client.key')}",
        f"--kubelet-certificate-authority={pki.ca_cert}",
        # Reach the kubelet by the node's address: resolving its name would ask a resolver.
        "--kubelet-preferred-address-types=InternalIP",
        f"--service-account-issuer=https://kubernetes.default.svc.{layout.CLUSTER_DOMAIN}",
        f"--service-account-key-file={p('sa.pub')}",
        f"--service-account-signing-key-file={p('sa.key')}",
        f"--service-cluster-ip-range={layout.SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        f"--cert-dir={cluster.pki / 'apiserver-generated'}",
        "--profiling=false",
        "--v=1",
    ]


def _control_loop_flags(cluster: layout.Layout, pki: Pki, identity: str) -> list[str]:
    """What the controller manager and the scheduler share: their identity's kubeconfig
    (also for checking callers of their own HTTPS endpoint, on the namespace's loopback)."""
    kubeconfig = pki.kubeconfig(identity)
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--cert-dir={cluster.pki / f'{identity}-generated'}",
        "--leader-elect=false",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager_argv(cluster: layout.Layout, tools: Tools, pki: Pki) -> list[str]:
    return [
        tools.kube_controller_manager,
        *_control_loop_flags(cluster, pki, "controller-manager"),
        f"--cluster-cidr={layout.POD_CIDR}",
        "--allocate-node-cidrs=true",
        "--node-cidr-mask-size=24",
        f"--service-cluster-ip-range={layout.SERVICE_CIDR}",
        f"--cluster-signing-cert-file={pki.ca_cert}",
        f"--cluster-signing-key-file={pki.path('ca.key')}",
        f"--root-ca-file={pki.ca_cert}",
        f"--service-account-private-key-file={pki.path('sa.key')}",
        # Each controller with its own service account, as kubeadm runs it.
        "--use-service-account-credentials=true",
    ]


def scheduler_argv(cluster: layout.Layout, tools: Tools, pki: Pki) -> list[str]:
    return [tools.kube_scheduler, *_control_loop_flags(cluster, pki, "scheduler")]


def write_containerd_config(cluster: layout.Layout, pause_image: str) -> Path:
    """containerd's roots, socket and CNI paths all under the state directory."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    text = f"""# Written by scripts/cluster.
version = 2
root = "{cluster.containerd_root}"
state = "{cluster.containerd_state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{cluster.containerd_socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{cluster.state / 'containerd' / 'opt'}"

[{cri}]
  sandbox_image = "{pause_image}"
  # Without CAP_SYS_RESOURCE, a container's oom_score_adj may only be raised.
  restrict_oom_score_adj = true
  # Pod network namespaces under the state directory, not /var/run/netns.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  max_container_log_line_size = 16384

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  BinaryName = "runc"
  SystemdCgroup = false
  Root = "{cluster.state / 'containerd' / 'runc'}"

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{cluster.cni_conf_dir}"
  max_conf_num = 1

[{cri}.registry]
  config_path = ""
"""
    path = cluster.config / "containerd.toml"
    path.write_text(text)
    return path


def write_cni_config(cluster: layout.Layout) -> Path:
    """The bridge plugin: cni0 inside the namespace, addresses from host-local."""
    cluster.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "cniVersion": "0.4.0",
        "name": cluster.cni_network,
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                # No masquerade: nothing leaves the namespace, so pod addresses are never rewritten.
                "ipMasq": False,
                # A pod reaching itself through its Service.
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(cluster.cni_ipam_dir),
                    "ranges": [[{"subnet": layout.NODE_POD_CIDR, "gateway": layout.POD_GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    path = cluster.cni_conf_dir / "10-gatehouse.conflist"
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def containerd_argv(cluster: layout.Layout, config: Path) -> list[str]:
    return ["containerd", "--config", str(config)]


def write_kubelet_config(cluster: layout.Layout, pki: Pki) -> Path:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": layout.NODE_IP,
        "port": layout.KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki.ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki.path("kubelet-serving.crt")),
        "tlsPrivateKeyFile": str(pki.path("kubelet-serving.key")),
        "clusterDomain": layout.CLUSTER_DOMAIN,
        "clusterDNS": [layout.DNS_SERVICE_IP],
        "resolvConf": str(cluster.resolv_conf),
        "containerRuntimeEndpoint": f"unix://{cluster.containerd_socket}",
        # This machine's /sys/fs/cgroup is hybrid v1 (cluster-notes.md).
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        # Every pod's cgroups under one parent named for the cluster (down removes it).
        "cgroupRoot": cluster.cgroup_parent,
        "failSwapOn": False,
        "podLogsDir": str(cluster.pod_logs),
        "registerNode": True,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        # The images are imported, never pulled (pullPolicy Never): never collect them,
        # and do not evict pods for a shared machine's disk or memory use.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "maxPods": 110,
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
    }
    path = cluster.config / "kubelet.yaml"
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def kubelet_argv(cluster: layout.Layout, tools: Tools, pki: Pki, config: Path) -> list[str]:
    return [
        tools.kubelet,
        f"--config={config}",
        f"--kubeconfig={pki.kubeconfig('kubelet')}",
        f"--root-dir={cluster.kubelet_root}",
        f"--node-ip={layout.NODE_IP}",
        f"--hostname-override={layout.NODE_NAME}",
        "--v=1",
    ]


def write_kube_proxy_config(cluster: layout.Layout, pki: Pki) -> Path:
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(pki.kubeconfig("kube-proxy"))},
        "mode": "iptables",
        "clusterCIDR": layout.POD_CIDR,
        "hostnameOverride": layout.NODE_NAME,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        # Leave the kernel's conntrack settings alone (the table is shared with the host).
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"minSyncPeriod": "0s", "syncPeriod": "30s"},
    }
    path = cluster.config / "kube-proxy.yaml"
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def kube_proxy_argv(tools: Tools, config: Path) -> list[str]:
    return [tools.kube_proxy, f"--config={config}", "--v=1"]


def write_corefile(cluster: layout.Layout, pki: Pki) -> Path:
    """Cluster names only: no forward plugin, so no query ever leaves the namespace."""
    text = f""".:53 {{
    bind {layout.NODE_IP}
    errors
    health 127.0.0.1:{layout.COREDNS_HEALTH_PORT}
    ready 127.0.0.1:8181
    kubernetes {layout.CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {pki.kubeconfig('coredns')} coredns@{cluster.name}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
}}
"""
    path = cluster.config / "Corefile"
    path.write_text(text)
    return path


def coredns_argv(tools: Tools, corefile: Path) -> list[str]:
    return [tools.coredns, "-conf", str(corefile)]


def bootstrap_manifests() -> str:
    """What super-admin creates once: the admin group's binding, the API server's kubelet
    access, CoreDNS's read access and the kube-dns Service in front of it."""
    from .pki import ADMIN_GROUP, APISERVER_KUBELET_CLIENT, COREDNS_USER

    objects = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "gatehouse-cluster-admins"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": ADMIN_GROUP}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "kube-apiserver-kubelet-api-admin"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": APISERVER_KUBELET_CLIENT}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "system:coredns"},
         "rules": [
             {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
             {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": COREDNS_USER}]},
        # CoreDNS runs on the node (a process in the namespace), so its Service has no
        # selector and one EndpointSlice naming the node's address.
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
         "spec": {"clusterIP": layout.DNS_SERVICE_IP, "ports": [
             {"name": "dns", "port": 53, "targetPort": 53, "protocol": "UDP"},
             {"name": "dns-tcp", "port": 53, "targetPort": 53, "protocol": "TCP"},
         ]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "kube-dns-node", "namespace": "kube-system", "labels": {
             "kubernetes.io/service-name": "kube-dns", "endpointslice.kubernetes.io/managed-by": "scripts-cluster.gatehouse.io"}},
         "addressType": "IPv4",
         "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}],
         "endpoints": [{"addresses": [layout.NODE_IP], "conditions": {"ready": True}}]},
    ]
    return "\n".join(json.dumps(obj) for obj in objects) + "\n"
