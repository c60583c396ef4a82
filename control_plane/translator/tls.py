"""TLS termination on the gateway listener, from certificate and key files, through SDS.

The listener's ``DownstreamTlsContext`` names an SDS secret (``gatehouse-tls``) that the
control plane serves over the same ADS stream. That ``Secret`` holds *file names*, not PEM
text, plus a ``watched_directory`` on the directory that holds them. Envoy honours
``watched_directory`` only for certificates delivered by SDS: it re-reads the pair when the
directory changes (a Kubernetes Secret volume swaps its ``..data`` link atomically), so a
rotated certificate needs neither a restart nor a new listener. A certificate inlined in
the listener would be read once and never again. Keeping file names, not key bytes, in the
xDS resource also keeps the private key out of the control plane's snapshots, debug
endpoints and logs.

Policy: TLS 1.2 minimum, the ECDHE AEAD ciphers below for TLS 1.2 (TLS 1.3 suites are
Envoy's fixed, all-AEAD set), ALPN h2 then http/1.1, and HSTS on every HTTPS response.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from control_plane.cache.resource import Resource
from control_plane.cache.types import ResourceType
from control_plane.translator.feature import HttpFeature
from control_plane.translator.messages import HEADER_MUTATION_TYPE, Secret, parse
from control_plane.translator.settings import GatewaySettings
from control_plane.translator.settings import TlsSettings as TlsSettings

DOWNSTREAM_TLS_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
SECRET_NAME = "gatehouse-tls"  # noqa: S105 - the SDS secret's name, not a secret
TLS_TRANSPORT_SOCKET = "envoy.transport_sockets.tls"
HSTS_FILTER = "gatehouse.hsts"
HSTS_HEADER = "strict-transport-security"
HSTS_VALUE = "max-age=31536000; includeSubDomains"
MINIMUM_PROTOCOL = "TLSv1_2"
CIPHER_SUITES = (
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
)
ALPN_PROTOCOLS = ("h2", "http/1.1")


def tls_secret(tls: TlsSettings) -> dict[str, Any]:
    """The SDS ``Secret``: where the pair is, and which directory to watch for a new one."""
    return {
        "name": SECRET_NAME,
        "tls_certificate": {
            "certificate_chain": {"filename": tls.cert_file},
            "private_key": {"filename": tls.key_file},
            "watched_directory": {"path": str(PurePath(tls.cert_file).parent)},
        },
    }


def secret_resources(settings: GatewaySettings) -> tuple[Resource, ...]:
    """The listener's TLS secret over SDS (file names, no key bytes), if it terminates TLS."""
    if settings.tls is None:
        return ()
    return (Resource.from_message(ResourceType.SECRET, SECRET_NAME, parse(Secret, tls_secret(settings.tls))),)


def downstream_tls_context() -> dict[str, Any]:
    return {
        "@type": DOWNSTREAM_TLS_TYPE,
        "common_tls_context": {
            "tls_params": {
                "tls_minimum_protocol_version": MINIMUM_PROTOCOL,
                "cipher_suites": list(CIPHER_SUITES),
            },
            "tls_certificate_sds_secret_configs": [
                # No fetch deadline: a listener whose certificate Envoy cannot load keeps
                # warming (the previous listener serves) instead of going live after 15 s and
                # resetting every connection.
                {"name": SECRET_NAME, "sds_config": {"ads": {}, "resource_api_version": "V3", "initial_fetch_timeout": "0s"}}
            ],
            "alpn_protocols": list(ALPN_PROTOCOLS),
        },
    }


def transport_socket() -> dict[str, Any]:
    return {"name": TLS_TRANSPORT_SOCKET, "typed_config": downstream_tls_context()}


def hsts_filter() -> dict[str, Any]:
    """Sets HSTS on every response of the TLS listener, local replies included."""
    return {
        "name": HSTS_FILTER,
        "typed_config": {
            "@type": HEADER_MUTATION_TYPE,
            "mutations": {
                "response_mutations": [
                    {
                        "append": {
                            "header": {"key": HSTS_HEADER, "value": HSTS_VALUE},
                            "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
                        }
                    }
                ]
            },
        },
    }


class Hsts(HttpFeature):
    """HSTS on the TLS listener (the listener's transport socket and its secret are the
    listener's own: ``listeners.http_listener``, ``secret_resources``)."""

    name = HSTS_FILTER

    def http_filter(self, settings: GatewaySettings) -> dict[str, Any] | None:
        return None if settings.tls is None else hsts_filter()
