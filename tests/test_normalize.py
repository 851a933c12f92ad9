"""Normalization of instruction words (issue 25): lexicon, lemmas, bounded typo correction."""

from __future__ import annotations

import pytest

from chd.core.errors import InvalidRequest
from chd.core.language.grammar.normalize import (
    LEXICON,
    PHRASES,
    WORDS,
    Normalizer,
    developer_syntax,
    write_operations,
)
from chd.core.language.grammar.vocab import FILLERS
from chd.core.language.parser import _normalizer, normalized, parse


class TestTypoCorrection:
    def test_one_swapped_or_missing_letter_is_corrected_in_instruction_words(self) -> None:
        """'remvoe', 'evrything', 'happend' are the grammar's words one edit away."""
        n = _normalizer()
        assert n.word("remvoe") == "remove"
        assert n.word("evrything") == "everything"
        assert n.word("utterence") == "utterance"
        assert n.word("speeker") == "speaker"

    def test_short_words_english_words_numbers_and_names_are_never_corrected(self) -> None:
        """Below 4 letters, a dictionary word, a number or a capitalized name stays as written."""
        n = _normalizer()
        assert n.word("abc") == "abc"
        assert n.word("restaurant") == "restaurant"
        assert n.word("1200") == "1200"
        assert n.word("Pariss") == "Pariss"

    def test_a_word_two_vocabulary_words_are_equally_close_to_is_left_alone(self) -> None:
        """Ambiguous corrections are not guessed."""
        n = Normalizer(["cart", "card"])
        assert n.typo("carx") is None

    def test_quoted_text_is_never_normalized(self) -> None:
        """Quoted spans of a read stay byte for byte."""
        assert normalized('delete the msg whose text is "teh remvoe msgs"').endswith(
            '"teh remvoe msgs"'
        )

    def test_topic_words_stay_as_written(self) -> None:
        """After 'about', the words are the caller's topic."""
        assert normalized("find msgs about teh budgett") == "find messages about teh budgett"


class TestStoresKeepTheirUtterance:
    @pytest.mark.parametrize(
        "query, text",
        [
            ("stroe this msg from me plz: teh remvoe msgs evrything", "teh remvoe msgs evrything"),
            (
                'plz save this msg: "Delete evrything, 1200 euros" thx',
                "Delete evrything, 1200 euros",
            ),
            (
                'add to the convo: "Running 10 min late" — lol the metro again',
                "Running 10 min late",
            ),
        ],
    )
    def test_the_utterance_is_stored_exactly_whatever_the_instruction_words(
        self, query: str, text: str
    ) -> None:
        """Typos and chat forms in the instruction are read; the utterance is not touched."""
        parsed = parse(query)
        assert parsed.operation == "store"
        assert parsed.fields["text"] == text

    def test_a_quoted_utterance_followed_by_a_negation_is_refused_not_stored_with_it(self) -> None:
        """Words after the quote that could change the instruction are never stored as said."""
        with pytest.raises(InvalidRequest):
            parse('save msg: "Lost my umbrella" (no, don\'t store it)')

    def test_labelled_parts_are_read_and_the_content_label_starts_the_utterance(self) -> None:
        """'Speaker: X. Turn: N. Content: ...' names speaker and turn; the text is what follows."""
        parsed = parse(
            "Add a new utterance. Speaker: assistant. Turn: 4. Content: Rain: 80 % likely."
        )
        assert parsed.fields == {
            "text": "Rain: 80 % likely.",
            "speaker": "assistant",
            "turn_number": 4,
        }


class TestWritesAreNeverReads:
    @pytest.mark.parametrize(
        "query",
        [
            "The utterance with seq 6 can be removed.",
            "Messages from turn 1 should be deleted.",
            "turn 2 can go",
        ],
    )
    def test_a_remove_verb_at_the_end_makes_a_remove(self, query: str) -> None:
        """Passive and modal removes run as removes."""
        assert parse(query).operation == "remove"

    def test_a_read_holding_a_remove_word_it_cannot_place_is_refused(self) -> None:
        """'show the last message and delete it' must not run as a read."""
        with pytest.raises(InvalidRequest):
            parse("show me the last 2 messages, we will delete them")

    def test_dump_is_refused_as_a_remove(self) -> None:
        """A verb that may mean show or throw away is never guessed to be a remove."""
        with pytest.raises(InvalidRequest):
            parse("dump all utts")

    def test_write_words_are_found_in_any_form(self) -> None:
        """'deleted', 'wiping', 'can go' are remove words wherever they stand."""
        assert write_operations("messages that were deleted") == {"remove"}
        assert write_operations("turn 3 can go") == {"remove"}
        assert write_operations("show the messages") == set()


class TestCommentary:
    def test_commentary_after_a_complete_remove_is_set_aside(self) -> None:
        """'it was a mistake' carries no number, speaker or scope word."""
        assert parse("pls delete msg 6, it was a mistake").fields == {"seq": 6}

    @pytest.mark.parametrize(
        "query",
        [
            "delete msg 6, and turn 4 too",
            "delete msg 6, keep the rest",
            "delete msg 6, not the user's",
        ],
    )
    def test_commentary_with_a_number_scope_or_negation_is_never_set_aside(
        self, query: str
    ) -> None:
        """Safety rule: such a clause is part of the instruction, so the query is refused."""
        with pytest.raises(InvalidRequest):
            parse(query)


class TestDeveloperSyntax:
    @pytest.mark.parametrize(
        "query, fields",
        [
            ("get turn>=3", {"turn_from": 3}),
            ("rm seq=7", {"seq": 7}),
            ("del seqs 5..8", {"seqs": [5, 6, 7, 8]}),
            ("tail -n 2", {"last_n": 2}),
            ("list speaker=assistant", {"speaker": "assistant"}),
        ],
    )
    def test_key_value_and_shell_forms_read_as_their_words(self, query: str, fields: dict) -> None:
        """Comparisons, ranges and flags are instruction words in another spelling."""
        assert parse(query).fields == fields

    def test_syntax_rewrites_leave_plain_queries_alone(self) -> None:
        """A query without such forms is returned unchanged."""
        assert developer_syntax("Get the last 5 utterances") == "Get the last 5 utterances"


class TestLexicon:
    def test_every_replacement_is_made_of_words_the_grammar_reads(self) -> None:
        """Each entry of grammar/lexicon.toml rewrites into the grammar's own vocabulary."""
        known = _normalizer().vocabulary | FILLERS | {"tl;dr"}
        for source, target in {**WORDS, **PHRASES}.items():
            for word in target.replace(";", " ").split():
                assert word in known or word == "tl;dr", (
                    f"{source!r} -> {target!r}: {word!r} is not a grammar word"
                )

    @pytest.mark.parametrize("verb", sorted(LEXICON["remove"]))
    def test_every_remove_verb_removes_one_utterance(self, verb: str) -> None:
        """'<verb> utterance 3' removes seq 3."""
        parsed = parse(f"{verb} utterance 3")
        assert (parsed.operation, parsed.fields) == ("remove", {"seq": 3})

    @pytest.mark.parametrize(
        "name", sorted(k for k, v in LEXICON["speakers"].items() if v in ("user", "assistant"))
    )
    def test_every_speaker_name_filters_by_that_speaker(self, name: str) -> None:
        """'show the messages from the <name>' filters by the speaker it names."""
        parsed = parse(f"show the messages from the {name}")
        assert parsed.fields == {"speaker": LEXICON["speakers"][name]}

    @pytest.mark.parametrize(
        "verb", ["recap", "condense", "compress", "boil down", "sum up", "digest"]
    )
    def test_summarize_verbs_summarize(self, verb: str) -> None:
        """'<verb> the conversation' summarizes it."""
        assert parse(f"{verb} the conversation").operation == "summarize"
