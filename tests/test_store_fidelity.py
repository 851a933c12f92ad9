"""Stores keep exactly the utterance, or are refused: the shapes of issue 12, in the parser and over gRPC."""

from __future__ import annotations

import time

import grpc
import pytest

from chd.core.errors import InvalidRequest
from chd.core.language.grammar.store import UnclearStore
from chd.core.language.parser import NotUnderstood, parse
from tests.conftest import query

# (query, the text kept, the speaker named or None)
SHAPES = [
    ("Save this for later: the gate code is 4411", "the gate code is 4411", None),
    (
        "Note the following from the assistant \u2014 Checkout is at 11.",
        "Checkout is at 11.",
        "assistant",
    ),
    ("Into the history, as the user: 'Call me back at six.'", "Call me back at six.", "user"),
    ("Memory entry, assistant side: Room 12 is ready", "Room 12 is ready", "assistant"),
    ("Add this -> the lift is broken", "the lift is broken", None),
    ("Store this message => see you at 5", "see you at 5", None),
    ("Record the system line \u2013 be brief", "be brief", "system"),
    ("Log a reply from the bot - Sure thing", "Sure thing", "assistant"),
    ("Keep this from the customer\nMy order never arrived", "My order never arrived", "user"),
    ("'We fly out Monday.' \u2014 that's from the user, keep it", "We fly out Monday.", "user"),
    (
        "Here is the assistant's answer, 'Yes, pets are allowed.', add it",
        "Yes, pets are allowed.",
        "assistant",
    ),
    ("We fly out Monday \u2014 that's from the user, keep it", "We fly out Monday", "user"),
    ("note that the user told us: I prefer aisle seats", "I prefer aisle seats", "user"),
    ("what the assistant answered was: We open at nine.", "We open at nine.", "assistant"),
    ("The user asked, \u201cIs breakfast included?\u201d", "Is breakfast included?", "user"),
    ("Save: delete utterance 3", "delete utterance 3", None),
    ("Add utterance: 'It's 10:30 - don't be late'", "It's 10:30 - don't be late", None),
    ("Add: 'hi' and 'bye'", "'hi' and 'bye'", None),
    ("Remember that the user prefers aisle seats", "the user prefers aisle seats", None),
    ("Please add `ls -la` as the user's message", "ls -la", "user"),
    (
        "Insert this (speaker: bot) \u2014 'Ratio is 3:2 => fine'",
        "Ratio is 3:2 => fine",
        "assistant",
    ),
    ("Please note that the meeting moved to 10", "the meeting moved to 10", None),
    ("remember that Did the assistant say 'Paris'?", "Did the assistant say 'Paris'?", None),
]


class TestShapes:
    """Each shape of the issue stores exactly its utterance with the speaker it names."""

    @pytest.mark.parametrize(("text", "kept", "speaker"), SHAPES, ids=[s[0][:40] for s in SHAPES])
    def test_the_utterance_is_kept_exactly(self, text: str, kept: str, speaker: str | None) -> None:
        """No word of the instruction is stored, and none of the utterance is lost."""
        parsed = parse(text)
        assert parsed.operation == "store"
        assert parsed.fields.get("text") == kept
        assert parsed.fields.get("speaker") == speaker

    def test_a_bare_header_leaves_the_text_to_data(self) -> None:
        """'Add the assistant's message' with nothing after it names the speaker and no text."""
        assert parse("Add the assistant's message").fields == {"speaker": "assistant"}


class TestRefusals:
    """An instruction not fully understood refuses the store and says which words."""

    @pytest.mark.parametrize(
        ("text", "unclear"),
        [
            ("Save this for my boss: the gate code is 4411", "boss"),
            ("Don't save this: hello", "don't"),
            ("Add a message to the user: hi", "to"),
            ("Remember the meeting: 5pm", "meeting"),
            ("Store it in the summary: hello", "summary"),
            ("Add 'hi' to the greetings list", "greetings"),
            ("Save the gate code is 4411", "gate"),
            ("Add this, speaker: user - hi", "speaker (at the end, before the text)"),
            ("note that the user told us I prefer aisle seats", "prefer"),
        ],
    )
    def test_unclear_words_are_named_and_quotes_or_data_text_suggested(
        self, text: str, unclear: str
    ) -> None:
        """The refusal names the word it could not place and says how to store anyway."""
        with pytest.raises(UnclearStore) as refused:
            parse(text)
        message = str(refused.value)
        assert repr(unclear) in message and "quotes" in message and "data.text" in message

    def test_a_refused_store_is_never_handed_to_a_classifier(self) -> None:
        """UnclearStore is not NotUnderstood, so no model may guess where the utterance starts."""
        with pytest.raises(InvalidRequest) as refused:
            parse("Jot this down somewhere: I like tea")
        assert not isinstance(refused.value, NotUnderstood)

    def test_the_refusal_quotes_only_a_short_prefix(self) -> None:
        """A long query is not echoed back: at most 60 characters of the instruction appear."""
        with pytest.raises(UnclearStore) as refused:
            parse("Save this for my boss: " + "x" * 5000)
        assert "x" * 100 not in str(refused.value)

    def test_two_speakers_are_refused(self) -> None:
        """'from the user, as the assistant' names two speakers: no guess between them."""
        with pytest.raises(InvalidRequest, match="two speakers"):
            parse("Add this from the user as the assistant: hello")


class TestOtherOperationsStayThemselves:
    """Reads and removes with a colon or a quote are never taken for stores."""

    @pytest.mark.parametrize(
        ("text", "operation"),
        [
            ("Find utterances about 'budget'", "retrieve"),
            ('Did the user say "Paris"?', "retrieve"),
            ("Get utterance 6", "retrieve"),
            ("Remove utterance 3", "remove"),
            ("Mark utterance 2 as important", "mark"),
            ("Show the log: last 5", "retrieve"),
            ("What was stored about Paris?", "retrieve"),
        ],
    )
    def test_the_asked_operation_runs(self, text: str, operation: str) -> None:
        """The operation the caller asked for is the one parsed."""
        assert parse(text).operation == operation


def _best_of_three(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        parsed = parse(text)
        best = min(best, time.perf_counter() - start)
        assert parsed.operation == "store"
    return best


class TestPayloadIsNotParsed:
    """The utterance is payload: its size costs linear time, and it comes back exactly."""

    @pytest.mark.parametrize(
        "shape",
        [
            "Add utterance: {}",
            "Note the following from the assistant \u2014 {}",
            "Here is the user's answer, \u201c{}\u201d, add it",
            "{} \u2014 that's from the user, keep it",
        ],
    )
    def test_a_megabyte_utterance_is_kept_exactly_in_linear_time(self, shape: str) -> None:
        """Ten times the text costs at most about ten times as much (generous margin: 40x)."""
        unit = "Meet at 10:30 - bring 'the map' => gate B7: \"now\".\n"
        small = (unit * (100_000 // len(unit))).strip()
        large = (unit * (1_000_000 // len(unit))).strip()
        assert parse(shape.format(large)).fields["text"] == large
        assert _best_of_three(shape.format(large)) <= 40 * max(
            _best_of_three(shape.format(small)), 1e-4
        )


class TestOverGrpc:
    """Stores through the real server keep the text exactly; unclear ones change nothing."""

    def test_each_shape_stores_exactly_its_text(self, stub) -> None:  # type: ignore[no-untyped-def]
        """The text read back over gRPC is the utterance, byte for byte, with its speaker."""
        shapes = SHAPES[:6] + SHAPES[9:12]
        for i, (text, kept, speaker) in enumerate(shapes):
            response = query(stub, text, {"conversation_id": "fidelity"})
            assert response.operation == "store"
            assert response.result["utterance"]["text"] == kept
            assert response.result["utterance"]["speaker"] == (speaker or "user")
            assert int(response.result["utterance"]["seq"]) == i + 1
        back = query(stub, "Get all utterances", {"conversation_id": "fidelity"})
        assert [u["text"] for u in back.result["utterances"]] == [kept for _, kept, _ in shapes]

    def test_a_long_utterance_full_of_separators_round_trips(self, stub) -> None:  # type: ignore[no-untyped-def]
        """15,000 characters of colons, dashes, quotes and newlines are stored as given."""
        unit = "Meeting notes: bring the map - 'gate B7' \u2014 \"boarding\" => tomorrow morning\n"
        text = (unit * (15_000 // len(unit))).strip()
        response = query(stub, f"Into the history, as the assistant: {text}")
        assert response.result["utterance"]["text"] == text

    def test_an_unclear_store_is_invalid_argument_and_stores_nothing(self, stub) -> None:  # type: ignore[no-untyped-def]
        """INVALID_ARGUMENT naming the unclear word; the conversation stays empty."""
        with pytest.raises(grpc.RpcError) as refused:
            query(stub, "Save this for my boss: the gate code is 4411")
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "'boss'" in refused.value.details()
        stats = query(stub, "How many utterances are stored?")
        assert stats.result["utterance_count"] == 0


def test_blank_instruction_text_reads_as_no_words() -> None:
    """Empty or blank text before or after a quote is no instruction at all, the same as an empty header."""
    from chd.core.language.grammar.store_header import Header, read_header

    for text in ("", " ", "\n", "\t  "):
        assert read_header(text) == Header()
    assert read_header(" save ") != Header()
