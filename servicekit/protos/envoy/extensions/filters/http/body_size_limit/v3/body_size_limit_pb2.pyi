# mypy: ignore-errors
from google.protobuf import wrappers_pb2 as _wrappers_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BodySizeLimit(_message.Message):
    __slots__ = ("max_request_bytes",)
    MAX_REQUEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    max_request_bytes: _wrappers_pb2.UInt64Value
    def __init__(self, max_request_bytes: _Optional[_Union[_wrappers_pb2.UInt64Value, _Mapping]] = ...) -> None: ...
