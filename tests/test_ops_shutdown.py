"""`chd serve` as a process: bounded shutdown, one daemon per port, Kubernetes service links (items 10-12)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from conftest import DaemonProcess, run_chd
from fake_anthropic import FakeAnthropic
from ops_support import request

from chd.backends import open_backend
from chd.v1 import daemon_pb2_grpc

# The fake model answers after this long: far longer than any bound below,
# so a daemon that waited for it could not pass.
SLOW_MODEL = 120.0
DRAIN, GRACE = 0.5, 1.0
# chd promises drain + grace + 2 s; the margin is for a loaded CI machine.
EXIT_BOUND = DRAIN + GRACE + 2 + 10


@pytest.fixture
def slow_model(monkeypatch) -> Iterator[FakeAnthropic]:
    with FakeAnthropic(delay=SLOW_MODEL) as api:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
        yield api


def _stuck_daemon(
    api: FakeAnthropic, *flags: str
) -> tuple[DaemonProcess, grpc.Future, grpc.Channel]:
    """A daemon whose background fold waits on the slow model, and a summary read waiting behind it."""
    daemon = DaemonProcess(
        "--summarizer",
        "claude",
        "--anthropic-model",
        "claude-test-model",
        "--summarizer-timeout",
        str(SLOW_MODEL),
        "--anthropic-max-retries",
        "0",
        "--summarizer-attempts",
        "1",
        "--buffer-size",
        "4",
        "--eviction-batch",
        "2",
        "--fold-delay",
        "0",
        "--shutdown-drain",
        str(DRAIN),
        "--shutdown-grace",
        str(GRACE),
        *flags,
    )
    channel = grpc.insecure_channel(daemon.target)
    stub = daemon_pb2_grpc.DaemonStub(channel)
    for n in range(6):
        stub.Query(request(f"Add utterance: fact {n} about the budget"), timeout=10)
    deadline = time.monotonic() + 10
    while not api.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert api.requests, "the background fold never called the model"
    in_flight = stub.Query.future(request("Get summary"), timeout=SLOW_MODEL)
    return daemon, in_flight, channel


def _exit_after_sigterm(daemon: DaemonProcess) -> int:
    daemon.proc.send_signal(signal.SIGTERM)
    return daemon.proc.wait(timeout=EXIT_BOUND)


class TestBoundedShutdown:
    """After SIGTERM the daemon exits within shutdown_drain + shutdown_grace + 2 s, whatever is in flight."""

    def test_a_daemon_with_a_call_and_a_fold_stuck_on_the_model_exits_and_reports_the_lost_queue(
        self, slow_model
    ):
        daemon, in_flight, channel = _stuck_daemon(slow_model)
        try:
            time.sleep(0.3)  # the summary read is in its handler, waiting for the fold
            assert _exit_after_sigterm(daemon) == 0
            daemon.terminate()
            with pytest.raises(grpc.RpcError):
                in_flight.result(timeout=10)
            # The summary read, stuck behind the fold: one call, however many idle threads the pool has.
            assert (
                "exiting with 1 call(s) still running, abandoned after shutdown_grace" in daemon.log
            )
            assert "lost with the memory backend" in daemon.log
        finally:
            channel.close()
            daemon.kill()

    def test_an_idle_daemon_after_many_calls_exits_without_an_abandoned_call_warning(self):
        """Idle pool threads are not stuck calls (issue 28, item 9): nothing in flight, no warning."""
        daemon = DaemonProcess("--shutdown-grace", str(GRACE), "--workers", "4")
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                calls = [
                    stub.Query.future(request(f"Add utterance: fact {n}"), timeout=10)
                    for n in range(8)
                ]
                for call in calls:
                    call.result()
            assert _exit_after_sigterm(daemon) == 0
            daemon.terminate()
            assert "received SIGTERM" in daemon.log
            assert "still running" not in daemon.log and "abandoned" not in daemon.log
        finally:
            daemon.kill()

    def test_with_the_disk_backend_the_queued_folds_stay_queued_for_the_next_start(
        self, slow_model, tmp_path: Path
    ):
        data = str(tmp_path / "data")
        daemon, in_flight, channel = _stuck_daemon(
            slow_model, "--backend", "disk", "--data-dir", data
        )
        try:
            assert _exit_after_sigterm(daemon) == 0
            daemon.terminate()
            assert "stay queued for summary at the next start" in daemon.log
        finally:
            channel.close()
            daemon.kill()
        stored = open_backend("disk", data_dir=data)
        try:
            assert [u.text for u in stored.read("default").pending] == [
                "fact 0 about the budget",
                "fact 1 about the budget",
            ]
        finally:
            stored.close()


SERVICE_LINKS = {
    "CHD_SERVICE_HOST": "10.0.0.5",
    "CHD_SERVICE_PORT": "50051",
    "CHD_SERVICE_PORT_GRPC": "50051",
    "CHD_PORT": "tcp://10.0.0.5:50051",
    "CHD_PORT_50051_TCP": "tcp://10.0.0.5:50051",
    "CHD_PORT_50051_TCP_PROTO": "tcp",
    "CHD_PORT_50051_TCP_PORT": "50051",
    "CHD_PORT_50051_TCP_ADDR": "10.0.0.5",
    "CHD_METRICS_PORT": "tcp://10.0.0.6:9464",  # a Service named chd-metrics
}


class TestStartingInKubernetes:
    """Service-link variables never stop start-up (item 12); a taken port always does (item 11)."""

    def test_a_daemon_starts_with_service_links_and_a_second_one_on_its_port_fails_in_one_line(
        self, monkeypatch
    ):
        """One daemon starts despite every link variable and lists them; a second on its port exits non-zero."""
        for name, value in SERVICE_LINKS.items():
            monkeypatch.setenv(name, value)
        daemon = DaemonProcess()
        try:
            second = run_chd("serve", "--port", str(daemon.port), timeout=60)
            got = run_chd("query", "Add utterance: hello", "--target", daemon.target)
            assert got.returncode == 0, got.stderr
            assert daemon.terminate() == 0
        finally:
            daemon.kill()
        for name in SERVICE_LINKS:
            assert f"ignored environment variable {name}:" in daemon.log
        assert "chd metrics on" not in daemon.log
        # No SO_REUSEPORT: the kernel would otherwise split calls between the two.
        assert second.returncode != 0 and "listening" not in second.stdout
        errors = [line for line in second.stderr.splitlines() if not line.startswith("{")]
        assert len(errors) == 1 and str(daemon.port) in errors[0] and "in use" in errors[0]

    def test_a_host_that_does_not_resolve_is_named_in_one_line_also_on_port_0(self):
        """grpc logged its own lookup error, then chd blamed the port (issue 28 review)."""
        done = run_chd(
            "serve",
            "--host",
            "nosuch.invalid",
            "--insecure",
            "--port",
            "0",
            "--log-level",
            "warning",
        )
        assert done.returncode == 1 and "listening" not in done.stdout
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith(
            "chd: cannot listen on nosuch.invalid:0: cannot resolve 'nosuch.invalid': "
        )

    def test_a_service_link_value_is_never_taken_for_a_port(self):
        from chd.service.config import load

        cfg = load({}, SERVICE_LINKS)
        assert (cfg.port, cfg.metrics_port) == (50051, None)
        assert len(cfg.ignored) == len(SERVICE_LINKS)

    def test_a_chd_variable_unlike_any_key_is_ignored_and_listed(self):
        from chd.service.config import load, render

        cfg = load({}, {"CHD_FROBNICATOR_MODE": "on"})
        assert cfg.ignored == ("CHD_FROBNICATOR_MODE: not a chd key",)
        assert "# ignored CHD_FROBNICATOR_MODE: not a chd key" in render(cfg)

    def test_a_misspelt_key_still_stops_start_up(self):
        from chd.service.config import ConfigError, load

        with pytest.raises(ConfigError) as refused:
            load({}, SERVICE_LINKS | {"CHD_BUFER_SIZE": "3"})
        assert "buffer_size" in str(refused.value)
