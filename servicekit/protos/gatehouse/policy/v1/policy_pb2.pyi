# mypy: ignore-errors
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RoutePolicy(_message.Message):
    __slots__ = ("route", "limits", "auth", "waiting_room", "upstream_token", "validation")
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    AUTH_FIELD_NUMBER: _ClassVar[int]
    WAITING_ROOM_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FIELD_NUMBER: _ClassVar[int]
    route: str
    limits: _containers.RepeatedCompositeFieldContainer[Limit]
    auth: AuthRequirements
    waiting_room: WaitingRoom
    upstream_token: UpstreamToken
    validation: RequestValidation
    def __init__(self, route: _Optional[str] = ..., limits: _Optional[_Iterable[_Union[Limit, _Mapping]]] = ..., auth: _Optional[_Union[AuthRequirements, _Mapping]] = ..., waiting_room: _Optional[_Union[WaitingRoom, _Mapping]] = ..., upstream_token: _Optional[_Union[UpstreamToken, _Mapping]] = ..., validation: _Optional[_Union[RequestValidation, _Mapping]] = ...) -> None: ...

class WaitingRoom(_message.Message):
    __slots__ = ("admit_per_second", "max_waiting", "ticket_ttl_ms", "on_store_failure")
    ADMIT_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    MAX_WAITING_FIELD_NUMBER: _ClassVar[int]
    TICKET_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    ON_STORE_FAILURE_FIELD_NUMBER: _ClassVar[int]
    admit_per_second: int
    max_waiting: int
    ticket_ttl_ms: int
    on_store_failure: str
    def __init__(self, admit_per_second: _Optional[int] = ..., max_waiting: _Optional[int] = ..., ticket_ttl_ms: _Optional[int] = ..., on_store_failure: _Optional[str] = ...) -> None: ...

class UpstreamToken(_message.Message):
    __slots__ = ("audience", "exchange_url")
    AUDIENCE_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_URL_FIELD_NUMBER: _ClassVar[int]
    audience: str
    exchange_url: str
    def __init__(self, audience: _Optional[str] = ..., exchange_url: _Optional[str] = ...) -> None: ...

class RequestValidation(_message.Message):
    __slots__ = ("headers", "query", "body")
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    headers: _containers.RepeatedCompositeFieldContainer[ValueCheck]
    query: _containers.RepeatedCompositeFieldContainer[ValueCheck]
    body: BodyCheck
    def __init__(self, headers: _Optional[_Iterable[_Union[ValueCheck, _Mapping]]] = ..., query: _Optional[_Iterable[_Union[ValueCheck, _Mapping]]] = ..., body: _Optional[_Union[BodyCheck, _Mapping]] = ...) -> None: ...

class ValueCheck(_message.Message):
    __slots__ = ("name", "required", "type", "schema_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    required: bool
    type: str
    schema_json: str
    def __init__(self, name: _Optional[str] = ..., required: _Optional[bool] = ..., type: _Optional[str] = ..., schema_json: _Optional[str] = ...) -> None: ...

class BodyCheck(_message.Message):
    __slots__ = ("schema_json", "max_bytes", "allowed_fields", "optional")
    SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELDS_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    schema_json: str
    max_bytes: int
    allowed_fields: _containers.RepeatedScalarFieldContainer[str]
    optional: bool
    def __init__(self, schema_json: _Optional[str] = ..., max_bytes: _Optional[int] = ..., allowed_fields: _Optional[_Iterable[str]] = ..., optional: _Optional[bool] = ...) -> None: ...

class AuthRequirements(_message.Message):
    __slots__ = ("audiences", "scopes", "roles", "public", "api_keys", "api_keys_only", "allow_consumers", "deny_consumers", "max_token_age_ms", "issuers")
    AUDIENCES_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_FIELD_NUMBER: _ClassVar[int]
    API_KEYS_FIELD_NUMBER: _ClassVar[int]
    API_KEYS_ONLY_FIELD_NUMBER: _ClassVar[int]
    ALLOW_CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    DENY_CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKEN_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    ISSUERS_FIELD_NUMBER: _ClassVar[int]
    audiences: _containers.RepeatedScalarFieldContainer[str]
    scopes: _containers.RepeatedScalarFieldContainer[str]
    roles: _containers.RepeatedScalarFieldContainer[str]
    public: bool
    api_keys: bool
    api_keys_only: bool
    allow_consumers: _containers.RepeatedScalarFieldContainer[str]
    deny_consumers: _containers.RepeatedScalarFieldContainer[str]
    max_token_age_ms: int
    issuers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, audiences: _Optional[_Iterable[str]] = ..., scopes: _Optional[_Iterable[str]] = ..., roles: _Optional[_Iterable[str]] = ..., public: _Optional[bool] = ..., api_keys: _Optional[bool] = ..., api_keys_only: _Optional[bool] = ..., allow_consumers: _Optional[_Iterable[str]] = ..., deny_consumers: _Optional[_Iterable[str]] = ..., max_token_age_ms: _Optional[int] = ..., issuers: _Optional[_Iterable[str]] = ...) -> None: ...

class Limit(_message.Message):
    __slots__ = ("id", "key", "algorithm", "limit", "window_ms", "refill_tokens", "shadow", "mode", "on_store_failure")
    ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    REFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    ON_STORE_FAILURE_FIELD_NUMBER: _ClassVar[int]
    id: str
    key: str
    algorithm: str
    limit: int
    window_ms: int
    refill_tokens: int
    shadow: bool
    mode: str
    on_store_failure: str
    def __init__(self, id: _Optional[str] = ..., key: _Optional[str] = ..., algorithm: _Optional[str] = ..., limit: _Optional[int] = ..., window_ms: _Optional[int] = ..., refill_tokens: _Optional[int] = ..., shadow: _Optional[bool] = ..., mode: _Optional[str] = ..., on_store_failure: _Optional[str] = ...) -> None: ...
