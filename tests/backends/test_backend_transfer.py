"""chd export / chd import: moving conversations between backends as JSON Lines."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format

from chd.backends import Change, open_backend
from chd.backends.disk import DiskBackend
from chd.backends.memory import MemoryBackend
from chd.core.errors import InvalidRequest
from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from chd.core.transfer import export_lines, import_states, parse_lines
from chd.service.server import build_server
from chd.v1 import daemon_pb2_grpc
from tests.conftest import DaemonProcess, query, run_chd

SETTINGS = Settings(buffer_size=6, eviction_batch=2)

QUERIES = [
    ("Get the last 4 utterances", {}),
    ("Get all utterances", {"include_summary": True}),
    ("Get the summary", {}),
    ("Find utterances about the harbour", {}),
    ("Summarize the conversation", {}),
    ("Get utterances in turns 6 to 7", {}),
]


def conversation(history: ConversationHistory, conversation_id: str) -> None:
    """A conversation with a buffer, a folded summary and one queued utterance."""
    meta = {"conversation_id": conversation_id}
    for turn in range(8):
        history.query(f"Add utterance: Where is the harbour number {turn}?", meta)
        history.query(
            f"Add utterance: The harbour {turn} is by the old lighthouse.",
            meta | {"speaker": "assistant"},
        )
    history.query("Remove utterance 15", meta)


def answers(target: str, conversation_id: str) -> list[dict]:
    with grpc.insecure_channel(target) as channel:
        stub = daemon_pb2_grpc.DaemonStub(channel)
        return [
            json_format.MessageToDict(query(stub, text, {"conversation_id": conversation_id}, data))
            for text, data in QUERIES
        ]


def export_file(backend, path: Path, *ids: str) -> Path:
    path.write_text("".join(line + "\n" for line in export_lines(backend, ids)), encoding="utf-8")
    return path


class TestRoundTrip:
    """What is exported comes back identical."""

    def test_export_then_import_keeps_every_field(self, tmp_path: Path) -> None:
        source = MemoryBackend()
        history = ConversationHistory(source, SETTINGS, background=False)
        conversation(history, "c1")
        # Also queue one utterance for the summary, and set a per-conversation setting.
        source.transact(
            "c1",
            lambda s: (
                Change(
                    pending_add=[s.utterances[0]],
                    remove={s.utterances[0].seq},
                    settings={"note": "x"},
                ),
                None,
            ),
        )
        target = DiskBackend(tmp_path / "data")
        imported = import_states(target, parse_lines(export_lines(source, ["c1"])))
        assert [s.conversation_id for s in imported] == ["c1"]
        assert target.read("c1") == source.read("c1")
        assert source.read("c1").pending and source.read("c1").summary.segments
        target.close()

    def test_export_from_memory_imported_into_disk_answers_queries_identically(
        self, tmp_path: Path
    ) -> None:
        """Same answers from an in-memory daemon and a disk daemon fed by `chd import`.

        Both servers run in this process: ExtractiveSummarizer sums float
        scores over a set (daemon/core/summaries/extractive.py, ``_score``), so a tie between
        two sentences can break differently in processes with different
        PYTHONHASHSEED, and `summarize` answers with it.
        """
        memory_history = ConversationHistory(MemoryBackend(), SETTINGS, background=False)
        memory_server = build_server(memory_history, "127.0.0.1", 0)
        disk_server = None
        try:
            for cid in ("talk", "other"):
                conversation(memory_history, cid)
            dump = export_file(memory_history.backend, tmp_path / "talk.jsonl", "talk", "other")
            done = run_chd("import", str(dump), "--data-dir", str(tmp_path / "data"))
            assert done.returncode == 0, done.stderr
            assert (
                "imported talk: 5 in the buffer, 0 queued for the summary, 0 archived, summary through #10"
                in done.stderr
            )
            disk_history = ConversationHistory(
                DiskBackend(tmp_path / "data", durability="normal"), SETTINGS, background=False
            )
            disk_server = build_server(disk_history, "127.0.0.1", 0)
            for cid in ("talk", "other"):
                from_disk = answers(f"127.0.0.1:{disk_server.port}", cid)
                assert from_disk == answers(f"127.0.0.1:{memory_server.port}", cid)
                assert from_disk[0]["result"]["utterances"]
        finally:
            memory_server.stop(grace=1)
            if disk_server is not None:
                disk_server.stop(grace=1)

    def test_cli_export_writes_what_cli_import_reads(self, tmp_path: Path) -> None:
        backend = DiskBackend(tmp_path / "a")
        conversation(ConversationHistory(backend, SETTINGS, background=False), "c")
        expected = backend.read("c")
        backend.close()
        done = run_chd("export", "--conversation", "c", "--data-dir", str(tmp_path / "a"))
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        assert lines[0]["record"] == "conversation" and lines[0]["format"] == 1
        assert [line["seq"] for line in lines[1:]] == [u.seq for u in expected.utterances]
        (tmp_path / "c.jsonl").write_text(done.stdout, encoding="utf-8")
        assert (
            run_chd(
                "import", str(tmp_path / "c.jsonl"), "--data-dir", str(tmp_path / "b")
            ).returncode
            == 0
        )
        copy = DiskBackend(tmp_path / "b")
        assert copy.read("c") == expected
        copy.close()

    def test_import_into_a_served_data_dir_is_seen_by_the_daemon(self, tmp_path: Path) -> None:
        """The daemon's cached state is checked against SQLite, so another process's write shows."""
        source = MemoryBackend()
        conversation(ConversationHistory(source, SETTINGS, background=False), "late")
        dump = export_file(source, tmp_path / "late.jsonl", "late")
        daemon = DaemonProcess("--backend", "disk", "--data-dir", str(tmp_path / "data"))
        try:
            assert answers(daemon.target, "late")[0]["result"]["utterances"] == []
            assert (
                run_chd("import", str(dump), "--data-dir", str(tmp_path / "data")).returncode == 0
            )
            got = answers(daemon.target, "late")[0]["result"]["utterances"]
            assert [u["seq"] for u in got] == [u.seq for u in source.read("late").utterances][-4:]
        finally:
            daemon.terminate()


class TestRefusals:
    """Bad or conflicting input is refused before anything is written."""

    def test_import_refuses_a_conversation_that_holds_data_unless_replace(
        self, tmp_path: Path
    ) -> None:
        source = MemoryBackend()
        conversation(ConversationHistory(source, SETTINGS, background=False), "c")
        target = MemoryBackend()
        target.transact("c", lambda s: (Change(next_seq=9), None))
        states = parse_lines(export_lines(source, ["c"]))
        with pytest.raises(InvalidRequest, match="already holds data; use --replace"):
            import_states(target, states)
        assert target.read("c").next_seq == 9
        import_states(target, states, replace=True)
        assert target.read("c") == source.read("c")

    def test_bad_line_is_named_and_nothing_is_written(self, tmp_path: Path) -> None:
        source = MemoryBackend()
        conversation(ConversationHistory(source, SETTINGS, background=False), "c")
        lines = list(export_lines(source, ["c"]))
        broken = json.loads(lines[3])
        broken["speaker"] = "narrator"
        lines[3] = json.dumps(broken)
        path = tmp_path / "bad.jsonl"
        path.write_text("\n".join(lines), encoding="utf-8")
        done = run_chd("import", str(path), "--data-dir", str(tmp_path / "data"))
        assert done.returncode == 1
        assert done.stderr.strip() == (
            "chd: line 4: speaker must be one of user, assistant, system, got the string 'narrator'"
        )
        backend = open_backend("disk", data_dir=tmp_path / "data")
        assert backend.conversations() == []
        backend.close()

    @pytest.mark.parametrize(
        ("lines", "message"),
        [
            (['{"record": "utterance"}'], "line 1: an utterance before any conversation line"),
            (
                ['{"record": "conversation", "format": 2}'],
                "line 1: written by a newer chd (export format 2",
            ),
            (["not json"], "line 1: not JSON"),
            (
                [
                    '{"record": "conversation", "format": 1, "conversation_id": "c", "next_seq": 1, "last_turn": 0}',
                    '{"record": "utterance", "in": "buffer", "conversation_id": "c", "seq": 1, "speaker": "user",'
                    ' "text": "x", "turn_number": 1, "timestamp": "t", "tokens": 1}',
                ],
                "next_seq 1 must be above the highest seq 1",
            ),
        ],
    )
    def test_malformed_exports_are_refused_with_the_reason(
        self, lines: list[str], message: str
    ) -> None:
        with pytest.raises(InvalidRequest, match=message.replace("(", r"\(")):
            parse_lines(lines)

    @pytest.mark.parametrize(
        ("settings", "message"),
        [
            (
                {"buffer_size": 0},
                "settings: buffer_size must be a whole number of at least 1, got 0",
            ),
            (
                {"max_tokens": "lots"},
                "settings: max_tokens must be a whole number of at least 1, got 'lots'",
            ),
            (
                {"eviction_policy": "lifo"},
                "settings: eviction_policy must be fifo or importance, got 'lifo'",
            ),
        ],
    )
    def test_invalid_conversation_settings_are_refused_before_they_poison_the_daemon(
        self, tmp_path: Path, settings: dict, message: str
    ) -> None:
        # Imported as they were, every store, stats and summary of the
        # conversation answered INTERNAL from then on.
        header = {
            "record": "conversation",
            "format": 1,
            "conversation_id": "c",
            "next_seq": 1,
            "last_turn": 0,
            "settings": settings,
        }
        with pytest.raises(InvalidRequest, match=message):
            parse_lines([json.dumps(header)])

    def test_export_of_an_unknown_conversation_fails(self, tmp_path: Path) -> None:
        done = run_chd("export", "--conversation", "nobody", "--data-dir", str(tmp_path))
        assert done.returncode == 1
        assert "conversation 'nobody' holds nothing to export" in done.stderr

    def test_export_from_a_data_dir_that_does_not_exist_fails_and_creates_nothing(
        self, tmp_path: Path
    ) -> None:
        # A mistyped --data-dir must not become an empty backup that exits 0.
        missing = tmp_path / "no-such-dir"
        done = run_chd(
            "export", "--data-dir", str(missing), "--output", str(tmp_path / "out.jsonl")
        )
        assert done.returncode == 1
        assert done.stderr.strip() == f"chd: there is no data dir at {missing}; nothing to export"
        assert not missing.exists() and not (tmp_path / "out.jsonl").exists()

    def test_export_from_the_memory_backend_is_explained(self) -> None:
        done = run_chd("export", "--backend", "memory")
        assert done.returncode == 1
        assert "the memory backend lives inside its daemon" in done.stderr


class TestExportFile:
    """chd export --output writes a whole file or none."""

    def test_output_file_holds_every_conversation(self, tmp_path: Path) -> None:
        backend = DiskBackend(tmp_path / "data")
        for cid in ("a", "b"):
            conversation(ConversationHistory(backend, SETTINGS, background=False), cid)
        backend.close()
        done = run_chd(
            "export", "--data-dir", str(tmp_path / "data"), "--output", str(tmp_path / "all.jsonl")
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip() == "exported 2 conversation(s)"
        headers = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
        assert [h["conversation_id"] for h in headers if h["record"] == "conversation"] == [
            "a",
            "b",
        ]
        assert not (tmp_path / "all.jsonl.partial").exists()

    def test_unwritable_output_is_one_line_and_no_file(self, tmp_path: Path) -> None:
        backend = DiskBackend(tmp_path / "data")
        conversation(ConversationHistory(backend, SETTINGS, background=False), "a")
        backend.close()
        target = tmp_path / "missing-dir" / "out.jsonl"
        done = run_chd("export", "--data-dir", str(tmp_path / "data"), "--output", str(target))
        assert done.returncode == 1
        assert (
            done.stderr.strip() == f"chd: cannot open {target}.partial: No such file or directory"
        )
        assert not target.exists()
