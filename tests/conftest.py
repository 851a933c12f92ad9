"""Shared fixtures: a core, a real gRPC server in-process, and a real daemon process.

The suite is hermetic: the developer's ``ANTHROPIC_*`` and ``CHD_*``
variables are taken out of the environment for the whole session, so no
daemon a test starts (in-process, or a ``chd`` process inheriting
``os.environ``) sends test text to a real API or picks up a developer's
backend. A test that needs one sets it itself (``monkeypatch.setenv``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import grpc
import pytest

from chd.backends import Backend, open_backend
from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from chd.service.server import Server, build_server
from chd.v1 import daemon_pb2, daemon_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Two workers per core for ``-n auto``: most of a test's wall time is a daemon starting or a
    server answering, so a core runs one worker's Python while another's waits (idle 2-core: 4 min
    07 s with two workers, 3 min 21 s with four). At most 16: each worker holds its own servers."""
    return min(16, 2 * len(os.sched_getaffinity(0)))


# Variables of the developer's shell that change what a daemon does.
DEVELOPER_PREFIXES = ("ANTHROPIC_", "CHD_", "OTEL_")


@pytest.fixture(autouse=True, scope="session")
def _hermetic_environment() -> Iterator[None]:
    """Session-wide, so module-scoped servers are built in the scrubbed environment too."""
    saved = {name: os.environ[name] for name in os.environ if name.startswith(DEVELOPER_PREFIXES)}
    for name in saved:
        del os.environ[name]
    yield
    os.environ.update(saved)


# Every backend the daemon ships. The ``backend`` fixture runs each test that
# uses it (and so ``history``, ``server`` and ``stub``) once per kind.
BACKEND_KINDS = ("memory", "disk", "redis")


def open_test_backend(kind: str, directory: Path) -> Backend:
    """A fresh backend of ``kind``; a disk one keeps its data under ``directory``,
    a redis one in a database of its own on a redis-server shared by the run."""
    if kind == "disk":
        return open_backend("disk", data_dir=directory / "chd-data")
    if kind == "redis":
        from tests.redis_support import shared_redis_url

        return open_backend("redis", redis_url=shared_redis_url(directory))
    return open_backend(kind)


@pytest.fixture(scope="session", autouse=True)
def _stop_shared_redis() -> Iterator[None]:
    """The redis-server tests of the redis backend share is stopped when the run ends."""
    yield
    from tests.redis_support import stop_shared_redis

    stop_shared_redis()


@pytest.fixture(params=BACKEND_KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    opened = open_test_backend(request.param, tmp_path)
    yield opened
    opened.close()


@pytest.fixture
def history(backend: Backend) -> ConversationHistory:
    return ConversationHistory(backend=backend, settings=Settings())


@pytest.fixture
def server(history: ConversationHistory) -> Iterator[Server]:
    """The real gRPC server (health, reflection) on a free loopback port."""
    running = build_server(history, "127.0.0.1", 0)
    yield running
    running.stop(grace=1)


@pytest.fixture
def stub(server: Server) -> Iterator[daemon_pb2_grpc.DaemonStub]:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield daemon_pb2_grpc.DaemonStub(channel)


def query(
    stub: daemon_pb2_grpc.DaemonStub,
    text: str,
    metadata: dict | None = None,
    data: dict | None = None,
) -> daemon_pb2.QueryResponse:
    request = daemon_pb2.QueryRequest(query=text)
    request.metadata.update(metadata or {})
    request.data.update(data or {})
    return stub.Query(request, timeout=10)


def chd_env() -> dict[str, str]:
    """The environment of a ``chd`` process: the test's own, ``tests.*`` importable.

    The session scrubbed the developer's variables, so every ``CHD_*`` or
    ``ANTHROPIC_*`` left in it is one the test set.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def chd_command() -> list[str]:
    """The ``chd`` executable pip installed beside this interpreter (``python -m chd`` if none)."""
    script = shutil.which("chd", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "chd"]


def run_chd(
    *args: str, timeout: float = 60, stdin: str | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the ``chd`` command as a separate process, ``stdin`` as its input."""
    return subprocess.run(
        [*chd_command(), *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env) if env is not None else chd_env(),
        cwd=ROOT,
    )


class DaemonProcess:
    """A ``chd serve`` subprocess on a free port, stopped by the fixture."""

    def __init__(self, *args: str, prefix: Sequence[str] = ()) -> None:
        """``prefix`` runs the daemon through a wrapper, e.g. ``unshare``."""
        self.proc = subprocess.Popen(
            [*prefix, *chd_command(), "serve", "--port", "0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=chd_env(),
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"listening on (\S+):(\d+)", line)
        if not match:
            self.proc.kill()
            raise RuntimeError(
                f"daemon did not start: {line!r} {self.proc.stderr.read() if self.proc.stderr else ''}"
            )
        self.port = int(match.group(2))
        self.target = f"127.0.0.1:{self.port}"
        # The daemon logs a trace line per call: read stderr as it comes, or
        # a full pipe (64 KiB) would block the daemon mid-call.
        self.stderr_lines: list[str] = []
        self._drain = threading.Thread(
            target=self.stderr_lines.extend, args=(self.proc.stderr,), daemon=True
        )
        self._drain.start()

    def terminate(self, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._close()

    @property
    def log(self) -> str:
        """What the daemon wrote to stderr so far (all of it once it has stopped)."""
        return "".join(self.stderr_lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._close()

    def _close(self) -> None:
        if self.proc.poll() is None:
            return  # still running (a terminate timed out): kill() closes
        self._drain.join(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


@pytest.fixture
def daemon_process() -> Iterator[DaemonProcess]:
    started = DaemonProcess()
    yield started
    started.kill()
