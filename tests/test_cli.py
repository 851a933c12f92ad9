"""The chd command against a real `chd serve` process."""

from __future__ import annotations

import json
import signal

import pytest

from tests.conftest import DaemonProcess, run_chd


def chd_query(daemon: DaemonProcess, text: str, *extra: str):
    return run_chd("query", text, "--target", daemon.target, *extra)


class TestQueryCommand:
    """Every operation works through `chd query`."""

    def test_store_retrieve_remove_summarize(self, daemon_process: DaemonProcess) -> None:
        """The four operations, human-readable by default."""
        done = chd_query(daemon_process, "Add user utterance: 'What is the weather today?'")
        assert done.returncode == 0, done.stderr
        assert "#1 [turn 1] user: What is the weather today?" in done.stdout
        done = chd_query(daemon_process, "Add utterance: Sunny and warm.", "--metadata", '{"speaker": "assistant"}')
        assert "#2 [turn 1] assistant: Sunny and warm." in done.stdout
        done = chd_query(daemon_process, "Find utterances about weather")
        assert done.returncode == 0 and "#1" in done.stdout and "score" in done.stdout
        done = chd_query(daemon_process, "Get the last 5 utterances")
        assert done.stdout.index("#1") < done.stdout.index("#2")
        done = chd_query(daemon_process, "Summarize conversation", "--data", '{"token_limit": 30}')
        assert done.returncode == 0 and "summary (" in done.stdout
        done = chd_query(daemon_process, "Remove oldest utterance")
        assert "removed: #1" in done.stdout
        done = chd_query(daemon_process, "Get summary")
        assert done.returncode == 0 and "summary" in done.stdout

    def test_json_output_is_machine_readable(self, daemon_process: DaemonProcess) -> None:
        """--json prints the response with integers as integers."""
        done = chd_query(daemon_process, "Add utterance: hello", "--json", "-c", "scripted")
        answer = json.loads(done.stdout)
        assert answer["operation"] == "store"
        assert answer["result"]["utterance"]["seq"] == 1
        assert answer["metadata"]["conversation_id"] == "scripted"

    def test_failed_query_exits_64_plus_status_code(self, daemon_process: DaemonProcess) -> None:
        """INVALID_ARGUMENT (3) exits 67 and NOT_FOUND (5) exits 69, message on stderr."""
        done = chd_query(daemon_process, "Make me a sandwich")
        assert done.returncode == 67
        assert "INVALID_ARGUMENT" in done.stderr and "supported forms" in done.stderr
        assert done.stdout == ""
        done = chd_query(daemon_process, "Remove utterance 9")
        assert done.returncode == 69 and "NOT_FOUND" in done.stderr

    def test_unreachable_daemon_exits_with_unavailable(self) -> None:
        """No daemon on the port: UNAVAILABLE (14) gives exit 78."""
        done = run_chd("query", "Get summary", "--target", "127.0.0.1:1", "--timeout", "3")
        assert done.returncode in (64 + 14, 64 + 4)
        assert done.stderr.startswith("chd: ")

    def test_bad_json_metadata_is_a_usage_error(self, daemon_process: DaemonProcess) -> None:
        """--metadata that is not a JSON object exits 2 before any call."""
        done = chd_query(daemon_process, "Get summary", "--metadata", "[1, 2]")
        assert done.returncode == 2 and "JSON object" in done.stderr

    def test_purpose_and_instructions(self, daemon_process: DaemonProcess) -> None:
        """The two other RPCs print their text."""
        assert "rolling buffer" in run_chd("purpose", "--target", daemon_process.target).stdout
        assert "SUMMARIZE" in run_chd("instructions", "--target", daemon_process.target).stdout


class TestServeCommand:
    """`chd serve` settings and signals."""

    def test_sigterm_exits_zero(self) -> None:
        """SIGTERM stops the daemon gracefully with exit code 0."""
        daemon = DaemonProcess()
        assert chd_query(daemon, "Add utterance: hi").returncode == 0
        assert daemon.terminate() == 0

    def test_sigint_exits_zero(self) -> None:
        """Ctrl-C (SIGINT) also stops it cleanly."""
        daemon = DaemonProcess()
        daemon.proc.send_signal(signal.SIGINT)
        assert daemon.terminate() == 0

    def test_buffer_size_flag(self) -> None:
        """--buffer-size 3 keeps three utterances."""
        daemon = DaemonProcess("--buffer-size", "3", "--eviction-batch", "1")
        try:
            for i in range(5):
                chd_query(daemon, f"Add utterance: number {i}")
            answer = json.loads(chd_query(daemon, "Get all utterances", "--json").stdout)
            assert [u["seq"] for u in answer["result"]["utterances"]] == [3, 4, 5]
        finally:
            daemon.kill()

    @pytest.mark.parametrize("flag", ["--buffer-size", "--max-tokens"])
    def test_invalid_limits_are_refused(self, flag: str) -> None:
        """A zero limit is a usage error naming the flag."""
        done = run_chd("serve", flag, "0")
        assert done.returncode == 2 and flag in done.stderr

    def test_env_sets_the_buffer_size(self, monkeypatch) -> None:
        """CHD_BUFFER_SIZE is read when no flag is given."""
        monkeypatch.setenv("CHD_BUFFER_SIZE", "2")
        monkeypatch.setenv("CHD_EVICTION_BATCH", "1")
        daemon = DaemonProcess()
        try:
            for i in range(3):
                chd_query(daemon, f"Add utterance: n{i}")
            answer = json.loads(chd_query(daemon, "Get all utterances", "--json").stdout)
            assert [u["seq"] for u in answer["result"]["utterances"]] == [2, 3]
        finally:
            daemon.kill()


def test_remove_of_summarized_turns_says_the_summary_forgot_them() -> None:
    """A remove that only reaches the summary reports the dropped segments, not just 'nothing'."""
    daemon = DaemonProcess("--buffer-size", "2", "--eviction-batch", "1")
    try:
        for i in range(4):
            assert chd_query(daemon, f"Add user utterance: Fact {i} about the harbour.").returncode == 0
        assert "Fact" in chd_query(daemon, "Get summary").stdout
        done = chd_query(daemon, "Remove before turn 3")
        assert done.returncode == 0, done.stderr
        assert "removed: nothing" in done.stdout
        # One segment per batch or one for both: segments follow the budget (issue 13).
        assert "summary segments dropped: 1" in done.stdout or "summary segments dropped: 2" in done.stdout
    finally:
        daemon.kill()
