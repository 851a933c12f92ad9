"""The rule parser: varied phrasing, numbers, quotes, verbatim stores, confidence and refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chd.core.errors import InvalidRequest
from chd.core.history import ConversationHistory
from chd.core.language.grammar.store import QUOTE_MARKS, UnclearStore
from chd.core.language.numbers import parse_number
from chd.core.language.parser import Ambiguous, NotUnderstood, closest_forms, parse


class TestEquivalentPhrasings:
    """Imperative, polite, terse and question forms of one request read the same."""

    @pytest.mark.parametrize(
        "phrasings,fields",
        [
            (
                [
                    "Get the last 5 utterances",
                    "Please show me the last five messages",
                    "Could you get the 5 most recent utterances?",
                    "last 5",
                    "What were the last five messages?",
                    "I'd like to see the latest 5 messages, thanks",
                ],
                {"last_n": 5},
            ),
            (
                [
                    "Find utterances about Paris",
                    "find Paris",
                    "Can you search for 'Paris'?",
                    "Which messages mention Paris?",
                    "Did anyone mention Paris?",
                    "anything about Paris?",
                ],
                {"topic": "Paris"},
            ),
            (
                [
                    "Get utterances in turns 3 to 6",
                    "show turns 3-6",
                    "what was said between turns 3 and 6?",
                    "Get messages from turn three to turn six",
                    "turns three through six please",
                ],
                {"turn_from": 3, "turn_to": 6},
            ),
            (
                [
                    "Remove oldest utterance",
                    "please delete the oldest message",
                    "remove the first utterance",
                    "Could you remove the earliest entry?",
                    "drop the oldest one",
                ],
                {"oldest": 1},
            ),
            (
                [
                    "Remove before turn 4",
                    "delete everything prior to turn four",
                    "Please remove all utterances before the fourth turn",
                ],
                {"before_turn": 4},
            ),
            (
                [
                    "Clear the conversation",
                    "clear",
                    "wipe the history",
                    "Please delete everything",
                    "Could you remove all messages?",
                    "forget everything",
                ],
                {"all": True},
            ),
            (
                [
                    "Set the token budget to 4000",
                    "set max tokens to 4k",
                    "max_tokens = 4000",
                    "Please change the token limit to four thousand",
                ],
                {"max_tokens": 4000},
            ),
            (
                [
                    "Mark utterance 12 as important",
                    "please flag message #12 as important",
                    "pin utterance 12",
                    "utterance twelve is important",
                ],
                {"seq": 12, "important": True},
            ),
        ],
    )
    def test_phrasings_of_one_request_give_the_same_fields(
        self, phrasings: list[str], fields: dict
    ) -> None:
        """Every phrasing in the group parses to the same operation fields at full confidence."""
        for phrasing in phrasings:
            parsed = parse(phrasing)
            assert parsed.fields == fields, phrasing
            assert parsed.confidence == 1.0, phrasing


class TestNumbers:
    """Counts written as digits, words, 'k', thousands separators or 'a dozen'."""

    @pytest.mark.parametrize(
        "written,value",
        [
            ("7", 7),
            ("seven", 7),
            ("Twenty-five", 25),
            ("one hundred and twenty", 120),
            ("4k", 4000),
            ("1.5k", 1500),
            ("4,000", 4000),
            ("a dozen", 12),
            ("two thousand five hundred", 2500),
        ],
    )
    def test_number_is_read_as_written(self, written: str, value: int) -> None:
        """Each written form has its value."""
        assert parse_number(written) == value

    def test_numbers_inside_a_topic_stay_as_written(self) -> None:
        """'five cats' is searched as written, not rewritten to '5 cats'."""
        assert parse("Find utterances about five cats").fields == {"topic": "five cats"}

    def test_a_word_containing_a_number_word_is_not_a_number(self) -> None:
        """'someone' holds 'one' but is not a count."""
        assert parse("Did someone mention the hotel?").fields == {"topic": "the hotel"}


class TestQuotesAndVerbatimStores:
    """Quoted text is protected; stored text is never interpreted."""

    @settings(max_examples=200, deadline=None)
    @given(st.text(min_size=1, max_size=120).map(str.strip).filter(bool))
    def test_store_keeps_any_text_verbatim(self, text: str) -> None:
        """Whatever follows 'Add utterance:' is the stored text; a leading quote mark's pair is stripped, an unpaired one refused."""
        if text[0] in QUOTE_MARKS:
            # Issue 25: a quote the rules cannot pair leaves the boundary uncertain.
            try:
                fields = parse(f"Add utterance: {text}").fields
            except UnclearStore:
                return
            assert fields["text"] in text
            return
        assert parse(f"Add utterance: {text}").fields == {"text": text}

    @pytest.mark.parametrize(
        "text",
        [
            "remove all utterances",
            "Clear the conversation",
            "Set the token budget to 1",
            "Mark utterance 1 as important",
            "summarize everything",
            "delete utterance 3 and 4",
        ],
    )
    def test_operation_words_in_a_store_change_nothing(self, text: str) -> None:
        """The daemon stores the sentence and leaves the conversation otherwise as it was."""
        history = ConversationHistory()
        history.query("Add utterance: keep me")
        outcome = history.query(f"Add user utterance: {text}")
        state = history.backend.read("default")
        assert outcome.operation == "store" and [u.text for u in state.utterances] == [
            "keep me",
            text,
        ]
        assert state.settings == {} and not any(u.important for u in state.utterances)

    def test_quoted_topic_is_taken_whole(self) -> None:
        """Filter words inside quotes belong to the topic."""
        assert parse("Find utterances about 'the last 10 minutes of the film'").fields == {
            "topic": "the last 10 minutes of the film"
        }

    def test_filters_after_a_topic_are_read_as_filters(self) -> None:
        """'about X from the user in turns 3 to 6' has three parts."""
        assert parse("Find messages about the hotel from the user in turns 3 to 6").fields == {
            "topic": "the hotel",
            "speaker": "user",
            "turn_from": 3,
            "turn_to": 6,
        }

    def test_time_words_inside_a_topic_are_not_a_filter(self) -> None:
        """'the last day of the trip' is a topic, not 'in the last day'."""
        assert parse("Get utterances about the last day of the trip").fields == {
            "topic": "the last day of the trip"
        }


class TestConfidence:
    """The parser reports how much it understood, and writes need all of it."""

    def test_confidence_is_reported_in_the_response(self) -> None:
        """metadata.confidence is 1.0 for a fully understood query."""
        assert ConversationHistory().query("Get all utterances").metadata["confidence"] == 1.0

    def test_a_read_tolerates_one_stray_word(self) -> None:
        """One unknown word in six: confidence 0.83, above a read's 0.8."""
        parsed = parse("Get the frobnicated last 5 utterances")
        assert parsed.fields == {"last_n": 5} and parsed.confidence == 0.83

    def test_a_remove_with_any_stray_word_is_refused(self) -> None:
        """The same stray word in a remove refuses it: removes need 1.0."""
        with pytest.raises(NotUnderstood, match="needs 1.00"):
            parse("Remove the frobnicated oldest 5 utterances")

    def test_refusal_lists_the_closest_forms_of_the_likely_operation(self) -> None:
        """The message names the operation it looked like and shows its forms first."""
        with pytest.raises(NotUnderstood) as refusal:
            parse("Remove the stale utterances")
        message = str(refusal.value)
        assert "Closest supported forms" in message and "Remove oldest utterance" in message
        assert refusal.value.best is not None and refusal.value.best.operation == "remove"

    def test_closest_forms_prefer_the_given_operation(self) -> None:
        """Suggestions for a summarize are summarize forms."""
        assert all(
            f.lower().startswith(("summar", "give", "recap"))
            for f in closest_forms("summarise it", "summarize")
        )

    def test_unrelated_text_is_refused_with_confidence_zero(self) -> None:
        """'hello' is no operation at all."""
        with pytest.raises(NotUnderstood) as refusal:
            parse("hello")
        assert refusal.value.confidence == 0.0


class TestAmbiguousRemoves:
    """A remove that could delete more than meant is refused, not guessed."""

    @pytest.mark.parametrize(
        "phrasing,hint",
        [
            ("Remove 3 messages", "oldest 3"),
            ("remove 3", "utterance 3"),
            ("Remove messages", "say which"),
            ("remove the oldest messages", "how many"),
            ("Forget what I said about Paris", "by topic"),
            ("remove messages since 2026-01-31", "by date"),
        ],
    )
    def test_ambiguous_remove_is_refused_with_what_to_write(self, phrasing: str, hint: str) -> None:
        """The refusal says how to phrase it instead."""
        with pytest.raises(Ambiguous, match=hint):
            parse(phrasing)

    def test_singular_phrasing_over_a_set_removes_at_most_one(self) -> None:
        """'the assistant's message' carries at_most 1; the core refuses if there are more."""
        assert parse("Remove the assistant's message in turn 2").fields == {
            "speaker": "assistant",
            "turn_from": 2,
            "turn_to": 2,
            "at_most": 1,
        }
        history = ConversationHistory()
        for text in ("a", "b"):
            history.query(f"Add assistant utterance: {text}")
        with pytest.raises(InvalidRequest, match="matches 2 utterances"):
            history.query("Remove the assistant's message")
        assert len(history.backend.read("default").utterances) == 2

    def test_plural_phrasing_removes_the_whole_set(self) -> None:
        """'the assistant's messages' has no cap."""
        assert parse("Remove the assistant's messages").fields == {"speaker": "assistant"}


_FUZZ_WORDS = (
    "remove delete get find set mark clear summarize stats the last first oldest newest 3 three 4k "
    "turn turns to - and from since before after utterance messages # 0 99999999999 ago minutes "
    "2026-13-45 2026-01-01T10:00Z about 'Paris' \" user assistant important not all everything "
    "buffer size token budget = : policy importance fifo reset summary with tl;dr a dozen ? , ."
).split()


class TestRobustness:
    """Whatever the words, the answer is a result or an InvalidRequest/NotFound, never a crash."""

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.sampled_from(_FUZZ_WORDS), min_size=1, max_size=10).map(" ".join))
    def test_any_mix_of_grammar_words_is_answered_or_refused(self, text: str) -> None:
        """No ValueError, KeyError or the like escapes the core."""
        from chd.core.errors import DaemonError

        history = ConversationHistory()
        history.query("Add utterance: hello")
        try:
            history.query(text)
        except DaemonError:
            pass

    def test_an_impossible_date_is_invalid_argument(self) -> None:
        """'since 2026-13-45' names the bad time."""
        with pytest.raises(InvalidRequest, match="2026-13-45"):
            parse("Get messages since 2026-13-45")


class TestSources:
    """Text, metadata and data agree or the query is refused."""

    def test_text_and_data_disagreeing_is_refused(self) -> None:
        """'last 5' in the text and last_n 3 in data: neither wins."""
        with pytest.raises(InvalidRequest, match="given twice"):
            ConversationHistory().query("Get the last 5 utterances", {}, {"last_n": 3})

    def test_text_and_data_agreeing_is_fine(self) -> None:
        """The same value from two places is accepted."""
        outcome = ConversationHistory().query("Get the last 5 utterances", {}, {"last_n": 5})
        assert outcome.operation == "retrieve"

    def test_data_adds_parameters_the_text_did_not_give(self) -> None:
        """Text gives the topic, data the limit."""
        history = ConversationHistory()
        for i in range(4):
            history.query(f"Add utterance: paris {i}")
        outcome = history.query("Find utterances about Paris", {}, {"limit": 2})
        assert len(outcome.result["utterances"]) == 2


class TestHostileInput:
    """Issue 14: any query is answered or refused with INVALID_ARGUMENT, in bounded time and memory."""

    @pytest.mark.parametrize(
        ("text", "metadata", "data"),
        [
            ("Get the last " + "9" * 5000 + " utterances", {}, {}),
            ("Get context within " + "9" * 400 + "k tokens", {}, {}),
            ("Remove utterance " + "9" * 40, {}, {}),
            ("Get utterances 1, " + "9" * 5000, {}, {}),
            ("Summarize turns 1 to " + "9" * 30 + " in 50 tokens", {}, {}),
            ("Get the " + "9" * 30 + "th turn", {}, {}),
            ("Set the buffer size to " + "9" * 5000, {}, {}),
            ("Get the last utterances", {}, {"last_n": 1e308}),
            ("Add utterance: hi", {"turn_number": 1e300}, {}),
            ("Get utterances", {}, {"seqs": [1, 1e300]}),
            ("Summarize conversation", {}, {"token_limit": -1e300}),
        ],
    )
    def test_any_number_in_any_field_is_invalid_argument(
        self, text: str, metadata: dict, data: dict
    ) -> None:
        """A number too large for int() or float() is refused as a bad argument, not an internal error."""
        from chd.service.server import status_for

        history = ConversationHistory()
        with pytest.raises(InvalidRequest) as refused:
            history.query(text, metadata, data)
        assert status_for(refused.value).name == "INVALID_ARGUMENT"
        assert len(str(refused.value)) < 600

    def test_a_huge_int_is_described_without_converting_it_to_text(self) -> None:
        """An int past Python's digit limit is named by its size in an error message."""
        from chd.core.language.fields import as_int

        with pytest.raises(InvalidRequest, match="at most 10, got a number of about 5001 digits"):
            as_int("n", 10**5000, maximum=10)

    @pytest.mark.parametrize(
        ("metadata", "data"),
        [
            ({}, {"operation": "x" * 20_000}),
            ({}, {"operation": "store", "text": "hi", "k" * 20_000: 1}),
            ({}, {"operation": "retrieve", "topic": "y" * 20_000, "last_n": "z" * 20_000}),
            ({"speaker": "q" * 20_000}, {"operation": "store", "text": "hi"}),
        ],
    )
    def test_errors_quote_only_a_short_prefix_of_the_callers_text(
        self, metadata: dict, data: dict
    ) -> None:
        """A 20 kB field in a refused request yields a short message (gRPC headers stop at 16 KiB)."""
        with pytest.raises(InvalidRequest) as refused:
            ConversationHistory().query("", metadata, data)
        assert len(str(refused.value)) < 400

    def test_a_refused_long_query_quotes_a_prefix(self) -> None:
        """The refusal of a 1,900-character query is a few hundred characters long."""
        with pytest.raises(NotUnderstood) as refused:
            parse("frobnicate " * 170)
        assert len(str(refused.value)) < 800
        assert "frobnicate frobnicate" in str(refused.value)

    def test_an_instruction_over_the_limit_is_refused_saying_what_to_do(self) -> None:
        """A non-store query past MAX_INSTRUCTION_CHARS is refused at once, pointing at data.topic and data.text."""
        from chd.core.language.parser import MAX_INSTRUCTION_CHARS

        with pytest.raises(InvalidRequest) as refused:
            parse("Find utterances about " + "Paris " * (MAX_INSTRUCTION_CHARS // 6))
        assert not isinstance(refused.value, NotUnderstood)  # never sent to the classifier
        assert "data.topic" in str(refused.value) and "data.text" in str(refused.value)
        assert len(str(refused.value)) < 600

    def test_a_megabyte_utterance_is_still_stored_verbatim(self) -> None:
        """The cap is on instructions: a store's utterance is payload of any length."""
        text = "hello world. " * 80_000
        parsed = parse("Add utterance: " + text)
        assert parsed.operation == "store" and parsed.fields["text"] == text.strip()

    def test_a_long_topic_goes_in_data(self) -> None:
        """'Find utterances' with a data.topic of any length searches for it."""
        history = ConversationHistory()
        history.query("Add utterance: the hotel in Paris is booked")
        outcome = history.query("Find utterances", {}, {"topic": "hotel " + "x" * 50_000})
        assert [u["seq"] for u in outcome.result["utterances"]] == [1]

    def test_runs_of_whitespace_and_control_characters_read_as_one_space(self) -> None:
        """'Get  the last\\n\\n5\\x00 utterances' reads as 'Get the last 5 utterances'."""
        assert parse("Get  the last\n\n5\x00 utterances\t").fields == {"last_n": 5}
        assert parse("Find utterances about  the   hotel").fields == {"topic": "the hotel"}

    def test_closest_forms_read_a_bounded_prefix(self) -> None:
        """The suggestions for a 1 MB query are those for its first words."""
        head = "Get the latest frobnications "
        assert closest_forms(head + "x" * 1_000_000) == closest_forms(head + "x" * 500)

    def test_the_parse_cache_is_bounded_in_bytes(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Many distinct long queries never hold more than the cache's byte budget, and it stays in use."""
        from chd.core.language import parser

        cache = parser._ReadingCache(budget=64 * 1024)
        monkeypatch.setattr(parser, "_READINGS", cache)
        for i in range(120):
            try:
                parse(f"Find utterances about {i} " + "hotel " * 200)
            except InvalidRequest:
                pass
        assert 32 * 1024 < cache.used <= cache.budget

    def test_a_refused_query_is_read_once(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Reading the same refused query again (for the trace, the metrics) reuses the first reading."""
        from chd.core.language import parser

        calls = []
        real = parser._read
        monkeypatch.setattr(parser, "_read", lambda query: calls.append(query) or real(query))
        parser._READINGS.clear()
        for _ in range(3):
            with pytest.raises(NotUnderstood) as refused:
                parse("frobnicate the widgets thoroughly")
        assert len(calls) == 1
        assert "frobnicate" in str(refused.value)


def _demo() -> ConversationHistory:
    from tests.demo_conversation import seed_demo

    history = ConversationHistory()
    seed_demo(history)
    return history


def _left(history: ConversationHistory) -> list[int]:
    return [u.seq for u in history.backend.read("default").utterances]


class TestFunctionCalls:
    """Issue 12: the spec's function-call forms, judged by their effect on the demo conversation."""

    @pytest.mark.parametrize(
        ("call", "seqs"),
        [
            ("get_last_n(5)", [4, 5, 6, 7, 8]),
            ("get_last_n(n=2)", [7, 8]),
            ("get_first_n(2);", [1, 2]),
            ("get_last_turns(1)", [7, 8]),
            ("get_utterance(6)", [6]),
            ("get_utterances(2, 5)", [2, 5]),
            ("get_utterances([2, 5])", [2, 5]),
            ("get_turns(2, 3)", [3, 4, 5, 6]),
            ("retrieve(speaker='user', last_n=2)", [5, 7]),
            ('find_utterances(topic="weather")', [1]),
            ("search('budget', limit=1)", [8]),
        ],
    )
    def test_read_calls_return_the_right_utterances(self, call: str, seqs: list[int]) -> None:
        """get_last_n(5), find_utterances(topic="weather")... return what their sentence forms return."""
        outcome = _demo().query(call)
        assert outcome.operation == "retrieve"
        assert [u["seq"] for u in outcome.result["utterances"]] == seqs

    @pytest.mark.parametrize(
        ("call", "left"),
        [
            ("remove_before_turn(4)", [7, 8]),
            ("remove_after_turn(2)", [1, 2, 3, 4]),
            ("remove_oldest()", [2, 3, 4, 5, 6, 7, 8]),
            ("remove_newest(n=3)", [1, 2, 3, 4, 5]),
            ("remove_utterance(3)", [1, 2, 4, 5, 6, 7, 8]),
            ("remove_utterances(3, 4)", [1, 2, 5, 6, 7, 8]),
            ("remove_turns(2, 3)", [1, 2, 7, 8]),
            ("remove(speaker='assistant')", [1, 3, 5, 7]),
            ("clear_conversation()", []),
        ],
    )
    def test_remove_calls_remove_exactly_their_utterances(self, call: str, left: list[int]) -> None:
        """remove_before_turn(4) and the others delete the seqs they name and nothing else."""
        history = _demo()
        assert history.query(call).operation == "remove"
        assert _left(history) == left

    def test_get_summary_reads_the_running_summary(self) -> None:
        """get_summary() is the spec's read of the running summary, not a new summary."""
        outcome = _demo().query("get_summary()")
        assert (
            outcome.operation == "retrieve"
            and "summary" in outcome.result
            and "utterances" not in outcome.result
        )

    def test_summarize_takes_its_limit_as_a_keyword(self) -> None:
        """summarize(token_limit=100) summarizes everything within 100 tokens."""
        outcome = _demo().query("summarize(token_limit=100)")
        assert outcome.operation == "summarize"
        assert outcome.result["token_limit"] == 100 and outcome.result["utterances_covered"] == 8

    def test_store_and_configure_and_mark_and_stats_calls(self) -> None:
        """Every operation has a call form, stored text kept exactly."""
        history = _demo()
        stored = history.query("add_utterance('Remove all, it\\'s fine', speaker=\"assistant\")")
        assert stored.result["utterance"]["text"] == "Remove all, it's fine"
        assert stored.result["utterance"]["speaker"] == "assistant"
        assert _left(history) == list(range(1, 10))
        assert (
            history.query("set_eviction_policy(importance)").result["settings"]["eviction_policy"]
            == "importance"
        )
        assert history.query("mark_important(7)").result["utterance"]["important"] is True
        assert history.query("stats()").result["utterance_count"] == 9

    @pytest.mark.parametrize(
        ("call", "says"),
        [
            ("get_last_n(5, 6)", "takes 1 positional argument"),
            ("get_last_n(colour=5)", "no parameter 'colour'"),
            ("get_last_n('five')", "whole number"),
            ("remove_utterance()", "remove needs to know what to delete"),
            ("forget_everything()", "unknown function"),
            ("remove_utterances(3, 'x)", "not closed"),
            ("summarize(token_limit=100, 5)", "positional argument after a keyword"),
        ],
    )
    def test_a_call_that_does_not_fit_is_refused_and_changes_nothing(
        self, call: str, says: str
    ) -> None:
        """A wrong call is INVALID_ARGUMENT saying what is wrong; nothing is removed or guessed."""
        history = _demo()
        with pytest.raises(InvalidRequest, match=says):
            history.query(call)
        assert _left(history) == list(range(1, 9))

    def test_only_a_store_call_may_be_longer_than_an_instruction(self) -> None:
        """add_utterance("<1 MB>") stores its text; any other call past the instruction cap is refused at once."""
        text = 'say "hi" \\ ' * 100_000
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        assert parse(f'add_utterance("{escaped}")').fields == {"text": text}
        with pytest.raises(InvalidRequest, match="a call other than a store"):
            parse("get_utterances(" + "1, " * 100_000 + "2)")
        with pytest.raises(InvalidRequest, match="more than 4 arguments"):
            parse('add_utterance("a", "user", 1, 2, 3)')


class TestBreadth:
    """Issue 12: phrasings people use for reads, removes and summaries, judged by their effect."""

    @pytest.mark.parametrize(
        ("query", "seqs"),
        [
            ("nothing but the assistant's lines", [2, 4, 6, 8]),
            ("all the user wrote up to now", [1, 3, 5, 7]),
            ("messages where the budget was mentioned", [8, 7]),
            ("Show message number seven", [7]),
            ("Get the entry numbered six", [6]),
            ("just turn 2", [3, 4]),
            ("turns two through three", [3, 4, 5, 6]),
            ("Show the first two turns", [1, 2, 3, 4]),
            ("Show the final two turns", [5, 6, 7, 8]),
        ],
    )
    def test_reads_return_the_right_utterances(self, query: str, seqs: list[int]) -> None:
        """Filters, topics and number forms as people say them select the right seqs."""
        outcome = _demo().query(query)
        assert outcome.operation == "retrieve"
        assert [u["seq"] for u in outcome.result["utterances"]] == seqs

    @pytest.mark.parametrize(
        ("query", "left"),
        [
            ("Purge the oldest message", [2, 3, 4, 5, 6, 7, 8]),
            ("Scrap utterance 3", [1, 2, 4, 5, 6, 7, 8]),
            ("Strike #3", [1, 2, 4, 5, 6, 7, 8]),
            ("Throw away the newest message", [1, 2, 3, 4, 5, 6, 7]),
            ("Delete every turn before turn 3", [5, 6, 7, 8]),
            ("Remove whatever came before turn 3", [5, 6, 7, 8]),
            ("Get rid of the entry numbered eleven", None),
            ("Trash the first two turns", [5, 6, 7, 8]),
            ("Strike the final turn", [1, 2, 3, 4, 5, 6]),
        ],
    )
    def test_removes_delete_exactly_the_right_utterances(
        self, query: str, left: list[int] | None
    ) -> None:
        """Remove verbs and turn phrasings delete what they name (a missing seq is NOT_FOUND, nothing gone)."""
        from chd.core.errors import NotFound

        history = _demo()
        if left is None:
            with pytest.raises(NotFound):
                history.query(query)
            left = list(range(1, 9))
        else:
            assert history.query(query).operation == "remove"
        assert _left(history) == left

    @pytest.mark.parametrize(
        ("query", "covered", "limit"),
        [
            ("Give me a synopsis", 8, None),
            ("an overview of the conversation [max 80 tokens]", 8, 80),
            ("Summarize, using no more than forty tokens", 8, 40),
            ("a recap of 60 tokens", 8, 60),
            ("Brief rundown, 30 tokens max", 8, 30),
            ("Summarize the newest messages", 8, None),
            ("Summarize the last 3 messages", 3, None),
            ("Wrap up the last 2 turns, capped at 50 tokens", 4, 50),
            ("What's the gist of the first two turns?", 4, None),
        ],
    )
    def test_summaries_take_their_scope_and_limit_anywhere(
        self, query: str, covered: int, limit: int | None
    ) -> None:
        """Summary nouns and verbs, a limit in any form, and scopes such as 'the last 3 messages'."""
        outcome = _demo().query(query)
        assert outcome.operation == "summarize"
        assert outcome.result["utterances_covered"] == covered
        if limit is not None:
            assert outcome.result["token_limit"] == limit
        assert outcome.result["tokens"] <= outcome.result["token_limit"]

    @pytest.mark.parametrize(
        "query",
        [
            "Scrap the frobnicated messages in turn 2",
            "Strike what the assistant said about Paris in turns 2 to 3",
            "Delete the assistant's lines, the ones that matter",
            "Trash the user's messages in turn 2 whatsoever",
            "Get rid of turn 2 entirely now",
        ],
    )
    def test_a_remove_phrase_never_runs_as_a_read(self, query: str) -> None:
        """A query that asks to remove is removed or refused, never answered as a retrieve."""
        history = _demo()
        try:
            outcome = history.query(query)
        except InvalidRequest:
            assert _left(history) == list(range(1, 9))
        else:
            assert outcome.operation == "remove"

    @pytest.mark.parametrize(
        "query",
        [
            "Find utterances about deleting files",
            "Show me what the user said about scrapping the plan",
            "Which messages mention purging the cache?",
            "Summarize how we decided to drop the hotel",
        ],
    )
    def test_a_read_never_removes(self, query: str) -> None:
        """Remove words inside a read are its topic; nothing is deleted."""
        history = _demo()
        try:
            outcome = history.query(query)
        except InvalidRequest:
            pass
        else:
            assert outcome.operation in ("retrieve", "summarize")
        assert _left(history) == list(range(1, 9))
