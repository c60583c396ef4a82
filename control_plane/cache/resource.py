"""One serialized xDS resource with its content hash and provenance."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from google.protobuf import any_pb2
from google.protobuf.message import Message

from control_plane.cache.types import ResourceType


@dataclass(frozen=True, slots=True)
class Resource:
    """Held as bytes, not as a message: bytes are what we send, hash and keep in memory."""

    type: ResourceType
    name: str
    body: bytes
    version: str
    provenance: tuple[str, ...] = ()
    """Route ids (namespace/name) whose definitions produced this resource."""
    references: tuple[str, ...] = ()
    """Names of clusters (for routes/listeners) this resource points at."""

    @classmethod
    def from_message(
        cls,
        kind: ResourceType,
        name: str,
        message: Message,
        *,
        provenance: tuple[str, ...] = (),
        references: tuple[str, ...] = (),
    ) -> Resource:
        body: bytes = message.SerializeToString(deterministic=True)
        return cls.from_bytes(kind, name, body, provenance=provenance, references=references)

    @classmethod
    def from_bytes(
        cls,
        kind: ResourceType,
        name: str,
        body: bytes,
        *,
        provenance: tuple[str, ...] = (),
        references: tuple[str, ...] = (),
    ) -> Resource:
        return cls(kind, name, body, content_hash(body), provenance, references)

    def to_any(self) -> any_pb2.Any:
        return any_pb2.Any(type_url=self.type.url, value=self.body)


def content_hash(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=8).hexdigest()
