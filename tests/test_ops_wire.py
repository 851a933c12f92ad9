"""Wire values that are not what they seem get INVALID_ARGUMENT naming the field, never UNKNOWN."""

from __future__ import annotations

import math

import grpc
import pytest
from google.protobuf import struct_pb2
from ops_support import ask, channel_to, running

from chd.service.wire import struct_to_dict as to_dict
from chd.v1 import daemon_pb2


@pytest.fixture(scope="module")
def channel():
    with running() as server, channel_to(server) as open_channel:
        yield open_channel


def _refusal(channel, text, metadata=None, data=None) -> grpc.RpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as refused:
        ask(channel, text, metadata=metadata, data=data)
    return refused.value


def _raw_query(channel: grpc.Channel, payload: bytes) -> grpc.RpcError | None:
    """Send ``payload`` as the bytes of a QueryRequest."""
    call = channel.unary_unary(
        "/daemon.v1.Daemon/Query",
        request_serializer=lambda raw: raw,
        response_deserializer=daemon_pb2.QueryResponse.FromString,
    )
    try:
        call(payload, timeout=5)
    except grpc.RpcError as error:
        return error
    return None


class TestStructConversion:
    """Struct values arrive as what they are on the wire."""

    def test_numbers_stay_doubles_and_nan_and_infinity_survive(self):
        struct = struct_pb2.Struct()
        struct.update(
            {
                "five": 5,
                "half": 5.5,
                "nan": math.nan,
                "inf": math.inf,
                "list": [1, "a"],
                "obj": {"x": None},
            }
        )
        values = to_dict(struct)
        assert values["five"] == 5.0 and isinstance(values["five"], float)
        assert math.isnan(values["nan"]) and values["inf"] == math.inf
        assert values["list"] == [1.0, "a"] and values["obj"] == {"x": None}

    def test_an_empty_value_is_none(self):
        struct = struct_pb2.Struct()
        struct.fields["empty"].SetInParent()
        assert to_dict(struct) == {"empty": None}


class TestNumbers:
    """A turn number 5 arrives as 5.0 and is fine; 5.5, NaN and infinity are refused by name."""

    def test_a_whole_double_is_a_whole_number(self, channel):
        answer = ask(
            channel, "Add utterance: five", metadata={"conversation_id": "w1", "turn_number": 5.0}
        )
        assert answer.result["utterance"]["turn_number"] == 5

    @pytest.mark.parametrize("value", [5.5, math.nan, math.inf, -math.inf, -1.0, 1e300])
    def test_a_bad_turn_number_names_metadata_turn_number(self, channel, value):
        error = _refusal(channel, "Add utterance: x", metadata={"turn_number": value})
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "metadata.turn_number" in error.details()

    @pytest.mark.parametrize("value", [math.nan, math.inf, 2.5, -3.0, "5", True])
    def test_a_bad_last_n_names_data_last_n(self, channel, value):
        error = _refusal(channel, "Get utterances", data={"operation": "retrieve", "last_n": value})
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "data.last_n" in error.details()


class TestShapes:
    """Lists and nested Structs where a scalar is expected are refused by name."""

    @pytest.mark.parametrize("value", [["a"], {"id": "a"}, 3.0, None, True, ""])
    def test_a_conversation_id_that_is_not_a_string(self, channel, value):
        error = _refusal(channel, "Get the last 2 utterances", metadata={"conversation_id": value})
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "metadata.conversation_id" in error.details()

    @pytest.mark.parametrize(
        ("field", "value"), [("text", ["hi"]), ("text", {"t": "hi"}), ("text", 7.0)]
    )
    def test_store_data_of_the_wrong_shape(self, channel, field, value):
        error = _refusal(channel, "", data={"operation": "store", field: value})
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"data.{field}" in error.details()

    @pytest.mark.parametrize("value", [["remove"], {"op": "x"}, math.nan, None])
    def test_data_operation_that_is_not_a_string(self, channel, value):
        error = _refusal(channel, "", data={"operation": value})
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "data.operation" in error.details()


class TestUnicode:
    """Any unicode in a string is kept exactly."""

    @pytest.mark.parametrize(
        "text", ["naïve café ☕", "emoji 🧠🔥", "right-to-left שלום", "nul\x00inside", "ZWJ 👩‍💻"]
    )
    def test_unicode_text_round_trips(self, channel, text):
        conversation = f"uni-{abs(hash(text))}"
        ask(
            channel,
            "",
            metadata={"conversation_id": conversation},
            data={"operation": "store", "text": text},
        )
        got = ask(channel, "Get all utterances", metadata={"conversation_id": conversation})
        assert got.result["utterances"][0]["text"] == text

    def test_a_unicode_conversation_id_is_kept(self, channel):
        answer = ask(channel, "Add utterance: hi", metadata={"conversation_id": "会话-1"})
        assert answer.metadata["conversation_id"] == "会话-1"


class TestUndecodableMessages:
    """Bytes that are not a QueryRequest are INVALID_ARGUMENT, not grpc's INTERNAL."""

    @pytest.mark.parametrize(
        "payload",
        [
            b"\xff\xff\xff\xff",  # a truncated varint tag
            b"\x0a\x02\xc3\x28",  # query = invalid UTF-8
            b"\x12\x05\x0a\x03abc",  # metadata with a garbage map entry
        ],
    )
    def test_garbage_bytes_are_invalid_argument(self, channel, payload):
        error = _raw_query(channel, payload)
        assert error is not None and error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "could not be decoded" in error.details()

    def test_a_struct_nested_past_the_recursion_limit_is_invalid_argument(self, channel):
        nested: dict = {"leaf": "x"}
        for _ in range(120):
            nested = {"n": nested}
        request = daemon_pb2.QueryRequest(query="Get the last 2 utterances")
        request.data.update({"deep": nested})
        error = _raw_query(channel, request.SerializeToString())
        assert error is not None and error.code() == grpc.StatusCode.INVALID_ARGUMENT

    def test_a_struct_nested_within_the_limit_reaches_the_field_check(self, channel):
        error = _refusal(
            channel,
            "Get the last 2 utterances",
            metadata={"conversation_id": {"a": {"b": {"c": 1}}}},
        )
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "metadata.conversation_id" in error.details()
