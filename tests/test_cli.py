"""The chd command (the installed executable) against a real `chd serve` process."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import pytest

from tests.conftest import ROOT, DaemonProcess, chd_command, chd_env, run_chd


def chd_query(daemon: DaemonProcess, text: str, *extra: str):
    return run_chd("query", text, "--target", daemon.target, *extra)


class TestQueryCommand:
    """Every operation works through `chd query`."""

    def test_store_retrieve_remove_summarize(self, daemon_process: DaemonProcess) -> None:
        """The four operations, human-readable by default."""
        done = chd_query(daemon_process, "Add user utterance: 'What is the weather today?'")
        assert done.returncode == 0, done.stderr
        assert "#1 [turn 1] user: What is the weather today?" in done.stdout
        done = chd_query(
            daemon_process,
            "Add utterance: Sunny and warm.",
            "--metadata",
            '{"speaker": "assistant"}',
        )
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
        try:
            # Waited for, not followed by terminate()'s SIGTERM: one that lands
            # after the handlers are gone would kill it and hide the exit code.
            assert daemon.proc.wait(timeout=15) == 0
        finally:
            daemon.kill()

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


def test_start_up_objects_are_left_out_of_later_collections_and_new_garbage_is_not() -> None:
    """`chd serve` freezes what start-up built (settle_heap); cycles made afterwards are still collected."""
    import gc
    import weakref

    from chd.cli.main import settle_heap

    class Node:
        pass

    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
        later = Node()
        later.self = later  # type: ignore[attr-defined]
        gone = weakref.ref(later)
        del later
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()


def test_remove_of_summarized_turns_says_the_summary_forgot_them() -> None:
    """A remove that only reaches the summary reports the dropped segments, not just 'nothing'."""
    daemon = DaemonProcess("--buffer-size", "2", "--eviction-batch", "1")
    try:
        for i in range(4):
            assert (
                chd_query(daemon, f"Add user utterance: Fact {i} about the harbour.").returncode
                == 0
            )
        assert "Fact" in chd_query(daemon, "Get summary").stdout
        done = chd_query(daemon, "Remove before turn 3")
        assert done.returncode == 0, done.stderr
        assert "removed: nothing" in done.stdout
        # One segment per batch or one for both: segments follow the budget (issue 13).
        assert (
            "summary segments dropped: 1" in done.stdout
            or "summary segments dropped: 2" in done.stdout
        )
    finally:
        daemon.kill()


@contextmanager
def refusing_port() -> Iterator[str]:
    """A loopback address where connections are refused: bound, never listening, held by us."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{held.getsockname()[1]}"


@contextmanager
def silent_peer() -> Iterator[socket.socket]:
    """A TCP server that accepts connections (the kernel does, from its backlog) and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server


def _nobody_dialed(server: socket.socket) -> bool:
    server.setblocking(False)
    try:
        server.accept()[0].close()
    except BlockingIOError:
        return True
    return False


@pytest.fixture(scope="class")
def shared_daemon() -> Iterator[DaemonProcess]:
    """One daemon for a class of tests that each use their own conversation."""
    started = DaemonProcess()
    yield started
    started.kill()


class TestPipesAndInputs:
    """chd behaves in pipelines: quiet on a closed pipe, reads stdin and files where asked."""

    @pytest.mark.parametrize(
        "command", [("instructions",), ("query", "Get all utterances", "--json")]
    )
    def test_a_reader_that_went_away_ends_chd_quietly(
        self, shared_daemon: DaemonProcess, command
    ) -> None:
        """As `chd instructions | head -1`: no BrokenPipeError traceback, exit 141 like a tool SIGPIPE ended."""
        proc = subprocess.Popen(
            [*chd_command(), *command, "--target", shared_daemon.target],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=chd_env(),
            cwd=ROOT,
            text=True,
        )
        assert proc.stdout is not None
        proc.stdout.close()  # the reader is gone before chd writes a byte
        _, stderr = proc.communicate(timeout=30)
        assert stderr == ""
        assert proc.returncode == 141

    def test_head_gets_the_first_line_of_the_instructions(
        self, shared_daemon: DaemonProcess
    ) -> None:
        """The pipeline itself, through a shell: head prints one line and chd says nothing."""
        chd = " ".join(chd_command())
        done = subprocess.run(
            f"{chd} instructions --target {shared_daemon.target} | head -1",
            shell=True,
            capture_output=True,
            text=True,
            timeout=30,
            env=chd_env(),
        )
        assert done.returncode == 0 and done.stderr == ""
        assert len(done.stdout.splitlines()) == 1 and done.stdout.strip()

    def test_a_query_of_dash_is_read_from_stdin(self, shared_daemon: DaemonProcess) -> None:
        """`echo ... | chd query -` stores the line, without its newline."""
        done = run_chd(
            "query",
            "-",
            "-c",
            "dash",
            "--target",
            shared_daemon.target,
            "--json",
            stdin="Add user utterance: piped in from a script\n",
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["result"]["utterance"]["text"] == "piped in from a script"

    def test_data_and_metadata_come_from_files_and_the_query_may_be_left_out(
        self, shared_daemon: DaemonProcess, tmp_path: Path
    ) -> None:
        """--data @FILE with an operation needs no query; --metadata @FILE sets the conversation."""
        (tmp_path / "data.json").write_text('{"operation": "store", "text": "from a file"}')
        (tmp_path / "meta.json").write_text('{"conversation_id": "files", "speaker": "assistant"}')
        done = run_chd(
            "query",
            "--data",
            f"@{tmp_path / 'data.json'}",
            "--metadata",
            f"@{tmp_path / 'meta.json'}",
            "--target",
            shared_daemon.target,
            "--json",
        )
        assert done.returncode == 0, done.stderr
        stored = json.loads(done.stdout)["result"]["utterance"]
        assert (stored["text"], stored["speaker"], stored["conversation_id"]) == (
            "from a file",
            "assistant",
            "files",
        )

    def test_data_can_come_from_stdin(self, shared_daemon: DaemonProcess) -> None:
        """--data @- reads the JSON object from stdin."""
        done = run_chd(
            "query",
            "--data",
            "@-",
            "-c",
            "stdin",
            "--target",
            shared_daemon.target,
            "--json",
            stdin='{"operation": "store", "text": "data on stdin"}',
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["result"]["utterance"]["text"] == "data on stdin"

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (("-", "--data", "@-"), "cannot all read stdin"),
            (
                ("--data", "@/no/such/file.json"),
                "--data @/no/such/file.json: cannot read /no/such/file.json",
            ),
            (("--data", '{"last_n": 5}'), 'or --data with an "operation"'),
            (("Get summary", "--metadata", "[1, 2]"), "--metadata must be a JSON object"),
        ],
    )
    def test_input_mistakes_are_one_line_and_exit_2(self, args, message) -> None:
        """Refused before dialing: one line on stderr, nothing on stdout."""
        with silent_peer() as peer:
            done = run_chd(
                "query", *args, "--target", f"127.0.0.1:{peer.getsockname()[1]}", stdin="x"
            )
            assert _nobody_dialed(peer)
        assert done.returncode == 2 and done.stdout == ""
        assert len(done.stderr.splitlines()) == 1 and message in done.stderr

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (
                ("x", "--metadata", '{"a": "\\ud800"}'),
                "--metadata: a string holds '\\ud800', which is not valid Unicode",
            ),
            (
                ("x", "--data", '{"operation": "store", "text": "\\udc00"}'),
                "--data: a string holds '\\udc00'",
            ),
            (("x", "--data", '{"\udcff": 1}'), "--data: a string holds '\\udcff'"),
            (
                ("caf\udce9",),
                "the query is not valid Unicode text: it holds '\\udce9' at character 3",
            ),
            (("x", "-c", "\udcff"), "--conversation is not valid Unicode text"),
            (
                ("x", "--data", '{"n": ' + "9" * 5_000 + "}"),
                "--data: an integer has more than 4,300 digits",
            ),
            (("x", "--metadata", '{"n": ' + "9" * 400 + "}"), "--metadata: a number is too large"),
            (("x", "--data", "@{tmp}/deep.json"), "--data: JSON nested too deeply"),
            (("x", "--data", "@{tmp}/deep-object.json"), "--data: JSON nested too deeply"),
        ],
        ids=[
            "escaped surrogate in metadata",
            "escaped surrogate in data",
            "argument bytes not UTF-8",
            "query bytes not UTF-8",
            "conversation bytes not UTF-8",
            "5,000-digit integer",
            "400-digit integer",
            "100k-deep list",
            "5k-deep object",
        ],
    )
    def test_hostile_json_and_text_are_one_line_and_exit_2(
        self, tmp_path: Path, args, message
    ) -> None:
        """Lone surrogates, huge integers and deep JSON are usage mistakes, not tracebacks (issue 28, item 7)."""
        (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
        (tmp_path / "deep-object.json").write_text('{"a": ' * 5_000 + "1" + "}" * 5_000)
        args = tuple(arg.replace("{tmp}", str(tmp_path)) for arg in args)
        with silent_peer() as peer:
            done = run_chd("query", *args, "--target", f"127.0.0.1:{peer.getsockname()[1]}")
            assert _nobody_dialed(peer)
        assert done.returncode == 2 and done.stdout == "", done.stderr[-500:]
        assert len(done.stderr.splitlines()) == 1 and message in done.stderr, done.stderr[-500:]

    def test_stdin_that_is_not_utf8_is_one_line_and_exit_2(self) -> None:
        env = {**chd_env(), "PYTHONIOENCODING": "utf-8:strict"}
        with silent_peer() as peer:
            done = subprocess.run(
                [*chd_command(), "query", "-", "--target", f"127.0.0.1:{peer.getsockname()[1]}"],
                input=b"caf\xe9",
                capture_output=True,
                env=env,
                cwd=ROOT,
                timeout=30,
            )
            assert _nobody_dialed(peer)
        assert (
            done.returncode == 2 and done.stderr == b"chd: the query on stdin is not UTF-8 text\n"
        )

    def test_json_output_has_sorted_keys_and_the_same_bytes_each_run(
        self, shared_daemon: DaemonProcess
    ) -> None:
        """Two runs of one query print the same bytes, every object's keys in order."""
        target = ("-c", "sorted", "--target", shared_daemon.target)
        assert run_chd("query", "Add utterance: zebra crossing", *target).returncode == 0
        runs = [run_chd("query", "Get all utterances", "--json", *target).stdout for _ in range(2)]
        assert runs[0] == runs[1]
        parsed = json.loads(runs[0])
        assert runs[0] == json.dumps(parsed, indent=2, ensure_ascii=False, sort_keys=True) + "\n"
        assert list(parsed["result"]["utterances"][0]) == sorted(parsed["result"]["utterances"][0])


class TestHelp:
    """Help is where a newcomer looks first: with no command, and per command with defaults."""

    def test_chd_alone_prints_help(self) -> None:
        """No command: the list of commands, exit 2 (a usage mistake) rather than a bare error."""
        done = run_chd()
        assert done.returncode == 2
        assert done.stdout.startswith("usage: chd")
        for command in ("serve", "config", "query", "purpose", "instructions", "export", "import"):
            assert re.search(rf"^\s+{command}\s", done.stdout, re.MULTILINE), command

    def test_version_comes_from_the_package_metadata(self) -> None:
        """`chd --version` prints the installed distribution's version."""
        done = run_chd("--version")
        assert done.returncode == 0
        assert done.stdout == f"chd {metadata.version('chd')}\n"

    def test_serve_help_shows_every_default(self) -> None:
        """Port, buffer size, tokens and backend among them, each with its CHD_* variable."""
        text = " ".join(run_chd("serve", "--help").stdout.split())
        for shown in (
            "(CHD_PORT; default 50051)",
            "(CHD_BUFFER_SIZE; default 20)",
            "(CHD_MAX_TOKENS; default 8000)",
            '(CHD_BACKEND; default "memory")',
            '(CHD_HOST; default "127.0.0.1")',
        ):
            assert shown in text
        assert text.count("; default ") >= text.count("(CHD_") - 1  # every key, --config aside

    def test_query_help_has_examples_exit_codes_and_the_default_timeout(self) -> None:
        """What a script writer needs, in `chd query --help`."""
        text = run_chd("query", "--help").stdout
        assert (
            "examples:" in text
            and 'chd query "Get the last 5 utterances"' in text
            and "chd query -" in text
        )
        assert "exit codes:" in text and "64+N" in text and "78 UNAVAILABLE" in text
        assert "(default 30)" in " ".join(text.split())


class TestConnectionProblems:
    """No daemon, a silent peer, bad client TLS flags: one line each, the right exit code."""

    def test_no_daemon_is_one_line_naming_the_address_and_chd_serve(self) -> None:
        """Exit 64 + UNAVAILABLE, as before; the line says where and what to do."""
        with refusing_port() as target:
            done = run_chd("query", "Get summary", "--target", target)
        assert done.returncode == 64 + 14
        assert len(done.stderr.splitlines()) == 1
        assert (
            target in done.stderr
            and "`chd serve`" in done.stderr
            and "connection refused" in done.stderr
        )

    def test_a_peer_that_never_answers_fails_within_the_timeout(self) -> None:
        """A server that accepts TCP and stays silent: DEADLINE_EXCEEDED after --timeout 1, not 20 s later."""
        with silent_peer() as peer:
            target = f"127.0.0.1:{peer.getsockname()[1]}"
            # The process timeout only stops a hang; the assertion is on how chd ended.
            done = run_chd("query", "Get summary", "--target", target, "--timeout", "1", timeout=15)
        assert done.returncode == 64 + 4
        assert len(done.stderr.splitlines()) == 1
        assert f"no answer from {target} within 1 s" in done.stderr

    @pytest.mark.parametrize(
        ("flags", "message"),
        [
            (("--tls-ca", "/no/such/ca.pem"), "chd: --tls-ca /no/such/ca.pem: no such file"),
            (
                ("--tls-ca", "tests"),
                "chd: --tls-ca tests: is a directory; give the path of a file in it",
            ),
            (("--tls-key", "key.pem"), "chd: --tls-key needs --tls-cert"),
        ],
    )
    def test_client_tls_flags_are_checked_before_dialing(self, flags, message) -> None:
        """One line, exit 2, and the daemon's address never sees a connection."""
        with silent_peer() as peer:
            done = run_chd("purpose", *flags, "--target", f"127.0.0.1:{peer.getsockname()[1]}")
            assert _nobody_dialed(peer)
        assert done.returncode == 2
        assert done.stderr.startswith(message) and len(done.stderr.splitlines()) == 1

    @pytest.mark.parametrize("value", ["0", "-1"])
    def test_the_timeout_must_be_more_than_zero(self, value) -> None:
        """A zero, negative or non-number --timeout is a usage error."""
        done = run_chd("purpose", "--timeout", value)
        assert done.returncode == 2 and "--timeout" in done.stderr


class TestConfigChecksWhatServeChecks:
    """`chd config` refuses, with exit 2 and the same line, every storage mistake `chd serve` refuses."""

    @pytest.mark.parametrize(
        ("flags", "message"),
        [
            (("--backend", "floppy"), "unknown backend 'floppy'"),
            (("--backend", "disk"), "the disk backend needs a directory"),
            (("--data-dir", "{tmp}"), "the memory backend keeps nothing on disk"),
            (
                ("--backend", "no_such_module_chd:Store"),
                "cannot load backend 'no_such_module_chd:Store'",
            ),
        ],
    )
    def test_config_and_serve_refuse_the_same_storage_mistakes(
        self, tmp_path: Path, flags, message
    ) -> None:
        flags = tuple(flag.format(tmp=tmp_path) for flag in flags)
        checked = run_chd("config", *flags)
        served = run_chd("serve", "--port", "0", *flags)
        assert checked.returncode == served.returncode == 2
        assert checked.stderr == served.stderr and message in checked.stderr
        assert "listening" not in served.stdout

    def test_config_accepts_a_disk_backend_with_its_directory(self, tmp_path: Path) -> None:
        """The same flags `chd serve` takes pass, and nothing is created by checking."""
        done = run_chd("config", "--backend", "disk", "--data-dir", str(tmp_path / "data"))
        assert done.returncode == 0, done.stderr
        assert 'backend                         = "disk"  # flag --backend' in done.stdout
        assert not (tmp_path / "data").exists()


class TestExportAndImportTellTheTruth:
    """The transfer tools say which backends they take and leave nothing behind when they fail."""

    def test_export_help_names_disk_and_custom_backends_and_not_memory(self) -> None:
        text = " ".join(run_chd("export", "--help").stdout.split())
        assert "disk (default), redis (with --redis-url, CHD_REDIS_URL) or module:Class" in text
        assert "not memory" in text and "cannot be exported from outside it" in text

    def test_import_into_the_memory_backend_is_refused_with_the_reason(
        self, tmp_path: Path
    ) -> None:
        done = run_chd("import", "--backend", "memory", stdin="")
        assert done.returncode == 1
        assert "the memory backend lives inside its daemon" in done.stderr

    def test_a_failed_import_leaves_no_new_data_directory(self, tmp_path: Path) -> None:
        """A file that is not an export: exit 1, one line, and --data-dir was never created."""
        bad = tmp_path / "backup.jsonl"
        bad.write_text("this is not JSON\n")
        target = tmp_path / "restored" / "data"
        done = run_chd("import", str(bad), "--data-dir", str(target))
        assert done.returncode == 1
        assert done.stderr == "chd: line 1: not JSON (Expecting value)\n"
        assert not (tmp_path / "restored").exists()


def _read_until(fd: int, pattern: str, limit: float = 20) -> str:
    """What the terminal shows up to a line matching ``pattern`` (raises if it never comes)."""
    seen = ""
    while not re.search(pattern, seen):
        ready, _, _ = select.select([fd], [], [], limit)
        assert ready, f"nothing matching {pattern!r} in {seen!r}"
        seen += os.read(fd, 4096).decode("utf-8", "replace")
    return seen


class TestTraceFormat:
    """The trace is one JSON line per call for log pipelines and a short line on a terminal."""

    def _serve_on_a_terminal(self, *flags: str, env: dict[str, str] | None = None) -> str:
        leader, terminal = pty.openpty()
        proc = subprocess.Popen(
            [*chd_command(), "serve", "--port", "0", *flags],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
            env=env or chd_env(),
            cwd=ROOT,
        )
        os.close(terminal)
        try:
            assert proc.stdout is not None
            port = re.search(r":(\d+)$", proc.stdout.readline().strip()).group(1)
            assert (
                run_chd(
                    "query", "Add utterance: on a terminal", "--target", f"127.0.0.1:{port}"
                ).returncode
                == 0
            )
            return _read_until(leader, r"store .*OK|\"outcome\": \"OK\"")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)
            proc.stdout.close()
            os.close(leader)

    def test_on_a_terminal_each_call_is_one_short_line(self) -> None:
        """stderr a TTY, no --log-format: `HH:MM:SS store · default · 1 item · N tokens · X ms · OK`."""
        shown = self._serve_on_a_terminal()
        line = next(text for text in shown.splitlines() if "store" in text)
        assert re.fullmatch(
            r"\d\d:\d\d:\d\d store · default · 1 item · \d+ tokens · [\d.]+ ms · OK", line.strip()
        ), line
        assert "{" not in shown

    def test_log_format_json_keeps_json_on_a_terminal(self) -> None:
        """CHD_LOG_FORMAT=json (a key like the others) wins over the terminal."""
        shown = self._serve_on_a_terminal(env=chd_env() | {"CHD_LOG_FORMAT": "json"})
        line = next(text for text in shown.splitlines() if '"operation": "store"' in text)
        assert json.loads(line)["outcome"] == "OK"

    def test_when_stderr_is_not_a_terminal_the_trace_is_json(
        self, daemon_process: DaemonProcess
    ) -> None:
        """The default for a service manager or a pipe: one JSON object per call."""
        assert (
            run_chd(
                "query", "Add utterance: to a pipe", "--target", daemon_process.target
            ).returncode
            == 0
        )
        daemon_process.terminate()
        traced = [
            json.loads(line) for line in daemon_process.log.splitlines() if '"chd.trace"' in line
        ]
        assert [entry["operation"] for entry in traced] == ["store"]


class TestArgumentsThatAreNotText:
    """Targets, tokens and names the client or the daemon could not use are one line and exit 2 (outside review of issue 28)."""

    BAD_BYTE = "\udcff"  # what Python makes of the byte 0xff in argv or the environment

    @pytest.mark.parametrize(
        "command,args,env,named",
        [
            ("query", ["--target", "\udcff:1"], {}, "--target"),
            ("query", ["--auth-token", "\udcff"], {}, "--auth-token"),
            ("query", ["--tls-server-name", "\udcff"], {}, "--tls-server-name"),
            ("query", ["--auth-token", "café"], {}, "--auth-token"),
            ("query", ["--auth-token", "a\nb"], {}, "--auth-token"),
            ("instructions", [], {"CHD_TARGET": "\udcff:1"}, "CHD_TARGET"),
            ("purpose", [], {"CHD_AUTH_TOKEN": "\udcff"}, "CHD_AUTH_TOKEN"),
        ],
        ids=[
            "target",
            "token-byte",
            "server-name",
            "token-accent",
            "token-newline",
            "env-target",
            "env-token",
        ],
    )
    def test_the_client_refuses_them_in_one_line(
        self, command: str, args: list[str], env: dict[str, str], named: str
    ) -> None:
        """No traceback, no 'INTERNAL: Invalid metadata' from the client's own grpc: one line naming the flag, exit 2."""
        extra = ["Get the last 5 utterances"] if command == "query" else []
        done = run_chd(command, *extra, "--timeout", "2", *args, env={**chd_env(), **env})
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and named in lines[0], done.stderr
        assert "café" not in lines[0]  # a token is never quoted

    @pytest.mark.parametrize(
        "args,key",
        [
            (["--auth-token", "\udcff"], "auth_token"),
            (["--auth-token", "café"], "auth_token"),
            (["--metrics-host", "\udcff"], "metrics_host"),
            (["--host", "\udcff"], "host"),
        ],
        ids=["token-byte", "token-accent", "metrics-host", "host"],
    )
    def test_serve_refuses_them_in_one_line(self, args: list[str], key: str) -> None:
        """`chd serve` does not start with a token no client can send, nor with a host that is not text."""
        done = run_chd("serve", "--port", "0", *args, timeout=20)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and f"'{key}'" in lines[0], done.stderr
        assert "café" not in lines[0]
