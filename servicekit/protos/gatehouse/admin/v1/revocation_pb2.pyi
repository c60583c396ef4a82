# mypy: ignore-errors
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EntryKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENTRY_KIND_UNSPECIFIED: _ClassVar[EntryKind]
    ENTRY_KIND_REVOKED_JTI: _ClassVar[EntryKind]
    ENTRY_KIND_BLOCKED_SUBJECT: _ClassVar[EntryKind]
ENTRY_KIND_UNSPECIFIED: EntryKind
ENTRY_KIND_REVOKED_JTI: EntryKind
ENTRY_KIND_BLOCKED_SUBJECT: EntryKind

class Entry(_message.Message):
    __slots__ = ("kind", "value", "expires_at")
    KIND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    kind: EntryKind
    value: str
    expires_at: int
    def __init__(self, kind: _Optional[_Union[EntryKind, str]] = ..., value: _Optional[str] = ..., expires_at: _Optional[int] = ...) -> None: ...

class RevokeRequest(_message.Message):
    __slots__ = ("jti", "expires_at", "reason")
    JTI_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    jti: str
    expires_at: int
    reason: str
    def __init__(self, jti: _Optional[str] = ..., expires_at: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class RevokeResponse(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: Entry
    def __init__(self, entry: _Optional[_Union[Entry, _Mapping]] = ...) -> None: ...

class BlockRequest(_message.Message):
    __slots__ = ("subject", "until", "reason")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    subject: str
    until: int
    reason: str
    def __init__(self, subject: _Optional[str] = ..., until: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class BlockResponse(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: Entry
    def __init__(self, entry: _Optional[_Union[Entry, _Mapping]] = ...) -> None: ...

class UnblockRequest(_message.Message):
    __slots__ = ("subject", "reason")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    subject: str
    reason: str
    def __init__(self, subject: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class UnblockResponse(_message.Message):
    __slots__ = ("existed",)
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    def __init__(self, existed: _Optional[bool] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("kind", "limit")
    KIND_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    kind: EntryKind
    limit: int
    def __init__(self, kind: _Optional[_Union[EntryKind, str]] = ..., limit: _Optional[int] = ...) -> None: ...

class MirrorStatus(_message.Message):
    __slots__ = ("state", "synced_at", "revoked", "blocked", "policy")
    STATE_FIELD_NUMBER: _ClassVar[int]
    SYNCED_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    state: str
    synced_at: float
    revoked: int
    blocked: int
    policy: str
    def __init__(self, state: _Optional[str] = ..., synced_at: _Optional[float] = ..., revoked: _Optional[int] = ..., blocked: _Optional[int] = ..., policy: _Optional[str] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("entries", "truncated", "mirror")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    MIRROR_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    truncated: bool
    mirror: MirrorStatus
    def __init__(self, entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., truncated: _Optional[bool] = ..., mirror: _Optional[_Union[MirrorStatus, _Mapping]] = ...) -> None: ...
