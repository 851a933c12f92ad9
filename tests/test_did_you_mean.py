"""Refusals that help (issue 25): did_you_mean lists rewrites that, sent back, do what was meant."""

from __future__ import annotations

import json

import pytest

from chd.core.history import ConversationHistory
from chd.core.language.parser import NotUnderstood, parse
from chd.core.settings import Settings
from tests.demo_conversation import seed_demo


def _refusal(query: str) -> NotUnderstood:
    with pytest.raises(NotUnderstood) as caught:
        parse(query)
    return caught.value


@pytest.mark.parametrize(
    ("query", "operation", "fields"),
    [
        ("stats for the dashboard pls", "stats", {}),
        ("recap the weather part (turns 1-2) plz", "summarize", {"turn_from": 1, "turn_to": 2}),
        (
            "can u pull up turn 1 again, forgot what the weather was",
            "retrieve",
            {"turn_from": 1, "turn_to": 1},
        ),
    ],
)
def test_a_suggestion_sent_back_reads_as_what_was_meant(
    query: str, operation: str, fields: dict
) -> None:
    """The first did_you_mean rewrite parses to the operation and fields the refused query meant."""
    meant = _refusal(query).did_you_mean
    assert meant, query
    back = parse(meant[0])
    assert (back.operation, back.fields) == (operation, fields)


def test_a_suggestion_sent_back_runs_through_the_history() -> None:
    """Sending the rewrite back as the query runs it: turn 1's two utterances come back."""
    history = ConversationHistory(settings=Settings())
    try:
        seed_demo(history)
        refusal = _refusal("can u pull up turn 1 again, forgot what the weather was")
        outcome = history.query(refusal.did_you_mean[0], {}, {})
        assert outcome.operation == "retrieve"
        assert [u["seq"] for u in outcome.result["utterances"]] == [1, 2]
    finally:
        history.close()


def test_the_refusal_message_carries_did_you_mean_as_one_json_line() -> None:
    """Clients read the rewrites from the error's details: a line 'did_you_mean: [...]'."""
    refusal = _refusal("stats for the dashboard pls")
    line = next(x for x in str(refusal).splitlines() if x.startswith("did_you_mean: "))
    assert (
        json.loads(line.removeprefix("did_you_mean: ")) == list(refusal.did_you_mean) == ["stats()"]
    )


@pytest.mark.parametrize(
    "query",
    [
        "Remove the last part of the conversation.",  # a vague write is never guessed into one
        "show the last 3 messages newest first",  # a read that would drop an order (it answers oldest first)
        "show messages newer than 1 hour",  # nor a time word
        "Show everything except turn 4",  # nor a negation
        "annihilate the user messages",  # nor an unknown first word (a verb it does not know)
    ],
)
def test_no_suggestion_drops_a_word_that_narrows_or_writes(query: str) -> None:
    """A rewrite that would leave out a write, order, time, negation or unknown verb is not offered."""
    assert _refusal(query).did_you_mean == ()
