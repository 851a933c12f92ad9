"""The store rules' fast scans find exactly what their patterns find (issue 31, sequential stores).

grammar/store.py looks for separators and quotes by scanning for the
characters they start with and matching the pattern only there, skips the
tail and label patterns when the text holds none of the characters or
words they need, and grammar/store_header.py keeps the readings of short
instructions. Random texts over the characters that matter must give the
same matches as the patterns themselves, and a kept reading the same
Header as reading it afresh.
"""

from __future__ import annotations

import random

import pytest

from chd.core.language.grammar import store, store_header

# Separators, quotes, brackets, sentence ends, spaces, letters of the label
# words, and a few non-ASCII letters (the Kelvin sign folds to "k").
_ALPHABET = list(
    "\r\n:=>-\u2192\u2014\u2013\"'`\u201c\u201d\u2018\u2019\u201e\u201a\u00ab\u00bb\u2039\u203a"
    "\u300c\u300e()[].!?;, \tabcdeknoprstuwAT019\u212a\u00e9"
) + ["speaker", "turn", "role", "user", " - ", "--", "->", "Speaker: "]


def _texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(_ALPHABET, k=rng.randint(0, 40))) for _ in range(count)]


def _spans(matches: object) -> list[tuple[int, int]]:
    return [m.span() for m in matches]  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(3))
def test_scans_find_what_the_patterns_find(seed: int) -> None:
    for text in _texts(2000, seed):
        for pos in {0, len(text) // 2}:
            assert _spans(store._scan(store._SEPARATOR, store._SEPARATOR_START, text, pos)) == (
                _spans(store._SEPARATOR.finditer(text, pos))
            ), text
        found, expected = store._opening(text), store._OPEN.search(text)
        assert (found and found.span()) == (expected and expected.span()), text


@pytest.mark.parametrize("seed", range(3))
def test_skipped_patterns_could_not_have_matched(seed: int) -> None:
    for text in _texts(2000, seed):
        start = max(0, len(text) - 120)
        if store._TAIL_MARK.search(text, max(0, start - 1)) is None:
            assert store._TAIL.search(text, start) is None, text
        if not store._may_label(text, len(text)):
            assert store._LABEL.search(text) is None, text


def test_a_kept_reading_is_the_reading() -> None:
    for text in ("Add utterance", "Store the assistant's reply, turn 4", "Add user utterance"):
        store_header._KEPT_READINGS.clear()
        fresh = store_header.read_header(text)
        assert store_header._KEPT_READINGS.get(text) == fresh
        assert store_header.read_header(text) is store_header._KEPT_READINGS[text]
    # Not kept: words the rules do not read, a long text, and a note whose
    # words were set aside unread (understood, yet it may hold anyone's words).
    noted = "Save this verbatim, my secret word is banana"
    assert store_header.read_header(noted).understood
    for text in ("Add my gate code 4411", "Add user utterance " + "please " * 10, noted):
        store_header.read_header(text)
        assert text not in store_header._KEPT_READINGS


def test_the_instruction_cache_keeps_no_words_the_rules_set_aside() -> None:
    """Review of issue 31: a store's remark, set aside as commentary, was kept in the cache."""
    from chd.core.language.grammar import store_header
    from chd.core.language.parser import parse

    store_header._KEPT_READINGS.clear()
    for query in (
        "Add utterance: Save this for later, it was a lovely day: and more",
        "Save this, the weather was nice today",
        "We met Sarah at the café - thanks a ton mate, store it",
    ):
        parse(query)
    kept = " ".join(store_header._KEPT_READINGS)
    for private in ("lovely", "weather", "thanks", "Sarah"):
        assert private not in kept, (private, list(store_header._KEPT_READINGS))
    parse("Add user utterance: hello")
    assert any("Add" in text for text in store_header._KEPT_READINGS)


def test_a_urls_colon_is_never_taken_for_the_end_of_the_instruction() -> None:
    """Review of issue 31: 'Add utterance, speaker user, http://...' stored '//...' (the scheme lost)."""
    from chd.core.errors import InvalidRequest
    from chd.core.language.parser import parse

    url = "http://example.com/a?q=1"
    try:
        stored = parse(f"Add utterance, speaker user, {url}")
    except InvalidRequest:
        pass  # refused as unclear: nothing lost
    else:
        assert stored.fields["text"] == url
    assert parse(f"Save this: {url}").fields["text"] == url


def test_a_last_line_read_only_by_setting_a_clause_aside_is_not_taken_for_the_instruction() -> None:
    """Review of issue 31: 'line one\\nline two, add it' stored 'line one' (a line lost); now refused."""
    import pytest

    from chd.core.errors import InvalidRequest
    from chd.core.language.parser import parse

    for query in ("line one\nline two, add it", "We met at noon\nline two, save it"):
        with pytest.raises(InvalidRequest):
            parse(query)
    assert parse("Book the 9:15 train\nsave it").fields["text"] == "Book the 9:15 train"
