from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class QueryRequest(_message.Message):
    __slots__ = ("query", "metadata", "data")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    query: str
    metadata: _struct_pb2.Struct
    data: _struct_pb2.Struct
    def __init__(self, query: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class QueryResponse(_message.Message):
    __slots__ = ("operation", "result", "metadata")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    operation: str
    result: _struct_pb2.Struct
    metadata: _struct_pb2.Struct
    def __init__(self, operation: _Optional[str] = ..., result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class GetPurposeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetPurposeResponse(_message.Message):
    __slots__ = ("purpose",)
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    purpose: str
    def __init__(self, purpose: _Optional[str] = ...) -> None: ...

class GetInstructionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetInstructionsResponse(_message.Message):
    __slots__ = ("instructions",)
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    instructions: str
    def __init__(self, instructions: _Optional[str] = ...) -> None: ...
