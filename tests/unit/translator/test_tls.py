"""TLS termination on the gateway listener: the transport socket, its policy, HSTS, and the
config file's `gateway.tls` (paths resolved like other config paths). The listener is also
checked by a real `envoy --mode validate`, with a real certificate."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from google.protobuf import json_format

from control_plane.cache.snapshot import Snapshot
from control_plane.cache.types import ResourceType
from control_plane.config import ControlPlaneConfig
from control_plane.render import resource_data
from control_plane.translator.from_config import gateway_settings
from control_plane.translator import RouteTranslator
from control_plane.translator.listeners import http_listener
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.tls import (
    ALPN_PROTOCOLS,
    CIPHER_SUITES,
    DOWNSTREAM_TLS_TYPE,
    HSTS_FILTER,
    HSTS_HEADER,
    HSTS_VALUE,
    SECRET_NAME,
    TlsSettings,
)
from tests.harness.envoy import envoy_binary, validate_config


def write_self_signed(directory: Path, host: str = "localhost") -> tuple[Path, Path]:
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


def test_tls_listener() -> None:
    [chain] = listener(GatewaySettings(tls=TlsSettings("/certs/tls.crt", "/certs/tls.key")))["filter_chains"]
    socket = chain["transport_socket"]
    assert socket["name"] == "envoy.transport_sockets.tls"
    context = socket["typed_config"]
    assert context["@type"] == DOWNSTREAM_TLS_TYPE
    common = context["common_tls_context"]
    assert common["tls_params"] == {"tls_minimum_protocol_version": "TLSv1_2", "cipher_suites": list(CIPHER_SUITES)}
    assert common["alpn_protocols"] == list(ALPN_PROTOCOLS) == ["h2", "http/1.1"]
    # The certificate comes over SDS (on the ADS stream): only then does Envoy honour
    # watched_directory and pick up a rotated pair.
    assert "tls_certificates" not in common
    assert common["tls_certificate_sds_secret_configs"] == [
        {"name": SECRET_NAME, "sds_config": {"ads": {}, "resource_api_version": "V3", "initial_fetch_timeout": "0s"}}
    ]
    first = chain["filters"][0]["typed_config"]["http_filters"][0]
    assert first["name"] == HSTS_FILTER
    [mutation] = first["typed_config"]["mutations"]["response_mutations"]
    assert mutation["append"]["header"] == {"key": HSTS_HEADER, "value": HSTS_VALUE}
    assert HSTS_VALUE == "max-age=31536000; includeSubDomains"


def test_the_secret_names_the_files_and_watches_their_directory() -> None:
    settings = GatewaySettings(tls=TlsSettings("/certs/tls.crt", "/certs/tls.key"))
    translation = RouteTranslator(settings).translate([])
    [secret] = translation.secrets
    assert (secret.type, secret.name) == (ResourceType.SECRET, SECRET_NAME)
    assert resource_data(secret) == {
        "name": SECRET_NAME,
        "tls_certificate": {
            "certificate_chain": {"filename": "/certs/tls.crt"},
            "private_key": {"filename": "/certs/tls.key"},
            "watched_directory": {"path": "/certs"},
        },
    }
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


@pytest.mark.envoy
def test_envoy_accepts_the_tls_listener(tmp_path: Path) -> None:
    cert, key = write_self_signed(tmp_path / "certs")
    data = listener(GatewaySettings(tls=TlsSettings(str(cert), str(key))))
    hcm = data["filter_chains"][0]["filters"][0]["typed_config"]
    del hcm["rds"]
    hcm["route_config"] = {"name": "local", "virtual_hosts": []}
    # The secret as a static one (no ADS here): same Secret message, looked up by name.
    common = data["filter_chains"][0]["transport_socket"]["typed_config"]["common_tls_context"]
    common["tls_certificate_sds_secret_configs"] = [{"name": SECRET_NAME}]
    [secret] = RouteTranslator(GatewaySettings(tls=TlsSettings(str(cert), str(key)))).translate([]).secrets
    bootstrap = {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
        "static_resources": {"listeners": [data], "secrets": [resource_data(secret)]},
    }
    path = tmp_path / "bootstrap.json"
    path.write_text(json.dumps(bootstrap))
    result = validate_config(envoy_binary(), path)
    assert result.returncode == 0, result.stdout + result.stderr
