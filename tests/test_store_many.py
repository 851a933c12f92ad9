"""Store-many (issue 31): data.utterances stored in one commit, all or none, on every backend."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from chd.backends import Backend
from chd.client import Client, NotUnderstood, TooLarge
from chd.core.errors import InvalidRequest
from chd.core.errors import TooLarge as CoreTooLarge
from chd.core.history import ConversationHistory
from chd.core.language.intents import MAX_STORE_MANY, MAX_STORE_MANY_CHARS, build_intent
from chd.core.settings import Settings
from chd.service.server import Server
from tests.conftest import query


def _turn(i: int) -> dict[str, Any]:
    return {"text": f"line {i} of the import", "speaker": "user" if i % 2 == 0 else "assistant"}


def _many(history: ConversationHistory, items: list[Any], cid: str, key: str | None = None) -> Any:
    metadata: dict[str, Any] = {"conversation_id": cid}
    if key is not None:
        metadata["idempotency_key"] = key
    return history.query("", metadata, {"operation": "store", "utterances": items})


def _held(history: ConversationHistory, cid: str) -> list[tuple[int, int, str, str]]:
    state = history.backend.read(cid)
    return [
        (u.seq, u.turn_number, u.speaker, u.text)
        for u in sorted([*state.utterances, *state.pending, *state.archive], key=lambda u: u.seq)
    ]


@pytest.fixture
def quiet(backend: Backend) -> ConversationHistory:
    """No summaries, evictions archived: every utterance stays readable where it went."""
    return ConversationHistory(
        backend=backend,
        settings=Settings(summarization_enabled=False, archive_evicted=True),
        background=False,
    )


def test_a_batch_leaves_what_as_many_single_stores_leave(quiet: ConversationHistory) -> None:
    """Seqs, automatic turns, evictions and the buffer's order are those of 30 single stores, on every backend."""
    items = [_turn(i) for i in range(30)]
    quiet.query("Add utterance: before", {"conversation_id": "one"})
    quiet.query("Add utterance: before", {"conversation_id": "many"})
    for item in items:
        quiet.query(
            "",
            {"conversation_id": "one", "speaker": item["speaker"]},
            {"operation": "store", "text": item["text"]},
        )
    answer = _many(quiet, items, "many")
    assert _held(quiet, "many") == _held(quiet, "one")
    one, many = quiet.backend.read("one"), quiet.backend.read("many")
    assert [u.seq for u in many.utterances] == [u.seq for u in one.utterances]
    assert (many.next_seq, many.last_turn) == (one.next_seq, one.last_turn)
    assert [u["seq"] for u in answer.result["utterances"]] == list(range(2, 32))
    assert answer.result["evicted"] == [u.seq for u in many.archive]
    assert answer.metadata["items_affected"] == 30
    buffered = {u.seq: i for i, u in enumerate(many.utterances)}
    assert [u.get("utterance_index") for u in answer.result["utterances"]] == [
        buffered.get(u["seq"]) for u in answer.result["utterances"]
    ]


@pytest.mark.parametrize(
    "bad,refusal",
    [
        ({"text": "fine", "speaker": "bot"}, InvalidRequest),
        ({"text": "fine", "colour": "red"}, InvalidRequest),
        ({"speaker": "user"}, InvalidRequest),
        ("just a string", InvalidRequest),
        ({"text": "x " * 9000}, CoreTooLarge),  # over max_tokens alone: refused in the decision
    ],
)
def test_one_bad_item_refuses_the_whole_batch(
    quiet: ConversationHistory, bad: Any, refusal: type[Exception]
) -> None:
    """Nothing of a batch with one bad item is stored, and the message names the item."""
    quiet.query("Add utterance: kept", {"conversation_id": "c"})
    before = _held(quiet, "c")
    with pytest.raises(refusal, match=r"data\.utterances\[2\]"):
        _many(quiet, [_turn(0), _turn(1), bad, _turn(3)], "c")
    assert _held(quiet, "c") == before
    assert quiet.backend.read("c").next_seq == 2


def test_one_key_stands_for_the_batch(quiet: ConversationHistory) -> None:
    """The batch sent again with its key is answered, not stored twice; another batch with it is refused."""
    items = [_turn(i) for i in range(25)]  # past the buffer: its first items are archived at once
    first = _many(quiet, items, "c", key="batch-1")
    again = _many(quiet, items, "c", key="batch-1")
    assert again.metadata["replayed"] is True and again.metadata["items_affected"] == 0
    assert again.result["utterances"] == first.result["utterances"]
    assert quiet.backend.read("c").next_seq == 26
    changed = [*items[:-1], {"text": "something else", "speaker": items[-1]["speaker"]}]
    for other in (changed, items[:-1], [*items, _turn(99)]):
        with pytest.raises(InvalidRequest, match="batch-1"):
            _many(quiet, other, "c", key="batch-1")
    assert quiet.backend.read("c").next_seq == 26
    # A single store cannot take a batch utterance's key.
    with pytest.raises(InvalidRequest, match="U\\+001F"):
        quiet.query("Add utterance: x", {"idempotency_key": "batch-1\x1f0"})


def test_the_limits_are_refused_by_name() -> None:
    """Over 1000 utterances or 4,000,000 characters: INVALID_ARGUMENT naming the limit."""
    too_many = [{"text": "a"}] * (MAX_STORE_MANY + 1)
    with pytest.raises(InvalidRequest, match=f"the limit is {MAX_STORE_MANY} per request"):
        build_intent("store", {}, {}, {"utterances": too_many})
    half = "b" * (MAX_STORE_MANY_CHARS // 2 + 1)
    with pytest.raises(InvalidRequest, match=f"the limit is {MAX_STORE_MANY_CHARS:,} per request"):
        build_intent("store", {}, {}, {"utterances": [{"text": half}, {"text": half}]})
    with pytest.raises(InvalidRequest, match="not beside them"):
        build_intent("store", {}, {"speaker": "user"}, {"utterances": [{"text": "c"}]})
    with pytest.raises(InvalidRequest, match="non-empty list"):
        build_intent("store", {}, {}, {"utterances": []})


def test_store_many_through_grpc(server: Server) -> None:
    """End to end on every backend: the client's store_many, every text readable exactly; a bad batch stores nothing."""
    texts = ["  leading spaces", "ünïcödé ✓", "Remove everything", "line\nbreak"]
    with Client(f"127.0.0.1:{server.port}") as client:
        stored = client.store_many(
            [
                {"text": t, "speaker": "assistant" if i % 2 else "user", "turn_number": 7}
                for i, t in enumerate(texts)
            ],
            conversation="wire",
        )
        assert [u.seq for u in stored.utterances] == [1, 2, 3, 4]
        assert [u.turn for u in stored.utterances] == [7, 7, 7, 7]
        assert [u.text for u in client.last(10, conversation="wire")] == texts
        with pytest.raises(NotUnderstood, match=r"data\.utterances\[1\]\.timestamp"):
            client.store_many(
                [{"text": "a"}, {"text": "b", "timestamp": "yesterday"}], conversation="wire"
            )
        with pytest.raises(TooLarge):
            client.store_many(
                [{"text": "a"}, {"text": "z" * 40_000}], conversation="wire"
            )  # over max_utterance_chars
        assert [u.text for u in client.last(10, conversation="wire")] == texts
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        from chd.v1 import daemon_pb2_grpc

        with pytest.raises(grpc.RpcError) as refused:
            query(
                daemon_pb2_grpc.DaemonStub(channel),
                "",
                {"conversation_id": "wire"},
                {"operation": "store", "utterances": [{"text": "a"}] * (MAX_STORE_MANY + 1)},
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert str(MAX_STORE_MANY) in (refused.value.details() or "")
    finally:
        channel.close()


def test_a_key_names_one_kind_of_store(server: Server) -> None:
    """A key used by a single store is refused for a batch, and the reverse: the text is never stored
    twice under one key (outside review of issue 31, finding 2)."""
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        from chd.v1 import daemon_pb2_grpc

        stub = daemon_pb2_grpc.DaemonStub(channel)

        def send(cid: str, key: str, data: dict[str, Any]) -> Any:
            return query(
                stub,
                "",
                {"conversation_id": cid, "idempotency_key": key},
                {"operation": "store", **data},
            )

        send("kinds-1", "S", {"text": "alpha"})
        send("kinds-2", "Q", {"utterances": [{"text": "one"}]})
        for cid, key, data in (
            ("kinds-1", "S", {"utterances": [{"text": "alpha"}]}),
            ("kinds-2", "Q", {"text": "one"}),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                send(cid, key, data)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "one kind of store" in (refused.value.details() or "")
        # Each kind still replays itself.
        assert send("kinds-1", "S", {"text": "alpha"}).metadata["replayed"] is True
        assert send("kinds-2", "Q", {"utterances": [{"text": "one"}]}).metadata["replayed"] is True
    finally:
        channel.close()
    with Client(f"127.0.0.1:{server.port}") as client:
        assert [u.text for u in client.last(10, conversation="kinds-1")] == ["alpha"]
        assert [u.text for u in client.last(10, conversation="kinds-2")] == ["one"]


def test_the_clients_store_many_names_a_bad_item_and_takes_datetimes_and_turn(
    server: Server,
) -> None:
    """A string item and a naive datetime get a TypeError/ValueError naming the item, not protobuf's
    words; an aware datetime and ``turn`` (Client.store's name) are taken (outside review of issue 31)."""
    from datetime import datetime, timedelta, timezone

    with Client(f"127.0.0.1:{server.port}") as client:
        with pytest.raises(TypeError, match=r"utterances\[1\] must be a mapping"):
            client.store_many([{"text": "a"}, "b"], conversation="typed")
        with pytest.raises(ValueError, match=r"utterances\[0\]\.timestamp .* without a timezone"):
            client.store_many([{"text": "a", "timestamp": datetime(2026, 1, 2, 3, 4, 5)}])
        with pytest.raises(ValueError, match=r"utterances\[0\] has both turn and turn_number"):
            client.store_many([{"text": "a", "turn": 1, "turn_number": 1}])
        when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
        stored = client.store_many(
            [{"text": "a", "timestamp": when, "turn": 4}, {"text": "b", "turn_number": 4}],
            conversation="typed",
        )
        assert [u.turn for u in stored.utterances] == [4, 4]
        assert [u.text for u in client.last(5, conversation="typed")] == ["a", "b"]
        assert stored.utterances[0].timestamp.startswith("2026-01-02T01:04:05")


def test_plural_store_instructions_take_data_utterances(stub: Any) -> None:
    """'Add utterances', 'Store the following utterances', 'Add these messages' store the batch; an
    instruction still not understood points to data.utterances (outside review of issue 31, finding 6)."""
    items = [{"text": "p"}, {"text": "q", "speaker": "assistant"}]
    seqs = []
    for text in ("Add utterances", "Store the following utterances", "Add these messages"):
        answer = query(stub, text, {"conversation_id": "plural"}, {"utterances": items})
        assert answer.operation == "store"
        seqs += [int(u["seq"]) for u in answer.result["utterances"]]
    assert seqs == [1, 2, 3, 4, 5, 6]
    with pytest.raises(grpc.RpcError) as refused:
        query(stub, "Add these 2 utterances", {"conversation_id": "plural"}, {"utterances": items})
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "data.utterances" in (refused.value.details() or "")
