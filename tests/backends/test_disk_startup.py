"""`chd serve` storage flags: choosing a backend, and refusing a bad data dir in one line."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import diskcache
import grpc
import pytest

from chd.backends.disk import MARKER, DiskBackend
from chd.backends.records import SCHEMA_KEY
from chd.cli.main import _parser
from chd.cli.storage import open_storage
from chd.core.errors import StorageError
from chd.service import config
from chd.v1 import daemon_pb2_grpc
from tests.backends.backend_kinds import CUSTOM_BACKEND
from tests.conftest import ROOT, DaemonProcess, chd_env, query, run_chd


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        probe = subprocess.run(
            ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


needs_namespaces = pytest.mark.skipif(
    not _namespaces_work(),
    reason="needs `unshare -rm` (user and mount namespaces) to mount a read-only or tiny filesystem",
)


def tmpfs(mountpoint: Path, size: str, fill: bool = False) -> list[str]:
    """A prefix that runs a command with a fresh tmpfs of ``size`` at ``mountpoint``."""
    filler = ' && (head -c 100000000 /dev/zero > "$0/filler" 2>/dev/null; true)' if fill else ""
    script = f'mount -t tmpfs -o size={size} tmpfs "$0"{filler} && exec "$@"'
    return ["unshare", "-rm", "sh", "-c", script, str(mountpoint)]


def read_only(directory: Path) -> list[str]:
    """A prefix that runs a command with ``directory`` mounted read-only."""
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return ["unshare", "-rm", "sh", "-c", script, str(directory)]


def serve_fails(*args: str, prefix: Sequence[str] = (), code: int = 1) -> str:
    """Run `chd serve` expecting it to refuse with ``code`` (2: a configuration mistake); its one line of stderr."""
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "chd", "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=chd_env(),
        cwd=ROOT,
    )
    assert done.returncode == code, (done.stdout, done.stderr)
    assert "listening" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def populated(directory: Path) -> Path:
    """A data dir holding one stored utterance."""
    daemon = DaemonProcess("--backend", "disk", "--data-dir", str(directory))
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            query(daemon_pb2_grpc.DaemonStub(channel), "Add utterance: keep me")
    finally:
        assert daemon.terminate() == 0
    return directory


class TestChoosingABackend:
    """--backend, --data-dir, --durability and their CHD_* variables."""

    def test_disk_backend_keeps_utterances_across_restarts(self, tmp_path: Path) -> None:
        populated(tmp_path / "data")
        daemon = DaemonProcess("--backend", "durable", "--data-dir", str(tmp_path / "data"))
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                got = query(daemon_pb2_grpc.DaemonStub(channel), "Get the last 5 utterances")
            assert [u["text"] for u in got.result["utterances"]] == ["keep me"]
        finally:
            daemon.terminate()

    def test_environment_variables_choose_backend_dir_and_durability(
        self, tmp_path: Path, monkeypatch
    ) -> None:
        monkeypatch.setenv("CHD_BACKEND", "disk")
        monkeypatch.setenv("CHD_DATA_DIR", str(tmp_path / "env-data"))
        monkeypatch.setenv("CHD_DURABILITY", "full")
        daemon = DaemonProcess()
        daemon.terminate()
        with sqlite3.connect(tmp_path / "env-data" / "cache.db") as db:
            (synchronous,) = db.execute(
                "SELECT value FROM Settings WHERE key = 'sqlite_synchronous'"
            ).fetchone()
        assert synchronous == 2

    def test_custom_backend_class_serves_queries(self) -> None:
        daemon = DaemonProcess("--backend", CUSTOM_BACKEND)
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                query(stub, "Add utterance: via a custom backend")
                got = query(stub, "Get the last 1 utterances")
            assert got.result["utterances"][0]["text"] == "via a custom backend"
        finally:
            daemon.terminate()

    def test_custom_backend_receives_only_the_options_given(self, monkeypatch) -> None:
        """A class that takes no options works without flags; flags given reach it."""
        for name in ("CHD_DATA_DIR", "CHD_DURABILITY"):
            monkeypatch.delenv(name, raising=False)

        def served(*flags: str):
            effective = config.from_arguments(_parser().parse_args(["serve", *flags]), {})
            return open_storage(
                effective.backend, effective.data_dir, effective.durability, serving=True
            )

        assert served("--backend", CUSTOM_BACKEND).options == {}
        assert served(
            "--backend", CUSTOM_BACKEND, "--data-dir", "/srv/chd", "--durability", "full"
        ).options == {"data_dir": "/srv/chd", "durability": "full"}

    def test_unknown_backend_is_refused(self) -> None:
        assert "unknown backend 'floppy'" in serve_fails("--backend", "floppy", code=2)

    def test_disk_without_a_data_dir_is_refused(self) -> None:
        assert "--data-dir" in serve_fails("--backend", "disk", code=2)

    def test_memory_with_a_data_dir_is_refused(self, tmp_path: Path) -> None:
        """Otherwise a user could believe their conversations are on disk."""
        assert "keeps nothing on disk" in serve_fails("--data-dir", str(tmp_path), code=2)

    @pytest.mark.parametrize(
        "flags", [("--redis-url", "redis://127.0.0.1:1/0"), ("--redis-cluster",)]
    )
    def test_disk_with_a_redis_key_is_refused(self, tmp_path: Path, flags) -> None:
        """As memory with --data-dir: a Redis URL the disk backend would ignore is a mistake (issue 28, item 8)."""
        line = serve_fails("--backend", "disk", "--data-dir", str(tmp_path), *flags, code=2)
        key = flags[0][2:].replace("-", "_")
        assert (
            line
            == f"chd: configuration key '{key}' (flag {flags[0]}): only the redis backend uses it, and the backend is disk"
        )

    def test_memory_with_a_redis_url_from_the_environment_is_refused(self, monkeypatch) -> None:
        monkeypatch.setenv("CHD_REDIS_URL", "redis://127.0.0.1:1/0")
        assert (
            "(env CHD_REDIS_URL): only the redis backend uses it, and the backend is memory"
            in serve_fails(code=2)
        )

    def test_bad_durability_is_a_usage_error(self) -> None:
        done = run_chd("serve", "--durability", "maybe")
        assert done.returncode == 2
        assert "durability" in done.stderr and "'maybe'" in done.stderr


class TestBadDataDir:
    """One line naming the path and the cause, exit 1, and the data left as it was."""

    def test_corrupted_database_is_refused_and_left_alone(self, tmp_path: Path) -> None:
        database = tmp_path / "cache.db"
        database.write_bytes(b"\x00garbage\xff" * 1000)
        line = serve_fails("--backend", "disk", "--data-dir", str(tmp_path))
        assert line == (
            f"chd: cannot open data dir {tmp_path}: cache.db is not a SQLite database "
            "(corrupted or not chd's); restore it from a backup or move it away"
        )
        assert database.read_bytes() == b"\x00garbage\xff" * 1000

    def test_data_dir_from_a_newer_chd_is_refused(self, tmp_path: Path) -> None:
        populated(tmp_path)
        with diskcache.Cache(str(tmp_path)) as cache:
            cache.set(SCHEMA_KEY, '{"schema": 7}')
        line = serve_fails("--backend", "disk", "--data-dir", str(tmp_path))
        assert line.startswith(f"chd: cannot use data dir {tmp_path}: ")
        assert "newer chd (storage schema 7)" in line

    def test_path_under_a_file_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "file").write_text("x")
        line = serve_fails("--backend", "disk", "--data-dir", str(tmp_path / "file" / "data"))
        assert (
            line
            == f"chd: cannot open data dir {tmp_path / 'file' / 'data'}: cannot create it: not a directory"
        )

    def test_a_cache_db_that_is_a_directory_is_refused_naming_it(self, tmp_path: Path) -> None:
        """SQLite only said "unable to open database file" (issue 28 review)."""
        (tmp_path / "cache.db").mkdir()
        line = serve_fails("--backend", "disk", "--data-dir", str(tmp_path))
        assert line == (
            f"chd: cannot open data dir {tmp_path}: cache.db in it is a directory, not chd's "
            "database file; move it away (or restore the file from a backup)"
        )

    @needs_namespaces
    def test_read_only_data_dir_is_refused(self, tmp_path: Path) -> None:
        data = populated(tmp_path / "data")
        line = serve_fails("--backend", "disk", "--data-dir", str(data), prefix=read_only(data))
        assert line.startswith(f"chd: cannot open data dir {data}: not writable")

    @needs_namespaces
    def test_full_disk_at_start_is_refused(self, tmp_path: Path) -> None:
        line = serve_fails(
            "--backend",
            "disk",
            "--data-dir",
            str(tmp_path / "data"),
            prefix=tmpfs(tmp_path, "256k", fill=True),
        )
        assert line == f"chd: cannot open data dir {tmp_path / 'data'}: the disk is full"


class TestLockedDataDir:
    """A store waiting on another process's lock answers DEADLINE_EXCEEDED at request_timeout (issue 28, item 4).

    It waited diskcache's 15 s, past a 2 s request_timeout, and then answered UNAVAILABLE.
    """

    def test_a_store_behind_another_writer_answers_deadline_exceeded_and_reads_still_work(
        self, tmp_path: Path
    ) -> None:
        daemon = DaemonProcess(
            "--backend", "disk", "--data-dir", str(tmp_path), "--request-timeout", "2"
        )
        other = sqlite3.connect(tmp_path / "cache.db", isolation_level=None)
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                query(stub, "Add utterance: first")
                other.execute("BEGIN IMMEDIATE")
                with pytest.raises(grpc.RpcError) as late:
                    query(stub, "Add utterance: while locked")
                assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                assert "stayed locked by another process" in late.value.details()
                assert _read_despite_load(stub) == ["first"]
                other.execute("ROLLBACK")
                query(stub, "Add utterance: after")
        finally:
            other.close()
            daemon.terminate()


def _read_despite_load(stub: daemon_pb2_grpc.DaemonStub, tries: int = 5) -> list[str]:
    """The newest texts, read while the lock is held. The 2 s request_timeout the test needs
    applies to the read too, and a machine under heavy load (a load average of 19 in a shuffled
    run) can take that long for any call; a read that waited on the lock would time out every time.
    """
    for attempt in range(tries):
        try:
            answer = query(stub, "Get the last 5 utterances")
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error.details()
            if attempt == tries - 1:
                raise
            continue
        return [u["text"] for u in answer.result["utterances"]]
    raise AssertionError("unreachable")


class TestEmptiedDatabase:
    """A data dir that held data never starts fresh over a missing or 0-byte cache.db (issue 28, item 3)."""

    @pytest.mark.parametrize("loss", ["truncated", "deleted"])
    def test_a_lost_database_is_refused_naming_the_file(self, tmp_path: Path, loss: str) -> None:
        data = populated(tmp_path / "data")
        database = data / "cache.db"
        if loss == "truncated":
            database.write_bytes(b"")
        else:
            database.unlink()
        line = serve_fails("--backend", "disk", "--data-dir", str(data))
        state = "empty (0 bytes)" if loss == "truncated" else "missing"
        assert line.startswith(
            f"chd: {database} is {state}, but {data} has held chd's data ({MARKER} is there)"
        )
        assert "--allow-empty-database" in line
        assert (database.stat().st_size == 0) if loss == "truncated" else not database.exists()

    @pytest.mark.parametrize("command", ["export", "import"])
    def test_export_and_import_do_not_send_the_user_to_a_flag_they_lack(
        self, tmp_path: Path, command: str
    ) -> None:
        """The tools name the lost file and say the flag is chd serve's, not theirs (outside review of issue 28)."""
        data = populated(tmp_path / "data")
        (data / "cache.db").write_bytes(b"")
        args = ["--data-dir", str(data)] + (
            [str(tmp_path / "none.jsonl")] if command == "import" else []
        )
        if command == "import":
            (tmp_path / "none.jsonl").write_text("")
        done = run_chd(command, *args)
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and len(lines) == 1, done.stderr
        assert lines[0].startswith(f"chd: {data / 'cache.db'} is empty (0 bytes)")
        assert "chd export and chd import do not take --allow-empty-database" in lines[0]
        assert "start chd serve once with it" in lines[0]
        assert (data / "cache.db").stat().st_size == 0

    def test_a_write_ahead_log_without_its_database_is_refused(self, tmp_path: Path) -> None:
        """A dir from before the marker, or whose marker went too: the WAL shows it held data."""
        (tmp_path / "cache.db-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\x00" * 28)
        with pytest.raises(StorageError, match="cache.db is missing.*cache.db-wal is there"):
            DiskBackend(tmp_path)

    def test_the_flag_starts_with_no_conversations_once(self, tmp_path: Path) -> None:
        """--allow-empty-database starts empty; the next start needs no flag, the new database holding the store."""
        data = populated(tmp_path / "data")
        (data / "cache.db").write_bytes(b"")
        for flags in (("--allow-empty-database",), ()):
            daemon = DaemonProcess("--backend", "disk", "--data-dir", str(data), *flags)
            try:
                with grpc.insecure_channel(daemon.target) as channel:
                    got = query(daemon_pb2_grpc.DaemonStub(channel), "Get the last 5 utterances")
                assert got.result["utterances"] == []
            finally:
                assert daemon.terminate() == 0
            assert ("starting with no conversations" in daemon.log) == bool(flags)

    def test_a_new_directory_is_marked_and_an_unmarked_one_with_data_gets_the_marker(
        self, tmp_path: Path
    ) -> None:
        DiskBackend(tmp_path / "new").close()
        assert (tmp_path / "new" / MARKER).exists()
        (tmp_path / "new" / MARKER).unlink()  # a dir written before the marker existed
        DiskBackend(tmp_path / "new").close()
        assert (tmp_path / "new" / MARKER).exists()

    def test_the_flag_is_refused_with_a_backend_that_has_no_database(self) -> None:
        assert "only the disk backend" in serve_fails("--allow-empty-database", code=2)


@needs_namespaces
class TestDiskFillsUpWhileServing:
    """A real full filesystem under a running daemon."""

    def test_store_gets_resource_exhausted_and_reads_still_work(self, tmp_path: Path) -> None:
        data = tmp_path / "data"
        daemon = DaemonProcess(
            "--backend",
            "disk",
            "--data-dir",
            str(data),
            "--buffer-size",
            "5000",
            "--max-tokens",
            "10000000",
            prefix=tmpfs(tmp_path, "1m"),
        )
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                stored = 0
                with pytest.raises(grpc.RpcError) as full:
                    for i in range(2000):
                        query(stub, f"Add utterance: {i} " + "words to fill the disk " * 40)
                        stored += 1
                assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "is full" in full.value.details()
                got = query(stub, "Get the last 5000 utterances")
                assert len(got.result["utterances"]) == stored > 0
                summary = query(stub, "Get the summary")
                assert summary.operation == "retrieve"
        finally:
            daemon.kill()

    def test_repeated_refusals_on_a_full_disk_log_one_error_line(self, tmp_path: Path) -> None:
        """200 refused stores write one ERROR line, not 200 (issue 28, item 5: 1,329 lines for 1,329 refusals)."""
        data = tmp_path / "data"
        daemon = DaemonProcess(
            "--backend",
            "disk",
            "--data-dir",
            str(data),
            "--buffer-size",
            "5000",
            "--max-tokens",
            "10000000",
            prefix=tmpfs(tmp_path, "1m"),
        )
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                refused = 0
                for i in range(3000):
                    try:
                        query(stub, f"Add utterance: {i} " + "words to fill the disk " * 40)
                    except grpc.RpcError as error:
                        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                        refused += 1
                        if refused == 200:
                            break
            assert refused == 200
            daemon.terminate()
            full_lines = [line for line in daemon.log.splitlines() if "is full" in line]
            # One per kind and 10 s window: a slow machine may cross into a second window.
            assert 1 <= len(full_lines) <= 3, full_lines
        finally:
            daemon.kill()
