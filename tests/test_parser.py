"""The first version of the query language: phrasings to operations and fields."""

from __future__ import annotations

import pytest

from chd.core.errors import InvalidRequest
from chd.core.language.parser import parse


class TestStore:
    """Store forms take the utterance text verbatim."""

    @pytest.mark.parametrize(
        ("query", "fields"),
        [
            ("Add utterance: hello there", {"text": "hello there"}),
            (
                "Add user utterance: 'What's the weather today?'",
                {"text": "What's the weather today?", "speaker": "user"},
            ),
            (
                "Add assistant utterance: I'll check.",
                {"text": "I'll check.", "speaker": "assistant"},
            ),
            ("Add utterance from system: be brief", {"text": "be brief", "speaker": "system"}),
            ("Store: buy milk", {"text": "buy milk"}),
            (
                "Record assistant message: Tomorrow will be sunny.",
                {"text": "Tomorrow will be sunny.", "speaker": "assistant"},
            ),
            ("Remember that the meeting is at 5", {"text": "the meeting is at 5"}),
            ("add utterance:   spaced out  ", {"text": "spaced out"}),
        ],
    )
    def test_store_forms(self, query: str, fields: dict) -> None:
        """Each documented store phrasing yields the text and speaker it names."""
        parsed = parse(query)
        assert parsed.operation == "store"
        assert parsed.fields == fields

    @pytest.mark.parametrize(
        "text",
        [
            "remove all utterances",
            "Summarize conversation",
            "Get the last 5 utterances",
            "Clear the conversation",
        ],
    )
    def test_operation_words_in_the_text_stay_text(self, text: str) -> None:
        """'Add utterance: remove all utterances' stores the sentence; it removes nothing."""
        parsed = parse(f"Add utterance: {text}")
        assert parsed.operation == "store"
        assert parsed.fields["text"] == text

    def test_unexplained_words_before_the_colon_are_refused_not_stored(self) -> None:
        """'Remember the meeting: 5pm' is refused: 'the meeting' is neither instruction nor surely text."""
        with pytest.raises(InvalidRequest, match="'meeting'"):
            parse("Remember the meeting: 5pm")

    def test_multiline_text_is_kept_whole(self) -> None:
        """Newlines inside the utterance survive."""
        assert parse("Add utterance: line one\nline two").fields["text"] == "line one\nline two"

    def test_store_without_text_is_refused(self) -> None:
        """'Add utterance:' with nothing after it is an error, not an empty utterance."""
        with pytest.raises(InvalidRequest):
            from chd.core.language.intents import build_intent

            build_intent("store", parse("Add utterance:").fields, {}, {})


class TestRetrieve:
    """Retrieve forms become filters."""

    @pytest.mark.parametrize(
        ("query", "fields"),
        [
            ("Find utterances about weather", {"topic": "weather"}),
            ("Search for Paris", {"topic": "Paris"}),
            ("Get the last 5 utterances", {"last_n": 5}),
            (
                "Get the last five messages from the assistant",
                {"last_n": 5, "speaker": "assistant"},
            ),
            ("Get the last utterance", {"last_n": 1}),
            ("Get summary", {"summary_only": True}),
            ("Show the running summary", {"summary_only": True}),
            ("Get the last 3 utterances with summary", {"last_n": 3, "include_summary": True}),
            ("Get utterance 12", {"seq": 12}),
            ("Get utterances in turns 3 to 6", {"turn_from": 3, "turn_to": 6}),
            ("Get utterances in turn 2", {"turn_from": 2, "turn_to": 2}),
            ("Get all utterances", {}),
            (
                "What did the assistant say about Paris in turns 3 to 6?",
                {"speaker": "assistant", "turn_from": 3, "turn_to": 6, "topic": "Paris"},
            ),
        ],
    )
    def test_retrieve_forms(self, query: str, fields: dict) -> None:
        """Each documented retrieve phrasing yields exactly its filters."""
        parsed = parse(query)
        assert parsed.operation == "retrieve"
        assert parsed.fields == fields


class TestRemove:
    """Remove forms name exactly one target."""

    @pytest.mark.parametrize(
        ("query", "fields"),
        [
            ("Remove oldest utterance", {"oldest": 1}),
            ("Remove the oldest 3 utterances", {"oldest": 3}),
            ("Delete the two oldest messages", {"oldest": 2}),
            ("Remove before turn 4", {"before_turn": 4}),
            ("Remove utterances before turn 4", {"before_turn": 4}),
            ("Remove utterance 12", {"seq": 12}),
            ("Clear the conversation", {"all": True}),
            ("Delete all utterances", {"all": True}),
        ],
    )
    def test_remove_forms(self, query: str, fields: dict) -> None:
        """Each documented remove phrasing yields one selector."""
        parsed = parse(query)
        assert parsed.operation == "remove"
        assert parsed.fields == fields

    @pytest.mark.parametrize(
        "query", ["Remove", "Remove utterances", "Delete the weather ones", "Remove turn"]
    )
    def test_remove_without_a_clear_target_is_refused(self, query: str) -> None:
        """A remove that does not say what to delete is an error, never a guess."""
        with pytest.raises(InvalidRequest, match="remove|which utterances") as caught:
            parse(query)
        assert "supported forms" in str(caught.value).lower() or "say which" in str(caught.value)


class TestSummarize:
    """Summarize forms and their token limit."""

    def test_summarize_conversation(self) -> None:
        """'Summarize conversation' has no fields of its own."""
        assert parse("Summarize conversation").operation == "summarize"
        assert parse("Summarize conversation").fields == {}

    def test_token_limit_in_the_phrase(self) -> None:
        """'in 200 tokens' becomes token_limit 200."""
        assert parse("Summarize the conversation in 200 tokens").fields == {"token_limit": 200}


class TestNotUnderstood:
    """Unparseable queries say what was not understood and show the forms."""

    @pytest.mark.parametrize(
        "query", ["", "   ", "hello", "Get weather", "Summarize the weather", "Make me a sandwich"]
    )
    def test_unparseable_queries_list_supported_forms(self, query: str) -> None:
        """The error names the problem and includes the supported forms."""
        with pytest.raises(InvalidRequest) as caught:
            parse(query)
        message = str(caught.value)
        assert "supported forms" in message.lower()
        assert "GetInstructions lists them all" in message


class TestRepeatedQueries:
    """A query asked again gets the answer it got the first time (the reading cache changes nothing)."""

    @pytest.mark.parametrize(
        "query",
        [
            "Remember to delete the last message",
            "Keep only the last 5 messages",
            "Save this for later, maybe",
        ],
    )
    def test_a_refused_store_stays_refused_when_asked_again(self, query: str) -> None:
        """A store the rules cannot place is never answered as a read the second time."""
        for _ in range(3):
            with pytest.raises(InvalidRequest):
                parse(query)

    def test_a_read_asked_again_is_the_same_read_and_a_fresh_copy(self) -> None:
        """Cached readings come back equal, and changing one answer does not change the next."""
        first = parse("Get utterances 3, 5 and 7")
        first.fields["seqs"].append(99)
        second = parse("Get utterances 3, 5 and 7")
        assert second.operation == "retrieve" and second.fields["seqs"] == [3, 5, 7]

    def test_a_store_is_read_afresh_each_time(self) -> None:
        """Stores are never cached: the same instruction with another text stores that text."""
        assert parse("Add utterance: one").fields["text"] == "one"
        assert parse("Add utterance: two").fields["text"] == "two"
        assert parse("Add utterance: one").fields["text"] == "one"
