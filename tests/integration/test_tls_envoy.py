"""TLS termination through real Envoy: a self-signed certificate in files, `gateway.tls` in
the control plane's config, and real handshakes from Python's `ssl`: TLS 1.2 and 1.3 work,
TLS 1.1 is refused, HTTPS responses carry HSTS, plain HTTP on the TLS port fails, and a
certificate rotated the way the kubelet updates a Secret volume is served without a restart."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
from pathlib import Path

import pytest

from control_plane.translator.tls import HSTS_VALUE
from tests.harness.gateway import GatewayStack
from tests.harness.route_repo import route_doc
from tests.harness.http_client import wait_for
from tests.integration.conftest import StackFactory
from tests.unit.control_plane.translator.test_tls import write_self_signed

pytestmark = pytest.mark.envoy

SERVICE = "svc-a"


def client_context(cert: Path, *, minimum: ssl.TLSVersion, maximum: ssl.TLSVersion) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cert))
    context.minimum_version = minimum
    context.maximum_version = maximum
    return context


def https_get(port: int, context: ssl.SSLContext, path: str = "/tls") -> tuple[int, dict[str, str], str]:
    connection = http.client.HTTPSConnection("localhost", port, context=context, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        version = connection.sock.version() if isinstance(connection.sock, ssl.SSLSocket) else ""
        return response.status, {k.lower(): v for k, v in response.getheaders()}, version or ""
    finally:
        connection.close()


@pytest.fixture
def tls_stack(make_stack: StackFactory, tmp_path: Path) -> tuple[GatewayStack, Path]:
    cert, key = write_self_signed(tmp_path / "certs")
    stack = make_stack(upstreams=(SERVICE,))
    # Relative paths resolve from the config file's directory, like every other path there.
    relative_key = os.path.relpath(key, stack.control_plane.config_path.parent)
    stack.configure_gateway(tls={"certFile": str(cert), "keyFile": relative_key})
    route = route_doc("tls", {"auth": {"required": False}, "match": {"pathPrefix": "/tls"}, "backends": [{"service": SERVICE, "port": 8080}]})
    stack.commit_routes({"r.yaml": [route]})
    stack.start()
    tls12 = client_context(cert, minimum=ssl.TLSVersion.TLSv1_2, maximum=ssl.TLSVersion.TLSv1_3)

    def ready() -> bool:
        try:
            return https_get(stack.listener_port, tls12)[0] == 200
        except (OSError, ssl.SSLError):
            return False

    wait_for(ready, 15.0, "HTTPS /tls → 200")
    return stack, cert


def test_tls_1_2_and_1_3_work_and_carry_hsts(tls_stack: tuple[GatewayStack, Path]) -> None:
    stack, cert = tls_stack
    for version, name in ((ssl.TLSVersion.TLSv1_2, "TLSv1.2"), (ssl.TLSVersion.TLSv1_3, "TLSv1.3")):
        context = client_context(cert, minimum=version, maximum=version)
        status, headers, negotiated = https_get(stack.listener_port, context)
        assert (status, negotiated) == (200, name)
        assert headers["strict-transport-security"] == HSTS_VALUE
    # The gateway's own replies (here a 404) carry HSTS too.
    context = client_context(cert, minimum=ssl.TLSVersion.TLSv1_2, maximum=ssl.TLSVersion.TLSv1_3)
    status, headers, _ = https_get(stack.listener_port, context, "/nowhere")
    assert status == 404 and headers["strict-transport-security"] == HSTS_VALUE


def test_alpn_offers_h2(tls_stack: tuple[GatewayStack, Path]) -> None:
    stack, cert = tls_stack
    context = client_context(cert, minimum=ssl.TLSVersion.TLSv1_2, maximum=ssl.TLSVersion.TLSv1_3)
    context.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", stack.listener_port), timeout=5) as raw, context.wrap_socket(raw, server_hostname="localhost") as tls:
        assert tls.selected_alpn_protocol() == "h2"


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_tls_1_1_is_refused(tls_stack: tuple[GatewayStack, Path]) -> None:
    stack, cert = tls_stack
    context = client_context(cert, minimum=ssl.TLSVersion.TLSv1_1, maximum=ssl.TLSVersion.TLSv1_1)
    # The local OpenSSL's default security level forbids TLS 1.1 outright; level 0 lets the
    # client offer it, so the refusal below is the server's.
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with pytest.raises((ssl.SSLError, ConnectionResetError)) as refused:
        https_get(stack.listener_port, context)
    # Envoy answers a TLS 1.1 ClientHello with a protocol_version alert.
    print("refused:", refused.value)
    assert "PROTOCOL_VERSION" in str(refused.value).upper() or "VERSION" in str(refused.value).upper(), refused.value


def test_plain_http_on_the_tls_port_fails(tls_stack: tuple[GatewayStack, Path]) -> None:
    stack, _ = tls_stack
    with pytest.raises((OSError, http.client.HTTPException)):
        stack.get("/tls")


def presented_certificate(port: int) -> bytes:
    """The DER certificate the listener presents (no verification: only which one it is)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def secret_volume_version(volume: Path, name: str) -> Path:
    """Lay out a new version the way the kubelet updates a Secret volume: the files go into
    a fresh timestamped directory, then the `..data` link is swapped to it by one rename."""
    version = volume / name
    write_self_signed(version)
    staging = volume / "..data_tmp"
    staging.symlink_to(name)
    os.replace(staging, volume / "..data")
    for file in ("tls.crt", "tls.key"):
        if not (volume / file).is_symlink():
            (volume / file).symlink_to(f"..data/{file}")
    return version / "tls.crt"


def test_a_rotated_secret_volume_is_served_without_a_restart(make_stack: StackFactory, tmp_path: Path, protocol: str) -> None:
    """The certificate reaches Envoy over SDS (file names, on either ADS protocol): only
    then does Envoy watch the directory. An inlined certificate is never re-read."""
    volume = tmp_path / "secret-volume"
    volume.mkdir()
    first = secret_volume_version(volume, "..2026_12_03_v1")
    stack = make_stack(upstreams=(SERVICE,), delta=protocol == "delta")
    stack.configure_gateway(tls={"certFile": str(volume / "tls.crt"), "keyFile": str(volume / "tls.key")})
    stack.commit_routes({"r.yaml": [route_doc("tls", {"auth": {"required": False}, "match": {"pathPrefix": "/tls"}, "backends": [{"service": SERVICE, "port": 8080}]})]})
    stack.start()

    def presents(cert: Path) -> bool:
        try:
            return presented_certificate(stack.listener_port) == ssl.PEM_cert_to_DER_cert(cert.read_text())
        except OSError:
            return False

    wait_for(lambda: presents(first), 15.0, "the first certificate")
    envoy_pid = stack.envoy.pid
    second = secret_volume_version(volume, "..2026_12_03_v2")
    wait_for(lambda: presents(second), 15.0, "the rotated certificate")
    assert stack.envoy.pid == envoy_pid, "Envoy was not restarted"
    # And the new pair really serves requests, verified against the new certificate.
    context = client_context(second, minimum=ssl.TLSVersion.TLSv1_2, maximum=ssl.TLSVersion.TLSv1_3)
    assert https_get(stack.listener_port, context)[0] == 200


def test_a_missing_certificate_is_an_sds_nack_naming_the_path(make_stack: StackFactory, tmp_path: Path) -> None:
    """The control plane cannot see Envoy's files: Envoy refuses the secret, the NACK names
    the file, and no listener half-configured with TLS starts serving."""
    missing = tmp_path / "nowhere"
    stack = make_stack(upstreams=(SERVICE,))
    stack.configure_gateway(tls={"certFile": str(missing / "tls.crt"), "keyFile": str(missing / "tls.key")})
    stack.commit_routes({"r.yaml": [route_doc("tls", {"auth": {"required": False}, "match": {"pathPrefix": "/tls"}, "backends": [{"service": SERVICE, "port": 8080}]})]})
    stack.start(wait_path=None)

    def nacked() -> list[dict[str, object]]:
        return [n for n in stack.control_plane.status()["nacks"] if n["type"] == "SDS"]

    wait_for(lambda: bool(nacked()), 15, "an SDS NACK in /status")
    assert str(missing) in str(nacked()[0]["error"]), nacked()[0]
    assert stack.control_plane.metric("gatehouse_xds_nacks_total", type="SDS") >= 1
    with pytest.raises((OSError, http.client.HTTPException)):
        stack.get("/tls")
