"""Adversarial query shapes for the query language, shared by tests/test_parser_linear.py and bench/bench_parse.py.

Each shape builds a query of about ``size`` characters from a repeated unit:
runs of spaces, punctuation, number words, speaker words, nested quotes,
control characters, and the reproductions of issue 14. Every grammar entry
point must read each of them in time linear in ``size``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from chd.core.errors import InvalidRequest
from chd.core.language import parser
from chd.core.language.grammar.configure import read_configure
from chd.core.language.grammar.context import read_context
from chd.core.language.grammar.mark import read_mark
from chd.core.language.grammar.remove import read_remove
from chd.core.language.grammar.retrieve import read_retrieve
from chd.core.language.grammar.stats import read_stats
from chd.core.language.grammar.store import read_store
from chd.core.language.grammar.summarize import read_summarize

__all__ = ["SHAPES", "NORMAL_QUERY", "RULES", "build", "best_seconds", "parse_uncached"]

NORMAL_QUERY = "What did the assistant say about Paris in turns 3 to 6?"


def _run(head: str, unit: str, tail: str = "") -> Callable[[int], str]:
    def make(size: int) -> str:
        count = max(1, (size - len(head) - len(tail)) // len(unit))
        return head + unit * count + tail

    return make


# name -> size -> query
SHAPES: dict[str, Callable[[int], str]] = {
    # issue 14, item 1: the speaker pattern's nested number-word group
    "speaker_number_words": _run("user ", "two ", "x"),
    # item 2: the trailing-filter patterns of a topic
    "topic_spaces": _run("Find utterances about x", " ", "y"),
    # item 3: politeness-suffix stripping, and counts on runs of number words
    "spaces_between_words": _run("a", " ", "a"),
    "number_words": _run("", "two "),
    # item 7: numbers too large for int() and float()
    "long_digits_count": _run("Get the last ", "9", " utterances"),
    "long_digits_tokens": _run("Get context within ", "9", "k tokens"),
    "long_digits_seq": _run("Remove utterance ", "9"),
    "long_digits_turn": _run("Summarize turns 1 to ", "9", " in 50 tokens"),
    "spaces": _run("", " "),
    "commas": _run("Find utterances about x", ",", "y"),
    "punctuation": _run("Get the last 5 utterances", "?!.,;:-", ""),
    "speaker_words": _run("Get ", "user ", "messages"),
    "speaker_possessive": _run("the ", "assistant's ", "messages"),
    "nested_quotes": _run("Find utterances about ", "\"'\u201c\u2018", "x"),
    "open_quotes": _run("Find ", "'a ", ""),
    "control_characters": _run("Get the last 5", "\x00\x01\x1b\x7f", " utterances"),
    "newlines": _run("Get the last 5", "\n\r\t", " utterances"),
    "polite_suffix": _run("Get the last 5 utterances", " please thanks", ""),
    "polite_prefix": _run("", "hey so now please ", "get the last 5"),
    "turn_words": _run("Get ", "turn ", "3"),
    "turn_ranges": _run("Get utterances in ", "turns 3 to ", "6"),
    "last_words": _run("Get the ", "last ", "messages"),
    "topic_markers": _run("Find ", "about ", "Paris"),
    "trailing_filters": _run("Find utterances about x", " in turns 3 to 6", ""),
    "token_words": _run("Summarize in ", "100 tokens ", ""),
    "hashes": _run("Remove ", "#1 ", ""),
    "seq_lists": _run("Get utterances 1", ", 2", ""),
    "call_arguments": _run("get_last_n(", "5, ", ")"),
    "call_parens": _run("summarize(", "(", ")"),
    "call_store": _run('add_utterance("', "hello world ", '", speaker="assistant")'),
    "call_store_escapes": _run('add_utterance("', 'a \\" b \\\\ ', '")'),
    "call_unclosed_strings": _run("get_utterances(", "'a, ", ")"),
    "store_header": _run("Add ", "user ", "utterance: hello"),
    "store_payload": _run("Add utterance: ", "hello world ", ""),
    "words": _run("Get ", "zebra ", "messages"),
}


def build(shape: str, size: int) -> str:
    """The query of ``shape`` at about ``size`` characters."""
    return SHAPES[shape](size)


def best_seconds(read: Callable[[str], object], text: str, repeats: int) -> float:
    """The fastest of ``repeats`` calls of ``read(text)``; a refusal counts as an answer.

    CPU time of this thread, not wall time: other processes on a loaded
    machine (the suite runs one worker per core) stretch wall time, not this.
    """
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        try:
            read(text)
        except InvalidRequest:
            pass
        best = min(best, time.thread_time() - start)
    return best


def parse_uncached(text: str) -> object:
    """``parse`` with the reading cache emptied first: time the reading, not the cache."""
    parser._READINGS.clear()
    return parser.parse(text)


# Every operation's rules and the closest-form suggestions: the grammar entry points.
RULES: dict[str, Callable[[str], object]] = {
    "store": read_store,
    "context": read_context,
    "mark": read_mark,
    "configure": read_configure,
    "stats": read_stats,
    "summarize": read_summarize,
    "remove": read_remove,
    "retrieve": read_retrieve,
    "closest_forms": lambda text: parser.closest_forms(text, "retrieve"),
}
