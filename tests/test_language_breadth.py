"""Issue 25, this round: forms the blind tuning corpora showed, and the safety rules around them.

Each case is a class of phrasing (self-corrections, remarks that say why,
summaries in the caller's words, unlisted function names, several settings at
once), with a counter-case that must stay refused or read otherwise: what a
rule sets aside must never be what narrows, negates or changes the request.
"""

from __future__ import annotations

from typing import Any

import pytest

from chd.core.errors import InvalidRequest
from chd.core.history import ConversationHistory
from chd.core.language.grammar.remarks import is_remark
from chd.core.language.grammar.repairs import repaired
from chd.core.language.parser import parse
from chd.core.settings import Settings
from tests.demo_conversation import seed_demo


@pytest.mark.parametrize(
    ("query", "operation", "fields"),
    [
        # Spoken self-corrections: what follows the marker replaces what it repeats.
        ("show me the last two no wait the last three messages", "retrieve", {"last_n": 3}),
        ("read me turn two sorry turn three", "retrieve", {"turn_from": 3, "turn_to": 3}),
        (
            "set the max tokens to four thousand no sorry six thousand",
            "configure",
            {"max_tokens": 6000},
        ),
        (
            "get rid of the first four messages actually no just the first two",
            "remove",
            {"oldest": 2},
        ),
        # Remarks that say why are set aside; the request is read in full.
        (
            "Delete all utterances before turn 3. The earlier weather discussion is no longer relevant.",
            "remove",
            {"before_turn": 3},
        ),
        (
            "Remove the most recent entry produced by the AI, as it contained an error.",
            "remove",
            {"speaker": "assistant", "newest": 1},
        ),
        (
            "Could you remove lines 5 and 6? They were logged by mistake.",
            "remove",
            {"seqs": [5, 6]},
        ),
        # Summaries in the caller's words.
        ("Summarize the dialogue between the user and the assistant.", "summarize", {}),
        (
            "Generate a compressed summary of the conversation so far (max 300 tokens) for context injection.",
            "summarize",
            {"token_limit": 300},
        ),
        ("gen summary --limit 256", "summarize", {"token_limit": 256}),
        ("Summary please, not more than 50 tokens.", "summarize", {"token_limit": 50}),
        # Function and action names nobody listed.
        (
            'memory.add(role="user", content="Is breakfast included?")',
            "store",
            {"speaker": "user", "text": "Is breakfast included?"},
        ),
        ("delete_utterances(turn=2)", "remove", {"turn_from": 2, "turn_to": 2}),
        (
            '{"task": "summarize_conversation", "limit_tokens": 120}',
            "summarize",
            {"token_limit": 120},
        ),
        ("df.tail(3)", "retrieve", {"last_n": 3}),
        # Several settings at once, eviction_batch among them.
        (
            "set eviction_batch=2 max_tokens=2000",
            "configure",
            {"eviction_batch": 2, "max_tokens": 2000},
        ),
        # Stores explained by their caller.
        (
            'Store the system prompt so that it remains available for later turns: "You are a helpful travel assistant."',
            "store",
            {"text": "You are a helpful travel assistant.", "speaker": "system"},
        ),
        ("Which lines mention the budget? Thanks.", "retrieve", {"topic": "the budget"}),
    ],
)
def test_read_as_meant(query: str, operation: str, fields: dict[str, Any]) -> None:
    parsed = parse(query)
    assert (parsed.operation, parsed.fields) == (operation, fields)


@pytest.mark.parametrize(
    "query",
    [
        # A clause that narrows, negates or hedges is never set aside.
        "Delete turn 1. Only the user's ones.",
        "Delete turn 1, but not the assistant's reply.",
        "Save this for later, maybe",
        # A clause describing the content introduces it: refused, not stored as 'delete'.
        "Store the following assistant utterance. It contains the word 'delete', but it is ordinary content: \"You can delete it\"",
        # A name that says more than its verb, or two operations.
        "forget_everything()",
        "get_and_delete(3)",
    ],
)
def test_still_refused(query: str) -> None:
    with pytest.raises(InvalidRequest):
        parse(query)


def test_a_remark_with_a_scope_word_or_another_write_is_not_a_remark() -> None:
    assert is_remark("they were logged by mistake", "remove")
    assert not is_remark("keep only the first one", "remove")
    assert not is_remark("the user asked to delete it", "retrieve")
    assert not is_remark("the user ones", "remove")  # no verb of its own: it may narrow


def test_a_correction_needs_the_phrase_it_repeats() -> None:
    assert repaired("delete turn 2, sorry") is None
    assert repaired("Sorry, delete turn 2") is None


def test_eviction_batch_set_per_conversation_changes_how_many_leave() -> None:
    """Through the history: the override is kept with the conversation and used by the next eviction."""
    history = ConversationHistory(settings=Settings(buffer_size=8, eviction_batch=5))
    try:
        seed_demo(history)
        outcome = history.query("set eviction_batch=2", {}, {})
        assert outcome.result["settings"]["eviction_batch"] == 2
        stored = history.query("Add user utterance: one more", {}, {})
        assert stored.result["evicted"] == [1, 2]  # two leave, not five
    finally:
        history.close()


@pytest.mark.parametrize(
    ("query", "removed"),
    [
        ("Delete every utterance stored more than one hour ago.", [1, 2, 3, 4]),
        ("Delete the entries created within the last five minutes.", [5, 6, 7, 8]),
    ],
)
def test_a_remove_by_age_deletes_by_the_stored_time(query: str, removed: list[int]) -> None:
    """The demo's turns 1-2 were stored two hours ago, turns 3-4 a minute ago."""
    history = ConversationHistory(settings=Settings())
    try:
        seed_demo(history)
        outcome = history.query(query, {}, {})
        assert outcome.result["removed"] == removed
        assert [u.seq for u in history.backend.read("default").utterances] == sorted(
            set(range(1, 9)) - set(removed)
        )
    finally:
        history.close()


@pytest.mark.parametrize(
    "query",
    [
        # An outside review (issue 25) found each of these run as something else.
        "How do I delete turn 2?",
        "Tell me how to remove turn 2",
        "How do I set the buffer size to 5?",
        "Is the buffer size 5?",
        "Should the buffer size be 5?",
        "Check that the buffer size is 5",
        "Show the settings with buffer size 5",
        "get_settings(buffer_size=5)",
        "get_settings(reset=true)",
        "Does the buffer hold 5 utterances?",
        "Delete turn 1 and the last message",
        "Remove everything before turn 3 and the last message",
        "Set the buffer size and the eviction batch to 4",
        "Set buffer size to 10 and max tokens",
        "Delete turn 2, the reply can stay",
        "Delete turn 2, it should be kept",
        "Delete turn 2, please disregard this request",
        "Delete turn 2. Oops, that was the wrong conversation",
        "Delete the last message, it was the user's",
        "Get the last 3 messages, they are the user's",
        "Remove utterance 4, no wait, utterance 4 is important",
        "Find utterances about Paris but not in turn 1",
        "The user said I want 2 tickets",
        "Summarize the conversation, limit 5",
        "Summarize what was said about Paris",
        "Store this - the assistant said it, not the user: hello there",
    ],
)
def test_what_the_review_found_is_refused(query: str) -> None:
    with pytest.raises(InvalidRequest):
        parse(query)


def test_a_correction_keeps_what_followed_the_phrase_it_replaces() -> None:
    parsed = parse("Delete the assistant's replies before turn 3, sorry, the user's replies")
    assert (parsed.operation, parsed.fields) == ("remove", {"before_turn": 3, "speaker": "user"})


def test_a_summary_of_a_range_is_a_new_summary() -> None:
    parsed = parse("Show me a summary of turns 1 to 2")
    assert (parsed.operation, parsed.fields) == ("summarize", {"turn_from": 1, "turn_to": 2})


@pytest.mark.parametrize(
    "query",
    [
        # The second review's findings.
        "Delete messages from 2 hours ago",
        "Delete utterance 5, sorry, the last message",
        "Delete the last 3 turns sorry messages",
        "Is buffer_size = 5?",
        "Buffer size is 5?",
        "Delete utterance 3?",
        "Delete turn 2? Just asking",
        "Can the buffer size be 5?",
        "Delete turn 1, also the last message",
        "Get turn 1 and the last message",
        "Delete the last message, it was mine",
        "Delete the last turn, it was about the weather",
        "Set the buffer size to 5. Just kidding.",
        "Set the buffer size to 5 for all conversations",
        "Find utterances about Paris minus turn 1",
        "Add user utterance (no wait, assistant): hello",
        # A write's remark must agree with it; these take it back or spare part of it.
        "Delete turn 2. The answer is still needed.",
        "Delete turn 2, the question was fine",
        "Delete turn 2, sparing the reply",
        "Delete turn 2. Just kidding.",
        "Remove turn 2, jk",
        "Delete utterance 2 oops",
        "Set the buffer size to 5. Just kidding.",
    ],
)
def test_what_the_second_review_found_is_refused(query: str) -> None:
    with pytest.raises(InvalidRequest):
        parse(query)


@pytest.mark.parametrize(
    ("query", "operation", "fields"),
    [
        ("Can you delete turn 2?", "remove", {"turn_from": 2, "turn_to": 2}),
        ("Delete turn 2, it was a mistake", "remove", {"turn_from": 2, "turn_to": 2}),
        (
            "Add utterance (from the assistant): hello",
            "store",
            {"text": "hello", "speaker": "assistant"},
        ),
        ("Add utterance (turn 2): hello", "store", {"text": "hello", "turn_number": 2}),
    ],
)
def test_requests_and_bracketed_speakers_still_read(
    query: str, operation: str, fields: dict[str, Any]
) -> None:
    parsed = parse(query)
    assert (parsed.operation, parsed.fields) == (operation, fields)


@pytest.mark.parametrize(
    "query",
    [
        "Summarize the conversation, at least 50 tokens",
        "The user mentioned I want 2 tickets",
        "Set the token budget to 4000 tokens and the buffer size to 4000 tokens",
        "add_message('user', 'system')",
        # The running summary is not in the buffer: clearing "the buffer" would drop it too.
        "Clear the buffer",
        "Remove all utterances from the buffer",
    ],
)
def test_more_of_the_second_review_is_refused(query: str) -> None:
    with pytest.raises(InvalidRequest):
        parse(query)


def test_the_summary_of_a_range_is_never_the_running_summary_beside_raw_utterances() -> None:
    """Refused or summarized, never answered with the stored summary plus the range's utterances."""
    for query in ("Get the summary of the last 2 turns", "Give me the summary for turn 3"):
        try:
            parsed = parse(query)
        except InvalidRequest:
            continue
        assert parsed.operation == "summarize", (query, parsed)
