"""Hostile requests against a real `chd serve`: cost per byte, exit time, memory (issue 14).

Three parts, all over loopback against daemons this script starts and stops:

1. For each hostile shape, the round trip at growing sizes, as seconds per
   byte divided by the per-byte cost of a small "Get the last 5 utterances"
   measured in the same run (1.0: as cheap per byte as the baseline; the
   growth across sizes is what tells linear from worse). A size whose call
   takes longer than --cap seconds ends that shape; the daemon is then
   restarted, since a request holding the interpreter would skew the rest.
2. Seconds from SIGTERM to exit with a worst-case call in flight (the
   slowest shape found, and a summary read waiting on a model that does not
   answer), against the promised shutdown_drain + shutdown_grace + 2 s.
3. The daemon's RSS after the memory cases: searches for distinct 1 MB
   topics, reads of ids never stored, stores up to max_memory_bytes.

    python bench/bench_hostile.py [--max-size 1048576] [--cap 5] [--topics 100]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chd.v1 import daemon_pb2, daemon_pb2_grpc  # noqa: E402
from tests.fake_anthropic import FakeAnthropic  # noqa: E402

Shape = Callable[[int], tuple[str, dict[str, Any], dict[str, Any]]]

# Each builds a request of about n bytes.
SHAPES: dict[str, Shape] = {
    "query: number words after a speaker": lambda n: ("user " + "two " * (n // 4) + "x", {}, {}),
    "query: topic with trailing spaces": lambda n: (
        "Find utterances about x" + " " * n + "y",
        {},
        {},
    ),
    "query: spaces between two words": lambda n: ("a" + " " * n + "a", {}, {}),
    "query: ordinary words, refused": lambda n: ("hello " * (n // 6), {}, {}),
    "query: count of digits": lambda n: ("Get the last " + "9" * n + " utterances", {}, {}),
    "store: one long word": lambda n: ("Add utterance: " + "x" * n, {}, {}),
    "store: spaces": lambda n: ("Add utterance: a" + " " * n + "a", {}, {}),
    "store: sentences without an end": lambda n: (
        "",
        {},
        {"operation": "store", "text": "a" * n + "\nb"},
    ),
    "data: topic of words": lambda n: (
        "",
        {},
        {"operation": "retrieve", "topic": "two " * (n // 4)},
    ),
    "data: topic of spaces": lambda n: (
        "",
        {},
        {"operation": "retrieve", "topic": "x" + " " * n + "y"},
    ),
    "data: unknown operation": lambda n: ("", {}, {"operation": "q" * n}),
    "metadata: long key": lambda n: ("Get summary", {"m" * n: 1}, {}),
}
BASELINE = "Get the last 5 utterances"
SERVE_FLAGS = (
    "--max-utterance-chars",
    "4000000",
    "--max-tokens",
    "8000000",
    "--max-request-bytes",
    str(16 << 20),
    "--summarizer",
    "offline",
    "--log-level",
    "warning",
)


class Daemon:
    """A `chd serve` child on a free port."""

    def __init__(self, *flags: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chd", "serve", "--port", "0", *SERVE_FLAGS, *flags],
            stdout=subprocess.PIPE,
            stderr=None if os.environ.get("BENCH_LOG") else subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"listening on \S+:(\d+)", line)
        if not match:
            self.proc.kill()
            raise RuntimeError(f"chd serve did not start: {line!r}")
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{match.group(1)}",
            options=[
                ("grpc.max_send_message_length", 32 << 20),
                ("grpc.max_receive_message_length", 32 << 20),
            ],
        )
        self.stub = daemon_pb2_grpc.DaemonStub(self.channel)

    def ask(
        self, query: str, metadata: dict[str, Any], data: dict[str, Any], timeout: float
    ) -> float:
        """Seconds for one call (whatever status it ends with); raises on a deadline."""
        message = daemon_pb2.QueryRequest(query=query)
        message.metadata.update(metadata)
        message.data.update(data)
        began = time.perf_counter()
        try:
            self.stub.Query(message, timeout=timeout)
        except grpc.RpcError as error:
            if error.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
                raise TimeoutError from None
        return time.perf_counter() - began

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def _baseline_per_byte(daemon: Daemon) -> float:
    for n in range(5):
        daemon.ask(f"Add utterance: baseline fact {n}", {}, {}, 10)
    times = [daemon.ask(BASELINE, {}, {}, 10) for _ in range(60)]
    return statistics.median(times[10:]) / len(BASELINE)


def part_costs(max_size: int, cap: float) -> tuple[str, int, float]:
    """Prints each shape's cost per byte as a ratio; returns the slowest (shape, size, seconds) at its top size."""
    print("1. cost per byte, as a multiple of a small query's (same run)")
    daemon = Daemon()
    slowest = ("", 0, 0.0)
    try:
        per_byte = _baseline_per_byte(daemon)
        print(f"   baseline: {BASELINE!r} {per_byte * len(BASELINE) * 1e3:.2f} ms round trip")
        for name, shape in SHAPES.items():
            cells = []
            size = 1024
            while size <= max_size:
                query, metadata, data = shape(size)
                request_bytes = len(query) + sum(
                    len(str(k)) + len(str(v)) for d in (metadata, data) for k, v in d.items()
                )
                try:
                    seconds = daemon.ask(query, metadata, data, cap)
                    if (
                        seconds < cap / 4
                    ):  # the first call of a shape pays for warm-up: take the better of two
                        seconds = min(seconds, daemon.ask(query, metadata, data, cap))
                except TimeoutError:
                    cells.append(f"{size >> 10}k: >{cap:g}s")
                    if slowest[2] != float("inf"):
                        slowest = (name, size, float("inf"))
                    daemon.stop()
                    daemon = Daemon()  # the stuck request may still hold the old one
                    break
                cells.append(
                    f"{size >> 10}k: {seconds / request_bytes / per_byte:.2f}x ({seconds * 1e3:.0f} ms)"
                )
                if seconds > slowest[2] and size * 4 > max_size:
                    slowest = (name, size, seconds)
                size *= 4
            print(f"   {name:40s} " + "  ".join(cells))
    finally:
        daemon.stop()
    return slowest


def _time_to_exit(daemon: Daemon, start_call: Callable[[], Any]) -> str:
    start_call()
    time.sleep(1.0)  # the call is in its handler
    began = time.perf_counter()
    daemon.proc.send_signal(signal.SIGTERM)
    try:
        code = daemon.proc.wait(120)
    except subprocess.TimeoutExpired:
        return "still running after 120 s (killed)"
    return f"{time.perf_counter() - began:.2f} s, exit code {code}"


def part_exit(slowest: tuple[str, int, float]) -> None:
    drain, grace = 0.5, 1.0
    flags = ("--shutdown-drain", str(drain), "--shutdown-grace", str(grace))
    print(
        f"2. seconds from SIGTERM to exit (bound: drain {drain} + grace {grace} + 2 = {drain + grace + 2:g} s)"
    )
    name, size, _ = slowest
    if name:
        daemon = Daemon(*flags)
        query, metadata, data = SHAPES[name](size)
        message = daemon_pb2.QueryRequest(query=query)
        message.metadata.update(metadata)
        message.data.update(data)
        try:
            took = _time_to_exit(daemon, lambda: daemon.stub.Query.future(message, timeout=120))
            print(f"   slowest shape in flight ({name}, {size >> 10}k): {took}")
        finally:
            daemon.stop()
    with FakeAnthropic(delay=300) as api:
        env = {"ANTHROPIC_API_KEY": "sk-bench", "ANTHROPIC_BASE_URL": api.base_url}
        daemon = Daemon(
            *flags,
            "--summarizer",
            "claude",
            "--summarizer-timeout",
            "300",
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
            env=env,
        )
        try:
            for n in range(6):
                daemon.ask(f"Add utterance: fact {n}", {}, {}, 10)
            while not api.requests:
                time.sleep(0.05)
            took = _time_to_exit(
                daemon,
                lambda: daemon.stub.Query.future(
                    daemon_pb2.QueryRequest(query="Get summary"), timeout=300
                ),
            )
            print(f"   summary read waiting on a model that does not answer: {took}")
        finally:
            daemon.stop()


def part_memory(topics: int) -> None:
    print("3. daemon RSS after the memory cases (MiB)")
    daemon = Daemon("--max-memory-bytes", str(64 << 20))
    try:
        daemon.ask("Add utterance: the budget is due on Friday", {}, {}, 10)
        print(f"   at start: {daemon.rss_mib():.0f}")
        for n in range(topics):
            daemon.ask("", {}, {"operation": "retrieve", "topic": f"{n:06d}" + "z" * (1 << 20)}, 60)
        print(
            f"   after {topics} searches for distinct 1 MB topics ({topics} MiB sent): {daemon.rss_mib():.0f}"
        )
        for n in range(20_000):
            daemon.ask("Get the last 1 utterances", {"conversation_id": f"ghost-{n}"}, {}, 10)
        print(f"   after reads of 20,000 ids never stored: {daemon.rss_mib():.0f}")
        refused = 0
        for _ in range(100):
            try:
                daemon.stub.Query(
                    daemon_pb2.QueryRequest(query="Add utterance: " + "w " * (1 << 19)), timeout=60
                )
            except grpc.RpcError as error:
                refused += error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        print(
            f"   after 100 stores of 1 MiB with max_memory_bytes 64 MiB ({refused} refused): {daemon.rss_mib():.0f}"
        )
    finally:
        daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--max-size", type=int, default=1 << 20, help="largest request, bytes (default 1 MiB)"
    )
    parser.add_argument(
        "--cap", type=float, default=5.0, help="seconds a call may take before its shape stops"
    )
    parser.add_argument(
        "--topics", type=int, default=100, help="distinct 1 MB topics searched in part 3"
    )
    args = parser.parse_args()
    slowest = part_costs(args.max_size, args.cap)
    if slowest[0]:
        print(f"   slowest: {slowest[0]} at {slowest[1] >> 10}k, {slowest[2]:.2f} s")
    part_exit(slowest)
    part_memory(args.topics)


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
