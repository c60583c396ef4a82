"""A route's ``access``: IP allow and deny lists on the client's direct address (Envoy RBAC)."""

from __future__ import annotations


import ipaddress
from typing import Annotated

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator

from servicekit.model import Model
from control_plane.model.declared_rules import AnyListed, enforce
from control_plane.model.shared_types import cel, unique


def _cidr(value: str) -> str:
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as error:
        raise ValueError(f"{value!r} is not a CIDR block like 10.0.0.0/8 or 2001:db8::/32 ({error})") from None
    if "/" not in value:
        raise ValueError(f"{value!r} needs a prefix length, like {network.with_prefixlen}")
    return value


Cidr = Annotated[
    str,
    AfterValidator(_cidr),
    WithJsonSchema({"type": "string", "maxLength": 64, "pattern": r"^[0-9a-fA-F:.]+/[0-9]{1,3}$"}),
]

_LISTED = AnyListed(("allow", "deny"), "access: set allow or deny (or both)")


class Access(Model):
    """IP allow and deny lists on the client's direct address (Envoy RBAC); denied → 403.

    A request is refused when its address is in ``deny``, or when ``allow`` is not empty
    and the address is in none of its blocks.
    """

    model_config = cel(_LISTED)

    allow: Annotated[list[Cidr], AfterValidator(unique), Field(max_length=256)] = []
    deny: Annotated[list[Cidr], AfterValidator(unique), Field(max_length=256)] = []

    @model_validator(mode="after")
    def _not_empty(self) -> Access:
        enforce(self, (_LISTED,))
        return self
