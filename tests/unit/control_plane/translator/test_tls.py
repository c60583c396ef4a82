"""TLS termination on the gateway listener beyond its golden case (testdata/in/tls.yaml pins
the transport socket, its policy, HSTS first in the chain and the Secret, and
tests/integration/test_envoy_validate.py runs it through `envoy --mode validate` with a
real certificate): none on a plain listener, the snapshot's link to the secret, and the
config file's `gateway.tls` (paths resolved like other config paths)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from google.protobuf import json_format

from control_plane.cache.snapshot import Snapshot
from control_plane.cache.types import ResourceType
from control_plane.config import ControlPlaneConfig
from control_plane.translator.from_config import gateway_settings
from control_plane.translator import RouteTranslator
from control_plane.translator.listeners import http_listener
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.tls import HSTS_FILTER, SECRET_NAME, TlsSettings


def write_self_signed(directory: Path, host: str = "localhost") -> tuple[Path, Path]:
    """A certificate and key for ``host`` (also for test_tls_envoy and test_envoy_validate)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def listener(settings: GatewaySettings) -> dict[str, Any]:
    data: dict[str, Any] = json_format.MessageToDict(http_listener(settings), preserving_proto_field_name=True)
    return data


def test_plain_listener_has_no_transport_socket() -> None:
    [chain] = listener(GatewaySettings())["filter_chains"]
    assert "transport_socket" not in chain
    names = [f["name"] for f in chain["filters"][0]["typed_config"]["http_filters"]]
    assert HSTS_FILTER not in names


def test_the_secret_is_an_sds_resource_the_listener_references() -> None:
    settings = GatewaySettings(tls=TlsSettings("/certs/tls.crt", "/certs/tls.key"))
    translation = RouteTranslator(settings).translate([])
    [secret] = translation.secrets
    assert (secret.type, secret.name) == (ResourceType.SECRET, SECRET_NAME)
    [listener_resource] = translation.listeners
    assert SECRET_NAME in listener_resource.references, "the snapshot checks the secret is there"
    assert RouteTranslator(GatewaySettings()).translate([]).secrets == ()


def test_a_listener_without_its_secret_is_an_inconsistent_snapshot() -> None:
    translation = RouteTranslator(GatewaySettings(tls=TlsSettings("/c/tls.crt", "/c/tls.key"))).translate([])
    parts: dict[str, Any] = {"clusters": (), "endpoints": (), "listeners": translation.listeners, "routes": translation.routes}
    assert Snapshot.build(**parts, secrets=translation.secrets).inconsistencies() == []
    [problem] = Snapshot.build(**parts).inconsistencies()
    assert SECRET_NAME in problem


def test_relative_paths_keep_a_secret_volumes_links(tmp_path: Path) -> None:
    """certs/tls.crt → ..data/tls.crt → ..2026_v1/tls.crt: Envoy must watch certs/, where
    the kubelet swaps ..data, not the timestamped directory that disappears on rotation."""
    volume = tmp_path / "certs"
    write_self_signed(volume / "..2026_v1")
    (volume / "..data").symlink_to("..2026_v1")
    (volume / "tls.crt").symlink_to("..data/tls.crt")
    (volume / "tls.key").symlink_to("..data/tls.key")
    config = ControlPlaneConfig.model_validate(
        {"gateway": {"tls": {"certFile": "certs/tls.crt", "keyFile": "certs/tls.key"}}, "sources": {}, "base_dir": str(tmp_path)}
    )
    settings = gateway_settings(config, config.gateway)
    assert settings.tls == TlsSettings(str(volume / "tls.crt"), str(volume / "tls.key"))


def test_config_paths_resolve_from_the_config_directory(tmp_path: Path) -> None:
    config = ControlPlaneConfig.model_validate(
        {
            "gateway": {"tls": {"certFile": "certs/tls.crt", "keyFile": "/abs/tls.key"}},
            "sources": {},
            "base_dir": str(tmp_path),
        }
    )
    settings = gateway_settings(config, config.gateway)
    assert settings.tls == TlsSettings(str(tmp_path / "certs" / "tls.crt"), "/abs/tls.key")
    plain = ControlPlaneConfig.model_validate({"sources": {}})
    assert gateway_settings(plain, plain.gateway).tls is None
