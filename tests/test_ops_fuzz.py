"""Fuzzing the wire: thousands of random and malformed queries, never UNKNOWN or INTERNAL."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ops_support import ask, channel_to, health_status, request, running

from chd.v1 import daemon_pb2

FORBIDDEN = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
# Every other outcome is a legitimate answer to some request; these two mean a bug.

_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=80)
_number = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**60), 2**60).map(float),
    st.sampled_from([0.0, 1.0, 5.0, 5.5, -1.0, 2.0**31, 2.0**53, 1e308]),
)
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), _number, _text),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_text, inner, max_size=3)),
    max_leaves=6,
)
_operations = st.one_of(
    st.sampled_from(["store", "retrieve", "remove", "summarize", "STORE", " remove "]), _json
)
_data_keys = st.sampled_from(
    [
        "text",
        "last_n",
        "topic",
        "speaker",
        "turn_from",
        "turn_to",
        "seq",
        "include_summary",
        "summary_only",
        "oldest",
        "before_turn",
        "all",
        "token_limit",
    ]
)
_data = st.dictionaries(st.one_of(_data_keys, _text), _json, max_size=4) | st.fixed_dictionaries(
    {"operation": _operations},
    optional={"text": _json, "last_n": _json, "seq": _json, "all": _json, "token_limit": _json},
)
_metadata = st.dictionaries(
    st.sampled_from(["conversation_id", "turn_number", "speaker"]) | _text,
    st.one_of(st.sampled_from(["fuzz-a", "fuzz-b", "user", "assistant", "system"]), _json),
    max_size=3,
)
_small = st.one_of(st.integers(-3, 40), st.sampled_from([0, 2**31, 2**53, 10**30])).map(str)
_templates = st.sampled_from(
    [
        "Add utterance: {t}",
        "Add assistant utterance: '{t}'",
        "Remember {t}",
        "Find utterances about {t}",
        "Get the last {n} utterances",
        "Get utterance {n}",
        "Get utterances in turns {n} to {m}",
        "Get summary",
        "Get all utterances",
        "Remove oldest {n} utterances",
        "Remove before turn {n}",
        "Remove utterance {n}",
        "Clear the conversation",
        "Summarize the conversation in {n} tokens",
        "{t}",
    ]
)
_query = st.one_of(
    _text,
    st.builds(lambda tpl, t, n, m: tpl.format(t=t, n=n, m=m), _templates, _text, _small, _small),
)


@pytest.fixture(scope="module")
def channel():
    with (
        running(buffer_size=5, eviction_batch=2, max_utterance_chars=200) as server,
        channel_to(server) as open_channel,
    ):
        yield open_channel


def _code(channel: grpc.Channel, message: daemon_pb2.QueryRequest | bytes) -> grpc.StatusCode:
    serialize = (
        (lambda raw: raw)
        if isinstance(message, bytes)
        else daemon_pb2.QueryRequest.SerializeToString
    )
    call = channel.unary_unary(
        "/daemon.v1.Daemon/Query",
        request_serializer=serialize,
        response_deserializer=daemon_pb2.QueryResponse.FromString,
    )
    try:
        call(message, timeout=10)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


_fuzz = settings(
    max_examples=2500,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class TestFuzz:
    """Whatever arrives, the answer is a deliberate status and the daemon stays healthy."""

    @_fuzz
    @given(query=_query, metadata=_metadata, data=_data)
    def test_random_queries_never_answer_unknown_or_internal(self, channel, query, metadata, data):
        message = request(query, metadata, data)
        code = _code(channel, message)
        assert code not in FORBIDDEN, (query, metadata, data)

    @settings(_fuzz, max_examples=500)
    @given(payload=st.binary(max_size=200))
    def test_random_bytes_never_answer_unknown_or_internal(self, channel, payload):
        assert _code(channel, payload) not in FORBIDDEN, payload

    def test_the_daemon_is_healthy_after_the_fuzzing(self):
        """A server of its own takes a burst of random queries and bytes, then is healthy and stores."""
        with (
            running(buffer_size=5, eviction_batch=2, max_utterance_chars=200) as server,
            channel_to(server) as channel,
        ):

            @settings(_fuzz, max_examples=150)
            @given(query=_query, metadata=_metadata, data=_data, payload=st.binary(max_size=200))
            def burst(query, metadata, data, payload):
                _code(channel, request(query, metadata, data))
                _code(channel, payload)

            burst()
            assert health_status(channel) == "SERVING"
            stored = ask(
                channel, "Add utterance: still here", metadata={"conversation_id": "after-fuzz"}
            )
            assert stored.operation == "store"
            got = ask(
                channel, "Get the last 1 utterances", metadata={"conversation_id": "after-fuzz"}
            )
            assert got.result["utterances"][0]["text"] == "still here"


class TestFoundByFuzzing:
    """Inputs the fuzzing once found answered INTERNAL, kept as regression tests."""

    def test_a_store_without_text_is_invalid_argument(self, channel):
        assert (
            _code(channel, request("", {}, {"operation": "store"}))
            == grpc.StatusCode.INVALID_ARGUMENT
        )


_MB = 1 << 20
# Shapes that once took seconds to minutes (issue 14), at 1 MB: a store's
# text is payload, a topic or a data field is data, a name is echoed in a
# message. The grammar's own shapes (long query text) are the parser's
# property test's (tests of daemon/core/language).
_HOSTILE = {
    "store of one word": ("Add utterance: " + "x" * _MB, {}, {}),
    "store of spaces": ("Add utterance: a" + " " * _MB + "a", {}, {}),
    "store of number words": ("Add utterance: user " + "two " * (_MB // 4) + "x", {}, {}),
    "store of newlines and controls": (
        "",
        {},
        {"operation": "store", "text": "\n\x01\t\x00" * (_MB // 4)},
    ),
    "store of punctuation": ("", {}, {"operation": "store", "text": "?!.,'\"" * (_MB // 6)}),
    "topic of spaces": ("", {}, {"operation": "retrieve", "topic": "x" + " " * _MB + "y"}),
    "topic of one word": ("", {}, {"operation": "retrieve", "topic": "y" * _MB}),
    "operation name": ("", {}, {"operation": "q" * _MB}),
    "data key": ("", {}, {"operation": "store", "k" * _MB: 1}),
    "conversation id": ("Get summary", {"conversation_id": "c" * _MB}, {}),
    "metadata key": ("Get summary", {"m" * _MB: 1}, {}),
    "count of 5000 digits": ("", {}, {"operation": "retrieve", "last_n": "9" * 5000}),
    "huge float count": ("", {}, {"operation": "retrieve", "last_n": 1e308}),
    "huge float token limit": (
        "",
        {},
        {"operation": "retrieve", "context": True, "token_limit": 1e308},
    ),
}


@pytest.fixture(scope="module")
def roomy():
    """A daemon that accepts 2 MB utterances, so the 1 MB stores reach the core."""
    with (
        running(
            buffer_size=3,
            eviction_batch=1,
            max_utterance_chars=2_000_000,
            max_tokens=4_000_000,
            summarizer_process=False,
        ) as server,
        channel_to(server) as open_channel,
    ):
        yield open_channel


class TestHostileShapesAtLargeSizes:
    """1 MB of the shapes that once stalled the daemon: a deliberate answer, and health still answers."""

    @pytest.mark.parametrize("shape", list(_HOSTILE))
    def test_a_1_mb_hostile_request_gets_a_deliberate_status_and_health_still_answers(
        self, roomy, shape
    ):
        query, metadata, data = _HOSTILE[shape]
        assert _code(roomy, request(query, metadata, data)) not in FORBIDDEN | {
            grpc.StatusCode.DEADLINE_EXCEEDED
        }
        assert health_status(roomy) == "SERVING"
