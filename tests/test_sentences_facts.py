"""What the offline summarizer recognises as a fact in one sentence (summaries/sentences.py)."""

from __future__ import annotations

from chd.core.summaries.sentences import (
    STOPWORDS,
    facts_in,
    facts_of,
    name_words,
    said_elsewhere,
    said_in,
    split_sentences,
    utterance_key,
    words_of,
)


class TestPhrasesAroundRareWords:
    """A word rare in English is kept with the words of its phrase, and only where a phrase starts."""

    def test_a_word_the_tokenizer_splits_is_kept_with_its_phrase(self):
        """'herringbone parquet' is the fact, not 'herringbone' alone."""
        facts = facts_of("We want the herringbone parquet in the hall.", set(), {"herringbone"})
        assert facts == ["herringbone parquet"]

    def test_an_uncommon_word_is_a_fact_after_an_article_or_a_preposition(self):
        """'allergic to sesame': sesame is the object, kept; 'is allergic' is no fact."""
        facts = facts_of("Maya is allergic to sesame.", {"Maya"}, set(), {"sesame", "allergic"})
        assert facts == ["Maya", "sesame"]

    def test_an_uncommon_word_after_a_subject_is_a_verb_not_a_fact(self):
        """'Declan replied' keeps the name, not the verb."""
        facts = facts_of("Then Declan replied quickly.", set(), set(), {"replied"})
        assert facts == ["Declan"]

    def test_the_modifiers_before_an_uncommon_noun_stay_with_it(self):
        """'the old cathedral' keeps 'old cathedral', the words after a verb do not join."""
        facts = facts_of("The hotel is near the old cathedral.", set(), set(), {"cathedral"})
        assert facts == ["old cathedral"]

    def test_a_phrase_is_a_fact_of_its_own_not_glued_to_the_number_after_it(self):
        """'our invoices say €2400': the amount is a fact by itself."""
        facts = facts_of("Since May our invoices say €2400 instead.", set(), set(), {"invoices"})
        assert "€2400" in facts and not any("say €2400" in f for f in facts)

    def test_a_time_of_day_stays_with_its_weekday_even_when_uncommon(self):
        """'Monday noon' is one fact."""
        facts = facts_of("Expect an answer by Monday noon.", set(), set(), {"noon"})
        assert facts == ["Monday noon"]


class TestShapesOfFacts:
    """Names, versions, messages, literals and measurements kept as written."""

    def test_a_lower_case_name_before_its_version_is_one_fact(self):
        """'pydantic 2.7.0', as a bench or a reader would look it up."""
        facts = facts_of("That comes from pydantic 2.7.0, which changed parse_obj.", set())
        assert facts[0] == "pydantic 2.7.0"

    def test_a_decimal_quantity_takes_no_name_before_it(self):
        """'8.2 square metres' is a quantity, not a version: 'need' does not join it."""
        facts = facts_of("Then you need 8.2 square metres with waste.", set())
        assert facts == ["8.2 square metres"]

    def test_a_short_clause_after_a_colon_is_kept_as_said(self):
        """An error message is a value: kept whole, and its literal too."""
        facts = facts_of(
            "TypeError in src/a.py at line 40: unexpected keyword argument 'tz'.", set()
        )
        assert "unexpected keyword argument 'tz'" in facts
        assert "src/a.py" in facts

    def test_a_sentence_after_a_label_is_not_a_value(self):
        """'Updated: the budget is now 1700 euros' keeps the amount, not the clause."""
        assert facts_of("Updated: the budget is now 1700 euros.", set()) == ["1700 euros"]

    def test_a_clause_with_a_comma_after_a_colon_is_read_fact_by_fact(self):
        """A list after a colon is not one value."""
        facts = facts_of("The quote came in: £8,400 all in, reference Q-2291.", set())
        assert facts == ["£8,400", "Q-2291"]

    def test_a_quoted_literal_keeps_its_quotes(self):
        """'customer_id' in quotes is a literal; the quotes are part of what was said."""
        assert facts_of("The key 'customer_id' is missing.", set()) == ["'customer_id'"]
        assert facts_of("Python cannot find 'Mapping' there.", set()) == ["'Mapping'"]

    def test_a_measurement_by_another_is_one_fact(self):
        """'3.1 by 2.4 metres', not '3.1' and '2.4 metres'."""
        assert facts_of("The room is 3.1 by 2.4 metres.", set()) == ["3.1 by 2.4 metres"]

    def test_a_capital_the_is_part_of_the_name_it_opens(self):
        """'The Linden Inn', mid-sentence and at the start."""
        assert facts_of("We stay at The Linden Inn tonight.", set()) == ["The Linden Inn"]
        assert facts_of("The Copper Kettle is a short walk away.", set()) == ["The Copper Kettle"]

    def test_a_joined_name_opening_a_sentence_is_whole(self):
        """'Seed & Sprout near the hotel', not 'Sprout'."""
        assert facts_of("Seed & Sprout near the hotel has a vegetarian menu.", set()) == [
            "Seed & Sprout"
        ]


class TestSaidIn:
    """Whether a fact occurs as whole words."""

    def test_a_number_inside_a_longer_number_or_a_version_is_not_said(self):
        """'€500' is not in '€5000', '2' not in 'v2.1.0', 'Ada' is in 'Ada; Bo'."""
        assert not said_in("€500", "a refund of €5000")
        assert not said_in("2", "release v2.1.0")
        assert said_in("Ada", "Turns 1–2: Ada; Bo")
        assert said_in("2", "exit code 2.")


class TestSaidElsewhere:
    """Which facts another text already says, as whole words, found in one pass over it."""

    def test_whole_words_only_and_a_turn_range_is_not_a_number_said(self):
        """'€500' is not said by '€5000' nor '2' by 'v2.1.0' or a head's 'Turns 1–2'; 'Ada' and 'code 7' are."""
        text = "Turns 1–2: Ada; Bo asked for a refund of €5000 on release v2.1.0 (exit code 7.) and “Lena Park”."
        facts = [
            "€500",
            "2",
            "Ada",
            "code 7",
            "Lena Park",
            "Bo asked",
            "€5000",
            "v2.1.0",
            "Park Lena",
        ]
        assert said_elsewhere(facts, text) == {
            "Ada",
            "code 7",
            "Lena Park",
            "Bo asked",
            "€5000",
            "v2.1.0",
        }


class TestWords:
    """Word tokens for weights, topics and near-repeats."""

    def test_a_word_is_made_of_letters_of_any_script(self):
        """'München', 'Élodie' and 'Москве' are one word each; a time stays one number."""
        from chd.core.summaries.sentences import words_of

        assert words_of("Élodie fährt nach München, Встреча в Москве um 10:30.") == [
            "Élodie",
            "fährt",
            "nach",
            "München",
            "Встреча",
            "в",
            "Москве",
            "um",
            "10:30.",
        ]


SENTENCES = [
    "We want the herringbone parquet in the hall.",
    "Then Declan replied quickly.",
    "That comes from pydantic 2.7.0, which changed parse_obj.",
    "Then you need 8.2 square metres with waste.",
    "TypeError in src/a.py at line 40: unexpected keyword argument 'tz'.",
    "Updated: the budget is now 1700 euros.",
    "The quote came in: £8,400 all in, reference Q-2291.",
    "The room is 3.1 by 2.4 metres.",
    "We stay at The Linden Inn tonight.",
    "Seed & Sprout near the hotel has a vegetarian menu.",
    "Delivery takes 3 business days after March 4.",
    "The error says: connection refused",
    "ok thanks",
    "Maya is allergic to sesame. Maya likes Oslo.",
    "message 3 about the harbour gull storm rope",
]


class TestFirstFact:
    """The key of an utterance is its first fact, found without reading the rest of the sentence."""

    def test_the_first_fact_is_the_first_of_all_the_facts(self):
        """facts_of(first=True) gives facts_of's first, or nothing when it finds none."""
        from tests.talk import fact

        for sentence in SENTENCES + [fact(i) for i in range(60)]:
            for names in (set(), {sentence.split(" ")[0]}):
                assert facts_of(sentence, names, first=True) == facts_of(sentence, names)[:1], (
                    sentence
                )

    def test_an_utterance_key_is_the_first_fact_of_its_first_sentence_with_one(self):
        """utterance_key as defined: facts_in over the sentences in turn, else the longest content word."""
        from tests.talk import fact

        for text in (
            SENTENCES
            + [fact(i) + " " + fact(i + 1) for i in range(40)]
            + ["Hello there, how are you?"]
        ):
            sentences = split_sentences(text)
            names = name_words(sentences)
            expected = next(
                (f[0] for f in (facts_in(s, names, set()) for s in sentences) if f), None
            )
            if expected is None:
                words = [w for w in words_of(text) if len(w) >= 4 and w.lower() not in STOPWORDS]
                expected = max(words, key=len, default="")
            assert utterance_key(text) == expected, text

    def test_an_utterance_key_looks_for_facts_only_in_the_first_characters(self, monkeypatch):
        """A fact past KEY_SCAN_CHARS is not looked for, so a long text of tiny sentences costs a bounded scan."""
        from chd.core.summaries import sentences
        from tests.talk import fact

        early, late = fact(1), fact(2)
        assert utterance_key(early + " " + "ok. " * 10) == utterance_key(early)
        padded = "ok. " * (sentences.KEY_SCAN_CHARS // 4) + late
        assert utterance_key(padded) != utterance_key(late)  # the longest word instead
        calls = []
        real = sentences.facts_of
        monkeypatch.setattr(sentences, "facts_of", lambda *a, **k: calls.append(1) or real(*a, **k))
        utterance_key("a\n" * 16_000)
        assert len(calls) <= sentences.KEY_SCAN_CHARS // 2


class TestAbbreviationsUnitsAndTitles:
    """Issue 26: abbreviations do not end sentences; a number keeps its unit, scale word and label; a name its title."""

    def test_a_title_does_not_end_the_sentence_and_stays_with_the_name(self):
        """'Dr. Helen Achterberg' is one fact in one sentence."""
        sentences = split_sentences(
            "Ask Dr. Helen Achterberg, e.g. about run No. 3 vs. run No. 4. Then stop."
        )
        assert sentences == [
            "Ask Dr. Helen Achterberg, e.g. about run No. 3 vs. run No. 4.",
            "Then stop.",
        ]
        assert facts_of(sentences[0], set())[:1] == ["Dr. Helen Achterberg"]

    def test_no_before_a_word_still_ends_a_sentence(self):
        """'No. I think not.' is two sentences: 'No.' is an abbreviation only before a number."""
        assert split_sentences("No. I think not.") == ["No.", "I think not."]

    def test_a_number_keeps_its_scale_word_unit_or_label(self):
        """'USD 5 million', not 'USD 5'; '600 mg', not '600'; 'type 2 diabetes', not '2 diabetes'."""
        assert facts_of("The cap is USD 5 million this year.", set()) == ["USD 5 million"]
        assert facts_of("She takes 600 mg twice a day.", set()) == ["600 mg"]
        assert facts_of("He has type 2 diabetes since May.", set()) == ["type 2 diabetes", "May"]
        assert facts_of("Spin at 4,000 rpm and keep it at -18 °C.", set()) == [
            "4,000 rpm",
            "-18 °C",
        ]
        assert facts_of("The rate is 3.85 % fixed.", set()) == ["3.85 %"]

    def test_counts_in_words_irregular_plurals_ordinals_and_phone_numbers_are_facts(self):
        """'three nights', '12 people', '4th floor', '(845) 555-0142', 'Oct. 10', '16,000 × g' stay whole."""
        assert facts_of("We need three nights for 12 people on Oct. 10.", set()) == [
            "three nights",
            "12 people",
            "Oct. 10",
        ]
        assert facts_of("Call (845) 555-0142 about the 4th floor.", set()) == [
            "(845) 555-0142",
            "4th floor",
        ]
        assert facts_of("Spin at 16,000 × g in lane 3.", set()) == ["16,000 × g", "lane 3"]
