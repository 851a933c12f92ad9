"""google.protobuf.Struct <-> plain Python, without json_format's surprises.

json_format.MessageToDict raises on a NaN or infinite number (legal on the
wire) and would turn a caller's bad value into an internal error; reading
the Value oneof directly keeps every value, so the core can name the field
that is wrong.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2

__all__ = ["struct_to_dict", "dict_to_struct"]


def _value(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        return value.number_value
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return struct_to_dict(value.struct_value)
    if kind == "list_value":
        return [_value(v) for v in value.list_value.values]
    return None


def struct_to_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    """Every field of ``struct`` as Python values (numbers stay floats)."""
    return {key: _value(value) for key, value in struct.fields.items()}


def dict_to_struct(values: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct
