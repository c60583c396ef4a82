"""The cluster's certificates, keys and kubeconfigs: one identity per component.

As kubeadm lays them out: one CA signs the API server's serving certificate, the
kubelet's serving certificate and a client certificate per component, each with the
user and groups Kubernetes' bootstrap RBAC policy expects (system:kube-controller-manager,
system:kube-scheduler, system:node:<node> in system:nodes, system:kube-proxy); the API
server reaches kubelets with its own client certificate (bound to
system:kubelet-api-admin); pods get service-account tokens signed with a separate key.
Only ``super-admin`` is in system:masters, and it is used once, to bind the ``admin``
identity's group to cluster-admin (as kubeadm has since 1.29); everything afterwards,
tests included, uses ``admin``. ECDSA P-256 keys: generated in milliseconds.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from . import layout

ADMIN_GROUP = "gatehouse:cluster-admins"
APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client"
COREDNS_USER = "system:coredns"


@dataclass(frozen=True)
class Identity:
    """A client certificate's subject: the user (CN) and its groups (O)."""

    file: str
    user: str
    groups: tuple[str, ...] = ()


CLIENTS = (
    Identity("super-admin", "gatehouse-super-admin", ("system:masters",)),
    Identity("admin", "gatehouse-admin", (ADMIN_GROUP,)),
    Identity("controller-manager", "system:kube-controller-manager"),
    Identity("scheduler", "system:kube-scheduler"),
    Identity("kubelet", f"system:node:{layout.NODE_NAME}", ("system:nodes",)),
    Identity("kube-proxy", "system:kube-proxy"),
    Identity("coredns", COREDNS_USER),
    Identity("apiserver-kubelet-client", APISERVER_KUBELET_CLIENT),
)
KUBECONFIGS = ("super-admin", "admin", "controller-manager", "scheduler", "kubelet", "kube-proxy", "coredns")


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    path.chmod(0o600)


def _name(common_name: str, groups: tuple[str, ...] = ()) -> x509.Name:
    return x509.Name([
        *(x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])


def _key_usage(*, key_cert_sign: bool = False, crl_sign: bool = False, key_encipherment: bool = False) -> x509.KeyUsage:
    """digitalSignature plus the given usages."""
    return x509.KeyUsage(digital_signature=True, key_cert_sign=key_cert_sign, crl_sign=crl_sign, key_encipherment=key_encipherment,
                         content_commitment=False, data_encipherment=False, key_agreement=False, encipher_only=False, decipher_only=False)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
    )


class Pki:
    """Writes and names the files under ``layout.pki``."""

    def __init__(self, cluster: layout.Layout) -> None:
        self.dir = cluster.pki
        self.cluster = cluster

    def path(self, name: str) -> Path:
        return self.dir / name

    @property
    def ca_cert(self) -> Path:
        return self.path("ca.crt")

    def kubeconfig(self, identity: str) -> Path:
        return self.cluster.config / f"{identity}.kubeconfig"

    def exists(self) -> bool:
        return all(self.kubeconfig(name).is_file() for name in KUBECONFIGS) and self.path("sa.key").is_file()

    def write(self) -> None:
        """Every key, certificate and kubeconfig (once per state directory)."""
        if self.exists():
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cluster.config.mkdir(parents=True, exist_ok=True)
        ca_key = _key()
        ca_name = _name(f"{self.cluster.name}-cluster-ca")
        ca = (
            _builder(ca_name, ca_name, ca_key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        _write_key(self.path("ca.key"), ca_key)
        self.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))

        def issue(file: str, subject: x509.Name, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]) -> None:
            key = _key()
            builder = (
                _builder(subject, ca_name, key.public_key())
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(_key_usage(key_encipherment=True), critical=True)
                .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            )
            if sans:
                builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
            _write_key(self.path(f"{file}.key"), key)
            self.path(f"{file}.crt").write_bytes(builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))

        ips = [x509.IPAddress(ipaddress.ip_address(a)) for a in (layout.NODE_IP, layout.KUBERNETES_SERVICE_IP, "127.0.0.1")]
        dns = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", f"kubernetes.default.svc.{layout.CLUSTER_DOMAIN}", "localhost"]
        issue("apiserver", _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, [*ips, *(x509.DNSName(d) for d in dns)])
        issue("kubelet-serving", _name(f"system:node:{layout.NODE_NAME}", ("system:nodes",)), ExtendedKeyUsageOID.SERVER_AUTH,
              [x509.IPAddress(ipaddress.ip_address(layout.NODE_IP)), x509.DNSName(layout.NODE_NAME)])
        for identity in CLIENTS:
            issue(identity.file, _name(identity.user, identity.groups), ExtendedKeyUsageOID.CLIENT_AUTH, [])

        sa_key = _key()
        _write_key(self.path("sa.key"), sa_key)
        self.path("sa.pub").write_bytes(sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

        server = f"https://{layout.NODE_IP}:{layout.APISERVER_PORT}"
        for name in KUBECONFIGS:
            self._write_kubeconfig(name, server)

    def _write_kubeconfig(self, identity: str, server: str) -> None:
        context = f"{identity}@{self.cluster.name}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.cluster.name, "cluster": {"server": server, "certificate-authority": str(self.ca_cert)}}],
            "users": [{"name": identity, "user": {
                "client-certificate": str(self.path(f"{identity}.crt")),
                "client-key": str(self.path(f"{identity}.key")),
            }}],
            "contexts": [{"name": context, "context": {"cluster": self.cluster.name, "user": identity}}],
            "current-context": context,
        }
        path = self.kubeconfig(identity)
        path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
        path.chmod(0o600)
