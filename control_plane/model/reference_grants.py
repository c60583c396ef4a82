"""ReferenceGrant documents (Gateway API, ``gateway.networking.k8s.io``) → ReferenceGrants.

One schema for both places a grant is written: an object in the Kubernetes API (which
the standard CRD already validated) and a document in a Git route file (which nothing
else validates). It mirrors the CRD of Gateway API v1.6 (``charts/gatehouse/crds/``):
``from`` and ``to`` hold 1 to 16 entries; ``group`` is ``""`` (core) or a DNS subdomain,
``kind`` a CamelCase name, ``from.namespace`` one DNS label (no wildcard), ``to.name``
optional. Unknown fields are errors, as in route files.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from control_plane.model.references import GrantFrom, GrantTo, ReferenceGrant
from control_plane.model.route import Origin
from control_plane.model.schema import ObjectMeta
from servicekit.model import Model

GROUP = "gateway.networking.k8s.io"
VERSION = "v1beta1"
"""The version the Kubernetes source watches: the storage version in v1.6's standard channel."""
KIND = "ReferenceGrant"
PLURAL = "referencegrants"
API_VERSIONS = (f"{GROUP}/v1beta1", f"{GROUP}/v1")
"""Both are served by the v1.6 CRD, with the same schema."""

_GROUP = re.compile(r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_KIND = re.compile(r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _group(value: str) -> str:
    if len(value) > 253 or not _GROUP.match(value):
        raise ValueError(f'{value!r} is not an API group: "" for the core group, or a lowercase DNS name such as gatehouse.io')
    return value


def _kind(value: str) -> str:
    if len(value) > 63 or not _KIND.match(value):
        raise ValueError(f"{value!r} is not a kind (a CamelCase name such as Route or Service)")
    return value


def _namespace(value: str) -> str:
    if "*" in value:
        raise ValueError(f"{value!r}: a ReferenceGrant names one namespace; there are no wildcards")
    if len(value) > 63 or not _NAMESPACE.match(value):
        raise ValueError(f"{value!r} is not a namespace (a DNS label: lowercase letters, digits and '-', at most 63)")
    return value


Group = Annotated[str, AfterValidator(_group)]
Kind = Annotated[str, AfterValidator(_kind)]


class FromSpec(Model):
    group: Group
    kind: Kind
    namespace: Annotated[str, AfterValidator(_namespace)]


class ToSpec(Model):
    group: Group
    kind: Kind
    name: Annotated[str, Field(min_length=1, max_length=253)] | None = None


class GrantSpec(Model):
    from_: Annotated[list[FromSpec], Field(min_length=1, max_length=16, alias="from")]
    to: Annotated[list[ToSpec], Field(min_length=1, max_length=16)]


class ReferenceGrantDocument(Model):
    api_version: Literal["gateway.networking.k8s.io/v1beta1", "gateway.networking.k8s.io/v1"]
    kind: Literal["ReferenceGrant"]
    metadata: ObjectMeta
    spec: GrantSpec


def grant_from_document(data: object, origin: Origin, *, cluster: bool) -> ReferenceGrant:
    """Validate one parsed document; raises ValidationError (or ValueError for non-objects)."""
    if not isinstance(data, dict):
        raise ValueError(f"a ReferenceGrant document must be a mapping, not {type(data).__name__}")
    parsed = ReferenceGrantDocument.model_validate(data)
    return ReferenceGrant(
        namespace=parsed.metadata.namespace,
        name=parsed.metadata.name,
        sources=tuple(GrantFrom(f.group, f.kind, f.namespace) for f in parsed.spec.from_),
        targets=tuple(GrantTo(t.group, t.kind, t.name) for t in parsed.spec.to),
        origin=origin,
        cluster=cluster,
    )


def is_grant_document(data: object) -> bool:
    """A document that says it is a ReferenceGrant (judged by this schema, not the Route's)."""
    return isinstance(data, dict) and data.get("kind") == KIND
