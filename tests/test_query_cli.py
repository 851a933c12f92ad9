"""The new operations through the `chd query` command against a real daemon process."""

from __future__ import annotations

from tests.conftest import DaemonProcess, run_chd


class TestQueryCommand:
    """`chd query` prints every operation's answer and exits 64+code on refusals."""

    def test_operations_print_their_results(self, daemon_process: DaemonProcess) -> None:
        """Store, topic search with scores, configure, mark and stats all print and exit 0."""
        target = ("--target", daemon_process.target)
        for text in (
            "Add user utterance: Is Paris sunny?",
            "Add assistant utterance: Paris is sunny.",
        ):
            assert run_chd("query", text, *target).returncode == 0
        found = run_chd("query", "What did the assistant say about Paris?", *target)
        assert found.returncode == 0 and "#2" in found.stdout and "score" in found.stdout
        configured = run_chd("query", "Set the token budget to 4000", *target)
        assert configured.returncode == 0 and '"max_tokens": 4000' in configured.stdout
        marked = run_chd("query", "Mark utterance 2 as important", *target, "--json")
        assert marked.returncode == 0 and '"important": true' in marked.stdout
        stats = run_chd("query", "How many utterances are stored?", *target)
        assert stats.returncode == 0 and "utterance_count: 2" in stats.stdout

    def test_ambiguous_remove_exits_with_invalid_argument(
        self, daemon_process: DaemonProcess
    ) -> None:
        """'Remove 3 messages' exits 64+3 and says what to write instead."""
        refused = run_chd("query", "Remove 3 messages", "--target", daemon_process.target)
        assert refused.returncode == 64 + 3
        assert "INVALID_ARGUMENT" in refused.stderr and "the oldest 3" in refused.stderr


def test_a_configure_that_evicts_lists_its_evictions_once() -> None:
    """As seqs ("evicted: #1, #2"), not a second time as the raw field (issue 30 item 6)."""
    from chd.cli.answer import human

    text = human(
        {
            "operation": "configure",
            "result": {
                "changed": ["buffer_size"],
                "evicted": [1, 2],
                "overrides": {"buffer_size": 5},
            },
            "metadata": {"conversation_id": "default", "items_affected": 2, "tokens_used": 0},
        }
    )
    assert [line for line in text.splitlines() if line.startswith("evicted")] == ["evicted: #1, #2"]


def test_an_empty_line_of_a_context_or_summary_is_printed_empty() -> None:
    """No line of two spaces where the text has an empty one (newcomer 32 #2)."""
    from chd.cli.answer import human

    shown = human(
        {
            "operation": "retrieve",
            "metadata": {"conversation_id": "c", "items_affected": 1, "tokens_used": 9},
            "result": {
                "context": "Summary:\nfacts\n\nMost recent:\nhi",
                "tokens": 9,
                "token_limit": 9,
            },
        }
    )
    assert shown.splitlines()[2:] == ["  Summary:", "  facts", "", "  Most recent:", "  hi"]
