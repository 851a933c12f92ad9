"""The transport-free core: buffer, turns, eviction, summary, operations, errors."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from chd.core.errors import InvalidRequest, NotFound, TooLarge
from chd.core.history import ConversationHistory
from chd.core.settings import Settings


def store(h: ConversationHistory, text: str, speaker: str = "user", **metadata) -> dict:
    return h.query(f"Add {speaker} utterance: {text}", metadata).result["utterance"]


def seqs(h: ConversationHistory, **metadata) -> list[int]:
    return [u["seq"] for u in h.query("Get all utterances", metadata).result["utterances"]]


class TestStore:
    """Stored utterances carry the fields the spec lists."""

    def test_utterance_has_every_field(self, history: ConversationHistory) -> None:
        """seq, speaker, text, turn, index, RFC 3339 timestamp, tokens and conversation are set."""
        u = store(history, "What's the weather?")
        assert u["seq"] == 1 and u["speaker"] == "user" and u["text"] == "What's the weather?"
        assert u["turn_number"] == 1 and u["utterance_index"] == 0
        assert u["conversation_id"] == "default"
        assert u["tokens"] == history.counter.count("What's the weather?")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", u["timestamp"])
        stamped = datetime.fromisoformat(u["timestamp"].replace("Z", "+00:00"))
        assert abs((datetime.now(UTC) - stamped).total_seconds()) < 60

    def test_seq_is_monotonic_and_never_reused(self, history: ConversationHistory) -> None:
        """After removing the newest and clearing, the next seq still goes up."""
        for i in range(3):
            store(history, f"u{i}")
        history.query("Remove utterance 3")
        assert store(history, "next")["seq"] == 4
        history.query("Clear the conversation")
        assert store(history, "after clear")["seq"] == 5

    def test_response_metadata_counts_items_and_tokens(self, history: ConversationHistory) -> None:
        """A store reports one item and the utterance's tokens."""
        r = history.query("Add utterance: hello world")
        assert r.metadata["items_affected"] == 1
        assert r.metadata["tokens_used"] == 2


class TestTurns:
    """A user utterance opens a turn; assistant and system utterances join it."""

    def test_utterance_grouping(self, history: ConversationHistory) -> None:
        """user, assistant, user, assistant give turns 1, 1, 2, 2."""
        turns = [
            store(history, "x", sp)["turn_number"]
            for sp in ("user", "assistant", "user", "assistant")
        ]
        assert turns == [1, 1, 2, 2]

    def test_system_preamble_is_turn_zero(self, history: ConversationHistory) -> None:
        """A system prompt before any user utterance belongs to turn 0."""
        assert store(history, "be helpful", "system")["turn_number"] == 0
        assert store(history, "hi")["turn_number"] == 1

    def test_explicit_turn_number_is_respected(self, history: ConversationHistory) -> None:
        """metadata.turn_number wins, and later automatic turns continue after it."""
        assert store(history, "x", turn_number=5)["turn_number"] == 5
        assert store(history, "y", "assistant")["turn_number"] == 5
        assert store(history, "z")["turn_number"] == 6

    def test_speaker_from_metadata(self, history: ConversationHistory) -> None:
        """'Add utterance:' takes metadata.speaker."""
        r = history.query("Add utterance: hello", {"speaker": "assistant"})
        assert r.result["utterance"]["speaker"] == "assistant"

    def test_speaker_defaults_to_user(self, history: ConversationHistory) -> None:
        """With no speaker anywhere, the utterance is the user's."""
        assert history.query("Add utterance: hello").result["utterance"]["speaker"] == "user"


class TestEviction:
    """The buffer keeps at most buffer_size utterances and max_tokens tokens."""

    def test_spec_scenario_evicts_one_to_five(self) -> None:
        """The 21st utterance evicts 1-5 into a summary that mentions the weather; last 5 are 17-21."""
        h = ConversationHistory(settings=Settings())
        script = [
            ("user", "What's the weather?"),
            ("assistant", "I'll check the weather. Today is sunny and 22 degrees."),
            ("user", "How about tomorrow?"),
            ("assistant", "Tomorrow will be rainy, around 15 degrees."),
            ("user", "Should I take an umbrella?"),
        ]
        script += [
            (
                "assistant" if i % 2 == 0 else "user",
                f"We talked about item {i} of the reading list.",
            )
            for i in range(6, 21)
        ]
        for speaker, text in script:
            assert store(h, text, speaker)["seq"] <= 20
        r = h.query("Add user utterance: Tell me about Paris")
        assert r.result["evicted"] == [1, 2, 3, 4, 5]
        summary = h.get_summary()
        assert "weather" in summary["summary"].lower()
        assert summary["summary_through_seq"] == 5 and summary["summary_pending"] == 0
        assert [u["seq"] for u in h.get_last_n(5)] == [17, 18, 19, 20, 21]
        assert [u["utterance_index"] for u in h.get_last_n(5)] == [11, 12, 13, 14, 15]

    def test_evicts_oldest_when_over_buffer_size(self) -> None:
        """With buffer_size 3 and batch 1, the fourth store evicts seq 1 only."""
        h = ConversationHistory(settings=Settings(buffer_size=3, eviction_batch=1))
        for i in range(4):
            store(h, f"utterance {i}")
        assert seqs(h) == [2, 3, 4]

    def test_evicts_by_tokens(self) -> None:
        """When max_tokens is passed, the oldest go until the buffer fits again."""
        h = ConversationHistory(settings=Settings(max_tokens=30, eviction_batch=1))
        for _ in range(6):
            store(h, "one two three four five six seven eight nine ten")
        state = h.backend.read("default")
        assert sum(u.tokens for u in state.utterances) <= 30
        assert seqs(h)[-1] == 6

    def test_utterance_over_max_tokens_is_refused(self) -> None:
        """An utterance that alone exceeds max_tokens is RESOURCE_EXHAUSTED and not stored."""
        h = ConversationHistory(settings=Settings(max_tokens=5))
        with pytest.raises(TooLarge, match="max_tokens"):
            store(h, "this sentence has clearly more than five tokens in it")
        assert seqs(h) == []

    def test_utterance_over_char_limit_is_refused(self) -> None:
        """max_utterance_chars bounds the text before anything is counted or stored."""
        h = ConversationHistory(settings=Settings(max_utterance_chars=10))
        with pytest.raises(TooLarge, match="characters"):
            store(h, "x" * 11)
        assert seqs(h) == []

    def test_summary_never_exceeds_its_budget(self) -> None:
        """Over many evictions the stored summary stays within summary_token_limit."""
        h = ConversationHistory(
            settings=Settings(buffer_size=4, summary_token_limit=40, eviction_batch=2)
        )
        for i in range(40):
            store(
                h,
                f"Fact {i}: the project codename is Falcon{i} and the budget is {i * 1000} euros.",
            )
            assert h.backend.read("default").summary.tokens <= 40
            assert h.counter.count(h.backend.read("default").summary.text) <= 40
        assert h.get_summary()["summary"]


class TestIsolation:
    """metadata.conversation_id isolates conversations completely."""

    def test_conversations_do_not_see_each_other(self, history: ConversationHistory) -> None:
        """Seq, turns and contents are per conversation."""
        store(history, "alpha", conversation_id="a")
        store(history, "beta", conversation_id="b")
        b = history.query("Get all utterances", {"conversation_id": "b"}).result["utterances"]
        assert [(u["seq"], u["text"], u["turn_number"]) for u in b] == [(1, "beta", 1)]
        history.query("Clear the conversation", {"conversation_id": "a"})
        assert seqs(history, conversation_id="b") == [1]


class TestRetrieve:
    """Filters, ranking and the summary."""

    @pytest.fixture
    def filled(self, history: ConversationHistory) -> ConversationHistory:
        store(history, "What's the weather in Paris?")
        store(history, "It is sunny in Paris.", "assistant")
        store(history, "And the trains to Lyon?")
        store(history, "Trains to Lyon leave hourly.", "assistant")
        return history

    def test_topic_search_ranks_and_scores(self, filled: ConversationHistory) -> None:
        """Only utterances about the topic come back, each with a score, best first."""
        hits = filled.query("Find utterances about trains").result["utterances"]
        assert {u["seq"] for u in hits} == {3, 4}
        assert all(h["score"] > 0 for h in hits)
        assert hits[0]["score"] >= hits[1]["score"]

    def test_metadata_speaker_filters_a_topic_search(self, filled: ConversationHistory) -> None:
        """The spec's 'Find utterances about weather' with metadata.speaker user."""
        hits = filled.query("Find utterances about Paris", {"speaker": "user"}).result["utterances"]
        assert [u["seq"] for u in hits] == [1]

    def test_turn_range(self, filled: ConversationHistory) -> None:
        """Turns 2 to 2 is the second exchange."""
        assert [
            u["seq"] for u in filled.query("Get utterances in turn 2").result["utterances"]
        ] == [3, 4]

    def test_by_seq_and_missing_seq(self, filled: ConversationHistory) -> None:
        """A present seq is returned; an unknown one is NOT_FOUND."""
        assert (
            filled.query("Get utterance 2").result["utterances"][0]["text"]
            == "It is sunny in Paris."
        )
        with pytest.raises(NotFound, match=r"no utterance 99 yet \(the newest is 4\)"):
            filled.query("Get utterance 99")

    def test_a_missing_seq_of_an_empty_conversation_says_it_holds_nothing(self) -> None:
        """Not "the newest is 0" (newcomer 32 #21)."""
        history = ConversationHistory(background=False)
        try:
            with pytest.raises(NotFound) as refused:
                history.query("Get utterance 99")
        finally:
            history.close()
        assert str(refused.value).endswith(
            "there is no utterance 99: the conversation holds no utterances yet"
        )

    def test_last_n_larger_than_buffer_returns_all(self, filled: ConversationHistory) -> None:
        """Asking for more than there is returns what there is, in order."""
        assert [
            u["seq"] for u in filled.query("Get the last 10 utterances").result["utterances"]
        ] == [1, 2, 3, 4]

    def test_include_summary(self, filled: ConversationHistory) -> None:
        """'with summary' adds the summary fields beside the utterances."""
        r = filled.query("Get the last 2 utterances with summary")
        assert [u["seq"] for u in r.result["utterances"]] == [3, 4]
        assert {"summary", "summary_tokens", "summary_through_seq", "summary_pending"} <= set(
            r.result
        )


class TestRemove:
    """Removes delete exactly what they name."""

    @pytest.fixture
    def turns(self, history: ConversationHistory) -> ConversationHistory:
        for turn in range(1, 5):
            store(history, f"question {turn}")
            store(history, f"answer {turn}", "assistant")
        return history

    def test_remove_oldest(self, turns: ConversationHistory) -> None:
        """'Remove oldest utterance' removes seq 1 only."""
        assert turns.query("Remove oldest utterance").result["removed"] == [1]
        assert seqs(turns)[0] == 2

    def test_remove_before_turn_keeps_later_turns(self, turns: ConversationHistory) -> None:
        """'Remove before turn 3' removes turns 1 and 2 and keeps 3 and 4."""
        r = turns.query("Remove before turn 3")
        assert r.result["removed"] == [1, 2, 3, 4]
        assert r.metadata["items_affected"] == 4
        assert seqs(turns) == [5, 6, 7, 8]

    def test_remove_by_seq_and_missing(self, turns: ConversationHistory) -> None:
        """A named seq goes; a seq that is not there is NOT_FOUND and nothing changes."""
        assert turns.query("Remove utterance 5").result["removed"] == [5]
        with pytest.raises(NotFound):
            turns.query("Remove utterance 5")
        assert seqs(turns) == [1, 2, 3, 4, 6, 7, 8]

    def test_clear_removes_summary_too(self) -> None:
        """Clearing a conversation deletes buffer and summary."""
        h = ConversationHistory(settings=Settings(buffer_size=2, eviction_batch=1))
        for i in range(5):
            store(h, f"Remember the code word banana{i}.")
        assert h.get_summary()["summary"]
        h.query("Clear the conversation")
        assert seqs(h) == [] and h.get_summary()["summary"] == ""


class TestSummarize:
    """Summarize never exceeds its token limit."""

    @pytest.mark.parametrize("limit", [5, 20, 60, 300])
    def test_summary_within_token_limit(self, history: ConversationHistory, limit: int) -> None:
        """result.tokens and a real count of result.summary are both <= the limit."""
        for i in range(12):
            store(
                history,
                f"Sentence {i} says the launch is on day {i} with budget {i * 7}.",
                "user" if i % 2 else "assistant",
            )
        r = history.query("Summarize conversation", data={"token_limit": limit})
        assert r.operation == "summarize"
        assert 0 < r.result["tokens"] <= limit
        assert history.counter.count(r.result["summary"]) == r.result["tokens"]

    def test_summary_of_empty_conversation_is_empty(self, history: ConversationHistory) -> None:
        """Nothing stored, nothing to summarize."""
        r = history.query("Summarize conversation")
        assert r.result["summary"] == "" and r.result["tokens"] == 0


class TestDataOperation:
    """data.operation skips the parser with the same fields."""

    def test_every_operation_through_data(self, history: ConversationHistory) -> None:
        """store, retrieve, remove, summarize all work with no query text."""
        r = history.query(
            "", {"speaker": "assistant", "turn_number": 2}, {"operation": "store", "text": "hi"}
        )
        assert (
            r.result["utterance"]["speaker"] == "assistant"
            and r.result["utterance"]["turn_number"] == 2
        )
        history.query("", {}, {"operation": "store", "text": "second"})
        assert [
            u["seq"] for u in history.query("", {}, {"operation": "retrieve"}).result["utterances"]
        ] == [1, 2]
        assert [
            u["seq"]
            for u in history.query("", {}, {"operation": "retrieve", "last_n": 1}).result[
                "utterances"
            ]
        ] == [2]
        assert history.query("", {}, {"operation": "remove", "oldest": 1}).result["removed"] == [1]
        assert (
            history.query("", {}, {"operation": "summarize", "token_limit": 50}).result["tokens"]
            <= 50
        )

    def test_text_that_looks_like_an_operation_is_stored_verbatim(
        self, history: ConversationHistory
    ) -> None:
        """data.text is never parsed."""
        r = history.query("ignored", {}, {"operation": "store", "text": "Remove all utterances"})
        assert r.result["utterance"]["text"] == "Remove all utterances"


class TestErrors:
    """Bad input is refused with a clear message and changes nothing."""

    @pytest.mark.parametrize(
        ("query", "data", "operation"),
        [
            ("Get the last 5 utterances", {"last_n": "x"}, "retrieve"),
            ("Remove utterance 2", {"seqs": "two"}, "remove"),
            ("Fly me to the moon", {}, "unknown"),
        ],
    )
    def test_a_refused_query_names_the_operation_it_asked_for(
        self, history: ConversationHistory, query: str, data: dict, operation: str
    ) -> None:
        """A query read by the rules and refused on a field carries its operation for the trace and metrics."""
        with pytest.raises(InvalidRequest) as refused:
            history.query(query, data=data)
        assert refused.value.operation == operation

    @pytest.mark.parametrize(
        ("metadata", "data", "fragment"),
        [
            ({"turn_number": "abc"}, {}, "metadata.turn_number must be a whole number"),
            ({"turn_number": -1}, {}, "metadata.turn_number must be at least 0"),
            ({"turn_number": 2.5}, {}, "metadata.turn_number must be a whole number"),
            ({"speaker": "robot"}, {}, "metadata.speaker must be one of"),
            ({"conversation_id": 7}, {}, "metadata.conversation_id must be a string"),
            ({"conversation_id": ""}, {}, "metadata.conversation_id must not be empty"),
            ({}, {"operation": "store", "text": ""}, "data.text must not be empty"),
            (
                {},
                {"operation": "store", "text": "x", "colour": "red"},
                "data.colour is not a parameter of store",
            ),
            ({}, {"operation": "fly"}, "unknown operation 'fly'"),
            ({"speaker": "assistant"}, {}, "speaker is given twice"),
        ],
    )
    def test_bad_input_is_refused_and_nothing_changes(
        self, history: ConversationHistory, metadata: dict, data: dict, fragment: str
    ) -> None:
        """Each bad field is named in the error and no utterance is stored."""
        store(history, "before")
        with pytest.raises(InvalidRequest, match=fragment):
            history.query("Add user utterance: hello", metadata, data)
        assert seqs(history) == [1]
        assert history.backend.read("default").next_seq == 2

    def test_conflicting_last_n_is_refused(self, history: ConversationHistory) -> None:
        """'last 5' in the text and last_n 3 in data disagree: refused."""
        with pytest.raises(InvalidRequest, match="last_n is given twice"):
            history.query("Get the last 5 utterances", {}, {"last_n": 3})

    def test_remove_from_both_ends_is_refused(self, history: ConversationHistory) -> None:
        """A data remove with both oldest and newest is ambiguous and removes nothing."""
        store(history, "x")
        store(history, "y")
        with pytest.raises(InvalidRequest, match="oldest or newest, not both"):
            history.query("", {}, {"operation": "remove", "oldest": 1, "newest": 1})
        assert seqs(history) == [1, 2]


class TestSpecMethods:
    """get_last_n and get_summary exist on the core as in the spec."""

    def test_get_last_n_and_get_summary(self, history: ConversationHistory) -> None:
        """They agree with the equivalent queries."""
        for i in range(7):
            store(history, f"u{i}")
        assert (
            history.get_last_n(2) == history.query("Get the last 2 utterances").result["utterances"]
        )
        assert history.get_summary() == history.query("Get summary").result


def test_data_store_without_text_is_invalid_argument(history: ConversationHistory) -> None:
    """data.operation store with no text names the missing field instead of crashing."""
    with pytest.raises(InvalidRequest, match="store needs text"):
        history.query("", {}, {"operation": "store"})


class TestUtteranceRecords:
    """An utterance read back from its record is the utterance that was stored."""

    def test_from_record_makes_what_the_constructor_makes_for_every_field(self):
        """Every field round-trips, numbers given as text are converted, and nothing is left unset."""
        import dataclasses

        from chd.core.utterance import Utterance

        stored = Utterance(
            "conv-7",
            42,
            "assistant",
            "the ferry leaves at 9:40",
            21,
            "2026-01-01T00:00:00.000000Z",
            9,
            important=True,
        )
        assert Utterance.from_record(stored.to_record()) == stored
        assert hash(Utterance.from_record(stored.to_record())) == hash(stored)
        loose = {**stored.to_record(), "seq": "42", "tokens": "9", "turn_number": "21"}
        del loose["important"]
        assert Utterance.from_record(loose) == dataclasses.replace(stored, important=False)
        made = Utterance.from_record(stored.to_record())
        assert {
            f.name: getattr(made, f.name) for f in dataclasses.fields(Utterance)
        } == dataclasses.asdict(stored)
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.seq = 1  # type: ignore[misc]
