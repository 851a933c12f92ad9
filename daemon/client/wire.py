"""Struct <-> Python for the client, whole numbers read back as ints in the same pass.

The daemon's own decoder (chd.service.wire) keeps numbers as doubles, as
the core expects; a caller wants 5, not 5.0, and one walk doing both is
cheaper than json_format.MessageToDict followed by a second walk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2

from chd.v1 import daemon_pb2

__all__ = ["request", "struct_to_plain"]


def _value(value: struct_pb2.Value) -> Any:
    # Strings first: most of an answer is text, timestamps and names.
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() else number
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return {key: _value(item) for key, item in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_value(item) for item in value.list_value.values]
    return None


def struct_to_plain(struct: struct_pb2.Struct) -> dict[str, Any]:
    """Every field of ``struct`` as Python values, 5.0 as 5."""
    return {key: _value(value) for key, value in struct.fields.items()}


def request(
    text: str, metadata: Mapping[str, Any], data: Mapping[str, Any]
) -> daemon_pb2.QueryRequest:
    message = daemon_pb2.QueryRequest(query=text)
    if metadata:
        message.metadata.update(metadata)
    if data:
        message.data.update(data)
    return message
