"""Every phrasing in tests/corpus/queries.jsonl, checked by its effect on the conversation.

Each entry runs on a fresh demo conversation (tests/demo_conversation.py)
through ``ConversationHistory.query``; ``expect`` says what the response
and the stored state must show afterwards. A refused query must leave the
conversation exactly as it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chd.core.errors import DaemonError
from chd.core.history import ConversationHistory
from chd.core.memory.configure import effective_settings
from chd.core.settings import Settings
from chd.service.server import status_for
from tests.demo_conversation import seed_demo

CORPUS = Path(__file__).parent / "corpus" / "queries.jsonl"
ENTRIES = [
    json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()
]
OPERATIONS = {"store", "retrieve", "remove", "summarize", "configure", "mark", "stats"}


def _expected_operation(expect: dict[str, Any]) -> str | None:
    if "operation" in expect:
        return expect["operation"]
    for key, operation in (
        ("stored", "store"),
        ("seqs", "retrieve"),
        ("seq_set", "retrieve"),
        ("count", "retrieve"),
        ("summary_only", "retrieve"),
        ("removed", "remove"),
        ("summarize", "summarize"),
        ("settings", "configure"),
        ("important", "mark"),
        ("stats", "stats"),
    ):
        if key in expect:
            return operation
    return None


def run_entry(entry: dict[str, Any]) -> None:
    history = ConversationHistory(settings=Settings())
    setup = entry.get("setup", {})
    seed_demo(history, important=setup.get("important", ()), settings=setup.get("settings"))
    before = history.backend.read("default")
    expect = entry["expect"]
    try:
        outcome = history.query(entry["query"], entry.get("metadata"), entry.get("data"))
    except DaemonError as error:
        assert "error" in expect, f"refused unexpectedly: {error}"
        assert status_for(error).name == expect["error"], str(error)
        assert history.backend.read("default") == before, "a refused query changed the conversation"
        outcome = None
    else:
        assert "error" not in expect, (
            f"expected {expect['error']}, got {outcome.operation} {outcome.result}"
        )
        operation = _expected_operation(expect)
        if operation is not None:
            assert outcome.operation == operation, outcome.result
    state = history.backend.read("default")
    if outcome is not None:
        _check_response(expect, outcome.result, outcome.metadata)
    _check_state(expect, state, history.settings)


def _check_response(
    expect: dict[str, Any], result: dict[str, Any], metadata: dict[str, Any]
) -> None:
    hits = [u["seq"] for u in result.get("utterances", [])]
    if "seqs" in expect:
        assert hits == expect["seqs"]
    if "seq_set" in expect:
        assert sorted(hits) == sorted(expect["seq_set"])
    if "count" in expect:
        assert len(hits) == expect["count"]
    if expect.get("ranked"):
        assert result["ranked"] and all("score" in u for u in result["utterances"])
        scores = [u["score"] for u in result["utterances"]]
        assert scores == sorted(scores, reverse=True)
    if expect.get("summary_only"):
        assert "summary" in result and "utterances" not in result
    if expect.get("include_summary"):
        assert "summary" in result and "utterances" in result
    if "removed" in expect:
        assert result["removed"] == expect["removed"]
    if "stored" in expect:
        for key, value in expect["stored"].items():
            assert result["utterance"][key] == value, key
    if "summarize" in expect:
        for key, value in expect["summarize"].items():
            assert result[key] == value, key
        assert result["tokens"] <= result["token_limit"]
    if "stats" in expect:
        for key, value in expect["stats"].items():
            assert result[key] == value, key
    if "confidence" in expect:
        assert metadata["confidence"] == expect["confidence"]


def _check_state(expect: dict[str, Any], state, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    seqs = [u.seq for u in state.utterances]
    if "left" in expect:
        assert seqs == expect["left"]
    elif "removed" in expect:
        assert seqs == [s for s in range(1, 9) if s not in expect["removed"]]
    if "stored" in expect:
        stored = state.utterances[-1]
        for key, value in expect["stored"].items():
            assert getattr(stored, key) == value, key
    if "settings" in expect:
        current = effective_settings(settings, state.settings)
        for key, value in expect["settings"].items():
            assert getattr(current, key) == value, key
    if "important" in expect:
        flags = {u.seq: u.important for u in state.utterances}
        for seq, value in expect["important"].items():
            assert flags[int(seq)] == value, seq
    if "buffer_tokens_at_most" in expect:
        assert sum(u.tokens for u in state.utterances) <= expect["buffer_tokens_at_most"]


class TestCorpus:
    """The corpus itself: big enough and covering every operation."""

    def test_corpus_has_at_least_150_phrasings(self) -> None:
        assert len(ENTRIES) >= 150

    def test_corpus_covers_every_operation_and_refusals(self) -> None:
        covered = {_expected_operation(e["expect"]) for e in ENTRIES}
        assert OPERATIONS <= covered
        assert any("error" in e["expect"] for e in ENTRIES)

    def test_corpus_queries_are_unique_with_their_inputs(self) -> None:
        keys = [
            json.dumps([e["query"], e.get("metadata"), e.get("data"), e.get("setup")])
            for e in ENTRIES
        ]
        assert len(keys) == len(set(keys))


@pytest.mark.parametrize(
    "entry", ENTRIES, ids=[f"{i:03d}:{e['query'][:40]}" for i, e in enumerate(ENTRIES)]
)
def test_phrasing_has_its_expected_effect(entry: dict[str, Any]) -> None:
    """Each phrasing does exactly what the corpus says, and a refusal changes nothing."""
    run_entry(entry)
