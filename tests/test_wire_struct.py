"""dict_to_struct and fill_struct build the very Struct that protobuf's own Struct.update builds."""

from __future__ import annotations

import enum
from typing import Any

import pytest
from google.protobuf import struct_pb2
from hypothesis import given
from hypothesis import strategies as st

from chd.service.wire import dict_to_struct, fill_struct, struct_to_dict
from chd.v1 import daemon_pb2


class _Level(enum.IntEnum):
    LOW = 1


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.just(_Level.LOW)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=25,
)


def _by_update(values: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


class TestDictToStruct:
    """The fast path and Struct.update agree byte for byte."""

    @given(st.dictionaries(st.text(max_size=8), _values, max_size=6))
    def test_any_plain_value_encodes_like_struct_update(self, values: dict[str, Any]) -> None:
        ours, theirs = dict_to_struct(values), _by_update(values)
        assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
            deterministic=True
        )

    def test_empty_lists_and_structs_are_present_values(self) -> None:
        struct = dict_to_struct({"list": [], "struct": {}, "nested": [{}, []]})
        assert struct.fields["list"].HasField("list_value")
        assert struct.fields["struct"].HasField("struct_value")
        assert struct_to_dict(struct) == {"list": [], "struct": {}, "nested": [{}, []]}

    def test_a_value_of_another_type_is_refused_like_struct_update(self) -> None:
        with pytest.raises(ValueError, match="Unexpected type"):
            _by_update({"x": object()})
        with pytest.raises(ValueError, match="Unexpected type"):
            dict_to_struct({"x": object()})


class TestFillStruct:
    """Filling a response's Struct field in place gives the response a built Struct gives."""

    @given(st.dictionaries(st.text(max_size=8), _values, max_size=6))
    def test_a_filled_field_serializes_like_an_assigned_one(self, values: dict[str, Any]) -> None:
        filled = daemon_pb2.QueryResponse(operation="store")
        fill_struct(filled.result, values)
        assigned = daemon_pb2.QueryResponse(operation="store", result=_by_update(values))
        assert filled.SerializeToString(deterministic=True) == assigned.SerializeToString(
            deterministic=True
        )

    def test_an_empty_dict_still_makes_the_field_present(self) -> None:
        filled = daemon_pb2.QueryResponse()
        fill_struct(filled.metadata, {})
        assert filled.HasField("metadata")
