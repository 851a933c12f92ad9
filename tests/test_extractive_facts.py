"""What the offline summarizer keeps when its budget is short (summaries/extractive.py)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from chd.core.summaries.extractive import ExtractiveSummarizer
from chd.core.summaries.summarizer import SummaryContext
from chd.core.tokens import default_counter
from chd.core.utterance import Utterance

COUNTER = default_counter()


def said(*texts: str, speakers: Sequence[str] = ("user", "assistant")) -> list[Utterance]:
    return [
        Utterance(
            "c",
            i + 1,
            speakers[i % len(speakers)],
            text,
            i // 2 + 1,
            "2026-01-01T00:00:00.000000Z",
            COUNTER.count(text),
        )
        for i, text in enumerate(texts)
    ]


CI_FAILURE = (
    "TypeError in src/billing/invoice.py at line 40: unexpected keyword argument 'tz'.",
    "That comes from pydantic 2.7.0, which changed the signature of parse_obj in that release.",
    "Pinning to 1.10.15 works, but it is better to update the calls to parse_obj instead.",
)


@pytest.fixture
def offline() -> ExtractiveSummarizer:
    return ExtractiveSummarizer(COUNTER)


def summarize(
    offline: ExtractiveSummarizer, utterances: Sequence[Utterance], limit: int, previous: str = ""
) -> str:
    text = offline.summarize(previous, utterances, limit)
    assert COUNTER.count(text) <= limit
    return text


class TestRareWords:
    """Words uncommon in English carry what a conversation is about."""

    def test_two_sentences_differing_only_in_a_rare_lower_case_word_are_both_kept(self, offline):
        """'allergic to sesame' and 'allergic to celery' are two facts, not a repeat."""
        tail = ", so the dinner booking on the terrace must avoid it."
        text = summarize(
            offline,
            said(
                "Remember that Maya is vegetarian and allergic to sesame" + tail,
                "Remember that Maya is vegetarian and allergic to celery" + tail,
                speakers=("user",),
            ),
            512,
        )
        assert "sesame" in text and "celery" in text

    def test_a_tight_budget_lists_the_phrase_of_an_uncommon_word(self, offline):
        """With room for facts but not for quotes, 'old cathedral' and 'pydantic 2.7.0' are listed."""
        batch = said(
            "For the hotel, Maya would like to stay near the old cathedral in the centre of town.",
            "That error comes from pydantic 2.7.0, which changed the signature of parse_obj in that release.",
            "I will check the rest of the trip plan tomorrow morning and get back to you with the details.",
        )
        text = summarize(offline, batch, 40)
        for fact in ("old cathedral", "pydantic 2.7.0", "parse_obj", "Maya"):
            assert fact in text

    def test_a_capitalised_first_word_the_tokenizer_splits_is_a_name(self, offline):
        """'Folha near the hotel has a vegetarian menu': Folha is listed, 'Remember' is not."""
        batch = said(
            "Folha near the hotel has a vegetarian menu and opens at seven every evening of the week.",
            "Remember to bring the tickets for the museum, the queue there is usually long in the morning.",
        )
        text = summarize(offline, batch, 24)
        assert "Folha" in text and "Remember" not in text

    def test_a_name_seen_mid_sentence_in_the_buffer_is_a_name_at_a_sentence_start(self, offline):
        """'Grace booked...' opens the batch; the buffer says 'with Grace', so Grace is listed."""
        batch = said(
            "Grace booked the table for the whole group on the terrace for the evening.",
            "Could you also look at the weather for the weekend trip to the coast please?",
        )
        context = SummaryContext(buffered=tuple(said("We are going with Grace this time.")))
        text = offline.summarize("", batch, 16, context=context)
        assert COUNTER.count(text) <= 16
        assert "Grace" in text


class TestLongFacts:
    """A long fact is listed only when it pays for its words; the names in it stay facts."""

    def test_a_decision_too_long_for_the_budget_still_leaves_the_name_in_it(self, offline):
        """'plan changes require approval from Lena Fischer' does not fit; 'Lena Fischer' does."""
        batch = said(
            "Noted on the account: plan changes require approval from Lena Fischer.",
            "Account ACC-70311 is back on the Team plan since yesterday afternoon.",
        )
        text = summarize(offline, batch, 22)
        assert "Lena Fischer" in text and "ACC-70311" in text

    def test_with_room_the_whole_message_is_listed_once(self, offline):
        """Too tight to quote, room to list: the message is listed whole, its literal not a second time."""
        text = summarize(offline, said(*CI_FAILURE), 40)
        assert "“" not in text
        assert "unexpected keyword argument 'tz'" in text
        assert text.count("'tz'") == 1

    def test_the_cut_word_of_a_clipped_quote_is_not_read_as_a_fact(self, offline):
        """“Callum replied from callum@…” is re-read without 'callum@', which is no address."""
        previous = (
            "Turns 1–4: the assistant said “Callum Reid replied from callum@…”; "
            "facts: PL-451785; £9,725; Tuesday 18 June"
        )
        text = summarize(offline, [], 30, previous)
        assert "callum@;" not in text and not text.endswith("callum@")
        assert "PL-451785" in text


def _measurements(chars: int, sentence_chars: int, seed: int) -> str:
    """``chars`` of "12 by 34 by 56 ..." in sentences of about ``sentence_chars``: one long fact each."""
    import random

    rng = random.Random(seed)
    sentences: list[str] = []
    while sum(len(s) + 1 for s in sentences) < chars:
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < sentence_chars:
            words.append(f"{rng.randrange(10, 99)} by")
        sentences.append(" ".join(words) + " 7.")
    return " ".join(sentences)


class TestCostGrowsLinearly:
    """Shapes the retention bench never has (long facts, summaries of thousands of lines) cost linear time too."""

    def test_four_times_longer_sentences_cost_about_the_same_per_character(self, offline):
        """Same text length in 250- and 1000-character sentences: the cubic search for facts inside facts took 16x."""
        import time

        best = {250: float("inf"), 1000: float("inf")}
        for round_ in range(3):
            for length in best:
                # Fresh text each round: the summarizer's caches must not answer for it.
                batch = said(_measurements(8000, length, seed=round_ * 10 + length))
                started = time.process_time()
                summarize(offline, batch, 512)
                best[length] = min(best[length], time.process_time() - started)
        ratio = best[1000] / max(best[250], 1e-4)
        assert ratio < 4, f"1000-character facts cost {ratio:.1f}x as much as 250-character ones"

    def test_a_previous_summary_of_thousands_of_lines_condenses_in_linear_time(self, offline):
        """4x the lines of a previous summary condensed into a small budget: the pairwise join took 16x."""
        import random
        import time

        def lines(n: int, seed: int) -> str:
            rng = random.Random(seed)
            return "\n".join(
                f"Turns {2 * i + 1}–{2 * i + 2}: K{rng.randrange(10**6)}; {rng.randrange(10**5)} euros"
                for i in range(n)
            )

        best = {500: float("inf"), 2000: float("inf")}
        for round_ in range(3):
            for n in best:
                previous = lines(n, seed=round_ * 10_000 + n)  # fresh text: no cache answers
                started = time.process_time()
                summarize(offline, [], 256, previous=previous)
                best[n] = min(best[n], time.process_time() - started)
        ratio = best[2000] / max(best[500], 1e-4)
        assert ratio < 9, f"4x the lines took {ratio:.1f}x the time"  # linear: about 4x

    def test_a_summary_of_thousands_of_blocks_renders_in_linear_time(self, offline):
        """4x the lines in a budget with room for all: rendering scanned every item once per block (11x)."""
        import random
        import time

        def lines(n: int, seed: int) -> str:
            rng = random.Random(seed)
            return "\n".join(f"Turn {i + 1}: K{rng.randrange(10**6)}" for i in range(n))

        best = {1000: float("inf"), 4000: float("inf")}
        for round_ in range(3):
            for n in best:
                previous = lines(n, seed=round_ * 10_000 + n)
                started = time.process_time()
                summarize(offline, [], 10**6, previous=previous)
                best[n] = min(best[n], time.process_time() - started)
        ratio = best[4000] / max(best[1000], 1e-4)
        assert ratio < 8, f"4x the lines took {ratio:.1f}x the time"  # linear: about 4x

    def test_facts_said_elsewhere_in_a_large_summary_are_found_in_linear_time(self, offline):
        """16x the lines, in the segment and in the rest of the summary: a search of the rest per fact took 100x and more."""
        import random
        import time

        def lines(n: int, seed: int, first: int = 0) -> str:
            rng = random.Random(seed)
            return "\n".join(
                f"Turn {first + i + 1}: K{rng.randrange(10**6)}; {rng.randrange(10**4)} euros; LT{rng.randrange(10**4)}"
                for i in range(n)
            )

        best = {250: float("inf"), 4000: float("inf")}
        for round_ in range(3):
            for n in best:
                seed = round_ * 10_000 + n
                context = SummaryContext(summary=lines(n, seed + 1))
                previous = lines(n, seed, first=10**6)
                started = time.process_time()
                offline.summarize(previous, [], 10**7, context)
                best[n] = min(best[n], time.process_time() - started)
        ratio = best[4000] / max(best[250], 1e-4)
        assert ratio < 40, f"16x the lines took {ratio:.1f}x the time"  # linear: about 16x


class TestTextUnlikeTheBench:
    """Conversations in other languages and scripts read as words, not fragments of them."""

    def test_topic_words_of_a_german_conversation_are_whole_words(self, offline):
        """'about München', never 'about nchen' (letters outside A-Z used to end a word)."""
        text = summarize(
            offline,
            said(
                "Wir fahren am Montag nach München zur Großmutter.",
                "In München übernachten wir im Hotel Königshof für 120 Euro.",
                "Die Großmutter wohnt in der Schönhauser Straße 12 in München.",
                "Am Dienstag fahren wir von München weiter nach Zürich.",
            ),
            512,
        )
        head = text.split(":", 1)[0]
        assert "München" in head and "Großmutter" in head, head
        assert "nchen" not in head.replace("München", ""), head


class TestItemsWithAnchors:
    """Issue 26: a listed fact carries what it is about, and a replaced value is marked as such."""

    def test_a_fact_is_listed_with_the_content_word_before_it(self):
        """With room per fact, '75 µg' is listed as 'levothyroxine 75 µg'."""
        from chd.core.summaries.extractive import _items_of

        text = "She takes levothyroxine 75 µg daily."
        assert _items_of(text, ("75 µg",), 1) == (("levothyroxine 75 µg", ("75 µg",)),)
        assert _items_of(text, ("75 µg",), 0) == (("75 µg", ("75 µg",)),)

    def test_a_number_never_stands_alone_at_an_item_edge(self):
        """Issue 26: '7:30' of 'back by 7:30', 'USD 75' of 'USD 75 per hour' and '3%' of '3% processing fee' mislead."""
        from chd.core.summaries.extractive import _items_of

        def texts(sentence: str, facts: tuple[str, ...], width: int = 0) -> list[str]:
            return [text for text, _ in _items_of(sentence, facts, width)]

        # A bare number takes the word of its clause that says what it is, or is no item.
        assert texts("We need them back by 7:30 at the latest.", ("7:30",), 1) == ["back 7:30"]
        assert texts("We need them back by 7:30 at the latest.", ("7:30",)) == ["by 7:30"]
        assert texts("I could drop mine to 2,000 as well.", ("2,000",)) == []
        # A number keeps the noun or the rate after it, and a range stays one.
        assert texts("There is a 3% processing fee on cards.", ("3%",)) == ["3% processing"]
        assert texts("They bill USD 75 per hour after that.", ("USD 75",), 1) == [
            "bill USD 75 per hour"
        ]
        assert texts("Expect 10 to 20 percent no-shows.", ("10", "20 percent")) == [
            "10 to 20 percent"
        ]
        # Versions, codes, ISO dates and years are identifiers: they read alone.
        assert texts("Pin it to 2.7.0 for now.", ("2.7.0",)) == ["2.7.0"]
        assert texts("It was 2019 then.", ("2019",)) == ["2019"]
        assert texts("Session 6 on 16 March, 2023.", ("16 March", "2023")) == ["16 March", "2023"]
        # A date keeps the weekday it falls on.
        assert texts("The inspector visits on Wednesday 7 October.", ("7 October",)) == [
            "Wednesday 7 October"
        ]

    def test_a_value_replaced_in_the_same_sentence_is_marked_was(self):
        """'HL-2026-0471, not HL-2026-0417' becomes 'HL-2026-0471 (was HL-2026-0417)', one item."""
        from chd.core.summaries.extractive import _items_of

        items = _items_of(
            "Sorry, it is HL-2026-0471, not HL-2026-0417.", ("HL-2026-0471", "HL-2026-0417"), 0
        )
        assert [text for text, _ in items] == ["HL-2026-0471 (was HL-2026-0417)"]

    def test_an_item_never_leaves_a_bracket_open(self):
        """A fact cut inside brackets ('9.4(b') loses the bracket that does not close."""
        from chd.core.summaries.extractive import _items_of

        items = _items_of("See clause 9.4(b of the draft.", ("9.4(b",), 0)
        assert items == (("9.4b", ("9.4(b",)),)

    def test_a_later_sentence_that_changes_a_value_marks_the_old_one(self):
        """'Actually the deposit is $5,000' after '$4,500' for the deposit: '$5,000 (was $4,500)', the old item gone."""
        from chd.core.summaries.extractive import ExtractiveSummarizer
        from chd.core.tokens import default_counter
        from chd.core.utterance import Utterance

        counter = default_counter()
        rows = [
            ("user", "The deposit for the barn is $4,500 and the tasting is on Friday."),
            ("assistant", "Noted, deposit $4,500."),
            ("user", "We also booked the florist."),
            ("user", "Actually the deposit is $5,000 now, they raised it."),
        ]
        said = [
            Utterance("c", i + 1, sp, t, i + 1, "2026-01-01T00:00:00.000000Z", counter.count(t))
            for i, (sp, t) in enumerate(rows)
        ]
        summary = ExtractiveSummarizer(counter).summarize("", said, 40)
        assert "$5,000 (was $4,500)" in summary
        assert summary.count("$4,500") == 1

    def test_the_old_value_reads_with_its_unit_and_the_nearest_value_of_its_shape(self):
        """'24 pallets, not 26' marks '(was 26 pallets)'; '2 µg DNA instead of 2.5 µg' marks 2 µg, not DNA; dates too."""
        from chd.core.summaries.extractive import _items_of

        def marked(sentence: str, facts: tuple[str, ...]) -> list[str]:
            return [text for text, _ in _items_of(sentence, facts, 0) if "(was " in text]

        assert marked("They're 24 pallets, not 26.", ("24 pallets", "26")) == [
            "24 pallets (was 26 pallets)"
        ]
        assert marked("Now 3.70 %, not 3.60 %.", ("3.70 %", "3.60 %")) == ["3.70 % (was 3.60 %)"]
        assert marked("Use 2 µg DNA per well instead of 2.5 µg.", ("2 µg", "DNA", "2.5 µg")) == [
            "2 µg (was 2.5 µg)"
        ]
        assert marked("The deadline is 15 July, not 30 June.", ("15 July", "30 June")) == [
            "15 July (was 30 June)"
        ]

    def test_a_change_reaches_the_old_value_listed_by_an_earlier_fold(self):
        """The old value, already a listed item of the previous summary, is dropped; the new one is marked."""
        from chd.core.summaries.extractive import ExtractiveSummarizer
        from chd.core.tokens import default_counter
        from chd.core.utterance import Utterance

        counter = default_counter()
        rows = [
            ("user", "The ERC periodic report deadline is 30 June."),
            ("assistant", "Noted."),
            ("user", "Updated: the ERC periodic report deadline is 15 July, not 30 June."),
            ("assistant", "Got it, 15 July."),
        ]
        said = [
            Utterance("c", i + 1, sp, t, i + 1, "2026-01-01T00:00:00.000000Z", counter.count(t))
            for i, (sp, t) in enumerate(rows)
        ]
        summarizer = ExtractiveSummarizer(counter)
        first = summarizer.summarize("", said[:2], 20)
        assert "30 June" in first
        summary = summarizer.summarize(first, said[2:], 30)
        assert "15 July (was 30 June)" in summary, summary
        assert summary.count("30 June") == 1, summary

    def test_a_move_from_one_value_to_another_is_a_correction_not_a_range(self):
        """Sum33: 'moved the meeting from 17:30 to 18:00' kept '17:30 to 18:00', a range."""
        from chd.core.summaries.extractive import _items_of

        def texts(sentence: str, facts: tuple[str, ...], width: int = 0) -> list[str]:
            return [text for text, _ in _items_of(sentence, facts, width)]

        assert texts("I've moved the meeting from 17:30 to 18:00.", ("17:30", "18:00")) == [
            "18:00 (was 17:30)"
        ]
        # Without a verb of change it is a range.
        assert texts("The shop is open from 9:00 to 17:00.", ("9:00", "17:00")) == ["9:00 to 17:00"]

    def test_a_recount_of_a_listed_count_is_marked(self):
        """Sum33: '6 people' listed by an earlier fold, then 'so 5 people now': the new count says it replaced it."""
        from chd.core.summaries.extractive import ExtractiveSummarizer
        from chd.core.tokens import default_counter
        from chd.core.utterance import Utterance

        counter = default_counter()
        rows = [
            ("user", "Hair and makeup is for 6 people on the morning."),
            ("assistant", "Noted."),
            ("user", "Jonah recounted. It's 5 people getting ready."),
            ("assistant", "Okay."),
        ]
        said = [
            Utterance("c", i + 1, sp, t, i + 1, "2026-01-01T00:00:00.000000Z", counter.count(t))
            for i, (sp, t) in enumerate(rows)
        ]
        summarizer = ExtractiveSummarizer(counter)
        first = summarizer.summarize("", said[:2], 20)
        assert "6 people" in first
        summary = summarizer.summarize(first, said[2:], 24)
        assert "5 people (was 6 people)" in summary, summary
        # A unit of measure is no counted noun: two concentrations may both be current.
        from chd.core.summaries.extractive import _counted_noun

        assert _counted_noun("78 households") == ("households",)
        assert _counted_noun("300 mM") is None
        assert _counted_noun("3 days") is None

    def test_one_quantity_in_two_units_is_one_item(self):
        """Sum33: '2 h 45 min' was listed as '2 h' and '45 min', each a cut of the duration."""
        from chd.core.summaries.extractive import _items_of

        items = _items_of("The drive takes 2 h 45 min from Buffalo.", ("2 h", "45 min"), 0)
        assert [text for text, _ in items] == ["2 h 45 min"]
        items = _items_of("We need 3 pallets 2 drums.", ("3 pallets", "2 drums"), 0)
        assert [text for text, _ in items] == ["3 pallets", "2 drums"]

    def test_a_time_stays_joined_to_the_place_it_is_at(self):
        """Sum33: 'Oakhurst Barn at 11:00 am' was listed 'February 21, 11:00 am, Oakhurst Barn'."""
        from chd.core.summaries.extractive import ExtractiveSummarizer
        from chd.core.tokens import default_counter
        from chd.core.utterance import Utterance

        counter = default_counter()
        text = "Booked your visits: Oakhurst Barn at 11:00 am and Willow Creek at 2:00 pm on February 21."
        said = [
            Utterance(
                "c", 1, "assistant", text, 1, "2026-01-01T00:00:00.000000Z", counter.count(text)
            )
        ]
        summary = ExtractiveSummarizer(counter).summarize("", said, 30)
        assert "Oakhurst Barn at 11:00 am" in summary or "Willow Creek at 2:00 pm" in summary, (
            summary
        )
        assert not re.search(r"(^|, |; |: )(11:00 am|2:00 pm)", summary), summary
        # The next fold reads the joined pair as one piece: the time never loses its place.
        again = ExtractiveSummarizer(counter).summarize(summary, [], 18)
        assert "11:00 am" not in again or "Oakhurst Barn at 11:00 am" in again, again
        # With no room for a line's head, the facts that fit are listed whole, never cut at a token.
        for limit in (8, 5):
            tiny = ExtractiveSummarizer(counter).summarize(summary, [], limit)
            assert tiny and not tiny.endswith(" at"), tiny
            assert all(item in summary for item in tiny.split("; ")), tiny

    def test_not_the_old_value_is_a_correction(self):
        """Sum33: 'USD 1.15 million, not the USD 1.2 million' left both values unmarked."""
        from chd.core.summaries.extractive import _items_of

        sentence = "The house is valued at USD 1.15 million, not the USD 1.2 million Karen guessed."
        items = _items_of(sentence, ("USD 1.15 million", "USD 1.2 million"), 0)
        assert [text for text, _ in items] == ["USD 1.15 million (was USD 1.2 million)"]
        sentence = "She quoted a fee of EUR 2,200 plus VAT, not the EUR 2,600 you mentioned."
        items = _items_of(sentence, ("EUR 2,200", "VAT", "EUR 2,600"), 0)
        assert "EUR 2,200 (was EUR 2,600)" in [text for text, _ in items]
