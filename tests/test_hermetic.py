"""The suite is hermetic: a developer's ANTHROPIC_* and CHD_* variables reach no daemon a test starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import grpc
from ops_support import running

from chd.v1 import daemon_pb2_grpc
from tests.conftest import ROOT, DaemonProcess, query

# What a developer's shell might export: a key that would send test text to
# the real API, an API that is down, and a backend that needs a data dir.
POLLUTED = {
    "ANTHROPIC_API_KEY": "sk-ant-developer-key",
    "CHD_BACKEND": "disk",
    "CHD_BUFFER_SIZE": "1",
    "CHD_SUMMARIZER": "claude",
}


class TestUnderTheDevelopersEnvironment:
    """Run by the test below inside a polluted environment; each passes only if nothing leaked."""

    def test_a_spawned_daemon_uses_its_defaults(self):
        """`chd serve` from a test starts on memory, with offline summaries and the buffer it is given."""
        daemon = DaemonProcess("--buffer-size", "3", "--eviction-batch", "1")
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                for n in range(4):
                    query(stub, f"Add utterance: fact {n}")
                summary = query(stub, "Get summary")
            assert summary.metadata["summarizer"] == "extractive"
            assert "summarizer_error" not in summary.metadata
            assert summary.metadata["summary_through_seq"] == 1
        finally:
            daemon.kill()
        assert "storage: memory backend" in daemon.log

    def test_an_in_process_server_uses_the_offline_summarizer(self):
        """`chd.service.app.start` in the test process sees no ANTHROPIC_API_KEY."""
        with running() as server:
            assert server.history.writer.name == "extractive"


def test_developer_variables_do_not_reach_the_daemons_tests_start(tmp_path):
    """With ANTHROPIC_* (API down) and CHD_BACKEND=disk exported, the tests above still pass."""
    with socket.socket() as closed:
        # Bound, never listening: connections to it are refused for as long as we hold it.
        closed.bind(("127.0.0.1", 0))
        env = (
            os.environ
            | POLLUTED
            | {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{closed.getsockname()[1]}"}
        )
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                # One process: two tests need no workers of their own (xdist's start costs seconds).
                "-n",
                "0",
                f"{__file__}::TestUnderTheDevelopersEnvironment",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=ROOT,
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout
