"""``chd serve --processes N``: N serving processes on one port, for backends whose state they share.

A Python process answers on one core at a time; with the disk or Redis
backend the state lives outside the process, so N processes can serve one
port (issue 31). This module is the parent. It

* checks that nobody holds the port (a foreign listener makes it refuse to
  start, in one line), then reserves it: a socket bound with SO_REUSEPORT
  that never listens, held for the group's life, so no process without
  SO_REUSEPORT can take the port, not even while a child restarts;
* starts N ``chd serve`` children (fresh interpreters: gRPC does not
  survive a fork once it has started) with the same arguments plus
  ``--port P --processes 1 --group-member PARENT_PID``. Only such a child
  turns on gRPC's ``grpc.so_reuseport`` (default 0 in chd: a second daemon
  must not silently share a port); it checks that its parent is the pid it
  was given, and dies with the parent (PR_SET_PDEATHSIG, which it sets
  itself: ``check_parent``);
* answers SIGTERM/SIGINT by passing SIGTERM to every child and waiting
  for them (each drains and closes its storage as a lone daemon does);
* restarts a child that exits on its own, logging it; more than
  ``CRASH_LIMIT`` crashes (any exit but a clean one, code 0, of a child
  that was serving) within ``CRASH_WINDOW`` seconds stop the group
  (exit 1), so a child that cannot start does not loop forever;
* serves the group's metrics: each child serves its own on a loopback port
  of its own, and the parent's endpoint (``metrics_port``) answers with
  all of them, every sample labelled ``process``, except the gauges of
  the shared storage (``STORAGE_GAUGES``), reported once for the group.

The kernel puts sockets with SO_REUSEPORT into one group only when they
belong to the same user: a process of another user can never join. A
process of the same user that sets SO_REUSEPORT itself could, as with any
SO_REUSEPORT server; the reservation keeps out everything else.

Each child keeps its own fold worker: folds are safe across processes
because a fold's commit is conditional (it checks, inside the storage
transaction, that the batch is still queued and the summary unchanged,
and reads again otherwise: backends/base.py), and Redis also leases a
conversation's fold to one process. With the disk backend two children
may both summarize one batch after a restart; one result is dropped.
Health is each child's own: any of them answers on the shared port, and
all of them read the same storage.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from chd.service.config import Config
from chd.service.server import check_port_free

__all__ = [
    "run_group",
    "reserve_port",
    "check_parent",
    "CRASH_LIMIT",
    "CRASH_WINDOW",
    "STORAGE_GAUGES",
]

log = logging.getLogger(__name__)

# A child exiting this often within the window stops the group: it is not
# a crash to ride out but a daemon that cannot run.
CRASH_LIMIT = 5
CRASH_WINDOW = 60.0
# Seconds a child may take to print its listening line.
START_TIMEOUT = 120.0
_LISTENING = re.compile(r"^chd listening on \S+:(\d+)")
_METRICS = re.compile(r"^chd metrics on http://\S+:(\d+)/metrics")


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with SO_REUSEPORT, not listening; raise OSError if the port is held.

    ``port`` 0 reserves a free one (its number is the socket's). The check
    binds without SO_REUSEPORT, so any listener holds the port against it,
    whether or not that listener set SO_REUSEPORT.
    """
    check_port_free(host, port)
    family, kind, proto, _, where = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)[
        0
    ]
    reserved = socket.socket(family, kind, proto)
    try:
        reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        reserved.bind(where)
    except OSError:
        reserved.close()
        raise
    return reserved


def check_parent(parent: int) -> None:
    """Die with ``parent``; raise RuntimeError unless this process is its child (``--group-member``).

    PR_SET_PDEATHSIG is set here, in the child, rather than between fork
    and exec (``preexec_fn``, unsafe in a parent with threads: the group
    restarts children while its reader and metrics threads run). Set
    first, then the parent checked: a parent that died before the setting
    has left this process another parent, so it stops here instead.
    """
    _die_with_parent()
    if os.getppid() != parent:
        raise RuntimeError(
            f"--group-member {parent} is for the serving processes chd serve --processes starts; "
            f"this process's parent is {os.getppid()}"
        )


def _die_with_parent() -> None:
    # A parent killed with SIGKILL must not leave its children serving the
    # port on their own. The signal comes when the parent's thread that
    # started this process ends: the group starts and restarts children
    # from its main thread, which lives as long as the parent.
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass
class _Child:
    index: int
    command: list[str]
    proc: subprocess.Popen[str] | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    metrics_port: int | None = None
    reader: threading.Thread | None = None

    def spawn(self) -> None:
        self.ready = threading.Event()
        self.metrics_port = None
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.reader = threading.Thread(
            target=self._read, args=(self.proc.stdout,), name=f"chd-group-{self.index}", daemon=True
        )
        self.reader.start()

    def _read(self, stream: TextIO) -> None:
        # The child's stdout: its listening and metrics lines are the
        # parent's to read; anything else is passed on.
        for line in stream:
            if _LISTENING.match(line):
                self.ready.set()
            elif match := _METRICS.match(line):
                self.metrics_port = int(match.group(1))
            else:
                sys.stdout.write(line)
                sys.stdout.flush()
        stream.close()

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()


def _child_command(argv: Sequence[str], port: int, metrics: bool) -> list[str]:
    command = [sys.executable, "-P", "-m", "chd", "serve", *argv]  # -P: not the cwd's modules
    command += ["--port", str(port), "--processes", "1", "--group-member", str(os.getpid())]
    if metrics:
        command += ["--metrics-port", "0", "--metrics-host", "127.0.0.1"]
    return command


def run_group(config: Config, argv: Sequence[str], done: threading.Event) -> int:
    """Serve with ``config.processes`` children until ``done`` (SIGTERM/SIGINT); the exit code.

    ``argv`` are the arguments ``chd serve`` was given (after ``serve``):
    the children parse them as the parent did, and the flags added after
    them win.
    """
    try:
        reserved = reserve_port(config.host, config.port)
    except OSError as exc:
        print(f"chd: cannot listen on {config.host}:{config.port}: {exc}", file=sys.stderr)
        return 1
    port = reserved.getsockname()[1]
    metrics = config.metrics_port is not None
    children = [_Child(i, _child_command(argv, port, metrics)) for i in range(config.processes)]
    endpoint = None
    try:
        for child in children:
            child.spawn()
        if not _all_ready(children, done):
            return 1 if not done.is_set() else 0
        if metrics:
            try:
                endpoint = _serve_metrics(config, children)
            except OSError as exc:
                print(
                    f"chd: cannot listen on {config.metrics_host}:{config.metrics_port} "
                    f"(metrics_port): {exc.strerror or exc}",
                    file=sys.stderr,
                )
                return 1
        print(f"chd listening on {config.host}:{port}", flush=True)
        if endpoint is not None:
            print(
                f"chd metrics on http://{config.metrics_host}:{endpoint.server_port}/metrics",
                flush=True,
            )
        log.info(
            "serving with %d processes: %s",
            len(children),
            ", ".join(str(c.pid) for c in children),
        )
        return _supervise(children, done)
    finally:
        _stop_all(children, config.shutdown_grace + config.shutdown_drain + 5.0)
        if endpoint is not None:
            endpoint.shutdown()
            endpoint.server_close()
        reserved.close()


def _all_ready(children: list[_Child], done: threading.Event) -> bool:
    """Wait for every child's listening line; False (having said why) if one exits first."""
    until = time.monotonic() + START_TIMEOUT
    while not all(c.ready.is_set() for c in children):
        for child in children:
            code = child.exited()
            if code is not None and not child.ready.is_set():
                print(
                    f"chd: serving process {child.index} exited with code {code} before it listened",
                    file=sys.stderr,
                )
                return False
        if done.wait(0.05):
            return False
        if time.monotonic() > until:
            print(
                f"chd: serving processes did not start within {START_TIMEOUT:g} s", file=sys.stderr
            )
            return False
    return True


def _supervise(children: list[_Child], done: threading.Event) -> int:
    """Restart children that exit until ``done``; 1 once they exit too often."""
    exits: list[float] = []
    while not done.wait(0.2):
        for child in children:
            code = child.exited()
            if code is None:
                continue
            now = time.monotonic()
            exits = [t for t in exits if now - t < CRASH_WINDOW]
            # A clean exit of a child that served (exit 0 after SIGTERM: an
            # operator's rolling restart) is no crash; one before it
            # listened is, or a child that cannot start would loop forever.
            if code != 0 or not child.ready.is_set():
                exits.append(now)
            if len(exits) > CRASH_LIMIT:
                log.error(
                    "serving process %d (pid %d) exited with code %s; %d exits within %g s, "
                    "stopping the group",
                    child.index,
                    child.pid,
                    code,
                    len(exits),
                    CRASH_WINDOW,
                )
                return 1
            old = child.pid
            child.spawn()
            log.warning(
                "serving process %d (pid %d) exited with code %s; restarted as pid %d",
                child.index,
                old,
                code,
                child.pid,
            )
    return 0


def _stop_all(children: list[_Child], timeout: float) -> None:
    """SIGTERM every child, wait up to ``timeout`` seconds for all, then SIGKILL what is left."""
    for child in children:
        if child.exited() is None and child.proc is not None:
            child.proc.send_signal(signal.SIGTERM)
    until = time.monotonic() + timeout
    for child in children:
        if child.proc is None:
            continue
        try:
            child.proc.wait(timeout=max(0.0, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning(
                "serving process %d (pid %d) did not stop; killing it", child.index, child.pid
            )
            child.proc.kill()
            child.proc.wait()
        if child.reader is not None:
            child.reader.join(timeout=5)


# --- the group's metrics -------------------------------------------------------


# Gauges that describe the shared storage, not the process: every child
# reports them, so a sum over ``process`` would count the storage N times.
# The group reports each once, unlabelled, at the largest value a child
# reports (a child's sizes are as of its own commits and its start-up count).
STORAGE_GAUGES = frozenset(
    {
        "chd_conversations",
        "chd_buffer_utterances",
        "chd_summary_queue_utterances",
        "chd_summary_queue_max_utterances",
        "chd_summary_coverage_ratio",
        "chd_summary_offline_only_utterances",
        "chd_summary_awaiting_rewrite_utterances",
        "chd_summary_originals_dropped",
    }
)


class _GroupCollector:
    """Every ready child's metrics, each sample labelled with the child's ``process`` index,
    but for ``STORAGE_GAUGES``, reported once for the group."""

    def __init__(self, children: list[_Child]) -> None:
        self.children = children

    def collect(self) -> Iterator[Any]:
        from prometheus_client.metrics_core import GaugeMetricFamily, Metric
        from prometheus_client.parser import text_string_to_metric_families

        families: dict[str, Metric] = {}
        # (name, sorted labels) -> the largest value any child reports.
        storage: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
        serving = 0
        for child in self.children:
            if child.metrics_port is None or child.exited() is not None:
                continue
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{child.metrics_port}/metrics", timeout=2
                ) as answer:
                    text = answer.read().decode()
            except OSError:
                continue  # restarting: its numbers come back with it
            serving += 1
            for family in text_string_to_metric_families(text):
                merged = families.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type, family.unit)
                )
                if family.name in STORAGE_GAUGES:
                    values = storage.setdefault(family.name, {})
                    for sample in family.samples:
                        at = (sample.name, tuple(sorted(sample.labels.items())))
                        values[at] = max(values.get(at, sample.value), sample.value)
                    continue
                for sample in family.samples:
                    merged.add_sample(
                        sample.name,
                        {**sample.labels, "process": str(child.index)},
                        sample.value,
                        sample.timestamp,
                        sample.exemplar,
                    )
        for name, values in storage.items():
            for (sample_name, labels), value in values.items():
                families[name].add_sample(sample_name, dict(labels), value)
        yield GaugeMetricFamily(
            "chd_group_processes_serving",
            "serving processes of chd serve --processes whose metrics answered",
            value=serving,
        )
        yield from families.values()


def _serve_metrics(config: Config, children: list[_Child]) -> Any:
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_GroupCollector(children))  # type: ignore[arg-type]
    check_port_free(config.metrics_host, config.metrics_port)
    httpd, _ = start_http_server(config.metrics_port, addr=config.metrics_host, registry=registry)
    return httpd
