"""Assemble the RouteConfiguration from route entries that are already serialized.

Protobuf's wire format lets a repeated message field be written as the concatenation
of (tag, length, bytes) records, in any order relative to other fields. Each route's
entries are serialized once, when the route is first translated; a commit that changes
one route of 10,000 then costs a byte join, not 10,000 message copies.
"""

from __future__ import annotations

from collections.abc import Iterable

from control_plane.translator.messages import RouteConfiguration, VirtualHost

_LENGTH_DELIMITED = 2


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field_tag(message: type[VirtualHost] | type[RouteConfiguration], field: str) -> bytes:
    number = message.DESCRIPTOR.fields_by_name[field].number
    return _varint(number << 3 | _LENGTH_DELIMITED)


_ROUTES_TAG = _field_tag(VirtualHost, "routes")
_VIRTUAL_HOSTS_TAG = _field_tag(RouteConfiguration, "virtual_hosts")


def as_route_field(entry: bytes) -> bytes:
    """One serialized Route as a record of VirtualHost.routes."""
    return _ROUTES_TAG + _varint(len(entry)) + entry


def virtual_host(name: str, domains: list[str], route_fields: Iterable[bytes]) -> bytes:
    head: bytes = VirtualHost(name=name, domains=domains).SerializeToString(deterministic=True)
    return head + b"".join(route_fields)


def route_configuration(head: RouteConfiguration, virtual_hosts: Iterable[bytes]) -> bytes:
    """``head`` holds every field but the virtual hosts, which are appended as records."""
    parts = [head.SerializeToString(deterministic=True)]
    for vhost in virtual_hosts:
        parts.append(_VIRTUAL_HOSTS_TAG + _varint(len(vhost)) + vhost)
    return b"".join(parts)
