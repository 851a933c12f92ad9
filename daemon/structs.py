"""Exact conversion between google.protobuf.Struct and plain Python values.

``json_format.MessageToDict`` is a JSON encoder, not a converter: it raises
ValueError on NaN and infinity (legal in a Struct's double), which reached
the caller as INTERNAL. Here every wire value comes through as what it is
(numbers stay floats, NaN stays NaN, lists stay lists) and the field
checks in ``daemon.fields`` decide, naming the field they refuse.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2

__all__ = ["to_dict", "to_struct", "to_value"]


def to_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as a dict of plain values (None, float, str, bool, list, dict)."""
    return {key: to_value(value) for key, value in struct.fields.items()}


def to_value(value: struct_pb2.Value) -> Any:
    """One ``google.protobuf.Value`` as a plain Python value."""
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        return value.number_value
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return to_dict(value.struct_value)
    if kind == "list_value":
        return [to_value(item) for item in value.list_value.values]
    # null_value, or no kind set at all (a Value a client left empty).
    return None


def to_struct(values: dict[str, Any]) -> struct_pb2.Struct:
    """A dict of JSON-like values as a Struct (numbers become doubles)."""
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct
