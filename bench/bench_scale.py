"""Many conversations on one machine (issue 17): start-up, stores, export and import by size.

    python bench/bench_scale.py [--sizes 1000,10000] [--work DIR] [--stores 500] [--keep]

For each size it writes an export file of that many conversations (each
100 utterances: 20 in the buffer, 80 archived, a 4-segment summary),
builds a data dir from it with ``chd import`` (the public import path),
then measures, on a ``chd serve --backend disk`` process:

* the time from spawning ``chd serve`` to health answering SERVING (with
  ``--metrics-port``, whose gauges used to read every conversation first);
* RSS right after that, and after touching 1,000 random conversations;
* median and p99 of ``--stores`` stores to random conversations, over gRPC,
  each to a different conversation no earlier store reached, so that every
  store evicts and queues a fold at every size; at 1k the 1,000 touched are
  all of them, so every store hits the state cache, and at 100k almost
  none does: two like-for-like rows beside it,
  200 stores to conversations untouched since start (before the touches)
  and 200 to conversations just read, show growth with the data alone;
* a store to a new conversation once ``max_conversations`` is reached
  (the daemon runs with the limit set to the size), median of 50;
* after the daemon stops: ``chd export`` of everything and the ``chd
  import`` that built the dir, in utterances per second.

Each figure is printed beside the first size's, with the ratio, so growth
reads at a glance. Targets (issue 17): SERVING < 1 s, the store median at
the largest size within 1.5x of 1k, export and import >= 100,000
utterances/s, the refused store as fast as a normal store. Data dirs are
about 26 MB per 1,000 conversations and export files 28 MB; they are
deleted unless ``--keep``.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from percentiles import percentile  # noqa: E402

from chd.v1 import daemon_pb2, daemon_pb2_grpc  # noqa: E402

BUFFER, ARCHIVED, SEGMENTS = 20, 80, 4
FIRST_TOUCHES = 200  # stores of each like-for-like row
SETTLE = 3.0  # seconds for the folds of those stores (about 3 ms each) to finish
WORDS = "harbour lighthouse ferry tide anchor rope gull pier storm beacon chart compass".split()


@dataclass
class Figures:
    size: int
    serving_s: float = 0.0
    rss_start_mb: float = 0.0
    rss_touched_mb: float = 0.0
    store_median_ms: float = 0.0
    store_p99_ms: float = 0.0
    first_touch_median_ms: float = 0.0
    cached_median_ms: float = 0.0
    refused_median_ms: float = 0.0
    export_rate: float = 0.0
    export_cpu_rate: float = 0.0
    import_rate: float = 0.0
    import_cpu_rate: float = 0.0


def _text(rng: random.Random, n: int) -> str:
    return f"message {n} about the " + " ".join(rng.choice(WORDS) for _ in range(8))


def write_export(path: Path, size: int, seed: int = 17) -> int:
    """An export file of ``size`` conversations; the number of utterances in it."""
    rng = random.Random(seed)
    total = BUFFER + ARCHIVED
    per_segment = ARCHIVED // SEGMENTS
    lines = 0
    with path.open("w", encoding="utf-8") as out:
        for i in range(size):
            cid = f"conv{i:06d}"
            segments = [
                {
                    "text": f"Summary of turns {s * per_segment + 1} to {(s + 1) * per_segment}: the "
                    + " ".join(rng.choice(WORDS) for _ in range(12)),
                    "tokens": 20,
                    "seq_from": s * per_segment + 1,
                    "seq_to": (s + 1) * per_segment,
                    "turn_from": s * per_segment + 1,
                    "turn_to": (s + 1) * per_segment,
                    "made_by": "extractive",
                    "error": "",
                }
                for s in range(SEGMENTS)
            ]
            header = {
                "record": "conversation",
                "format": 1,
                "conversation_id": cid,
                "next_seq": total + 1,
                "last_turn": total,
                "settings": {},
                "summary": {"segments": segments, "through_seq": ARCHIVED, "tokens": 20 * SEGMENTS},
            }
            out.write(json.dumps(header, separators=(",", ":")) + "\n")
            for where, seqs in (
                ("buffer", range(ARCHIVED + 1, total + 1)),
                ("archive", range(1, ARCHIVED + 1)),
            ):
                for seq in seqs:
                    # The fields in the order `chd export` writes them.
                    record = {
                        "record": "utterance",
                        "in": where,
                        "seq": seq,
                        "speaker": "user" if seq % 2 else "assistant",
                        "text": _text(rng, seq),
                        "turn_number": seq,
                        "timestamp": f"2026-01-01T00:{seq // 60:02d}:{seq % 60:02d}.000000Z",
                        "tokens": 14,
                        "conversation_id": cid,
                        "important": False,
                    }
                    out.write(json.dumps(record, separators=(",", ":")) + "\n")
                    lines += 1
    return lines


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def chd(*args: str) -> tuple[float, float]:
    """Run a ``chd`` command; its wall time and its CPU time (user + system) in seconds.

    On a shared machine the wall time includes waiting for a CPU; the CPU
    time is what the command itself cost.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "chd", *args],
        env=_env(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"chd {args[0]} failed: {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def serve(data: Path, size: int) -> tuple[subprocess.Popen[str], str, float]:
    """A daemon on ``data``; its process, target and the seconds until health said SERVING."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chd",
            "serve",
            "--port",
            "0",
            "--backend",
            "disk",
            "--data-dir",
            str(data),
            "--max-conversations",
            str(size),
            "--metrics-port",
            "0",
            "--buffer-size",
            str(BUFFER),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    assert proc.stdout is not None
    target = ""
    while not target:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("chd serve ended before listening")
        match = re.search(r"listening on (\S+):(\d+)", line)
        if match:
            target = f"127.0.0.1:{match.group(2)}"
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                status = health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
            except grpc.RpcError:
                status = None
            if status == health_pb2.HealthCheckResponse.SERVING:
                break
            time.sleep(0.005)
    return proc, target, time.perf_counter() - start


def ask(stub: daemon_pb2_grpc.DaemonStub, text: str, cid: str) -> float:
    request = daemon_pb2.QueryRequest(query=text)
    request.metadata.update({"conversation_id": cid})
    start = time.perf_counter()
    stub.Query(request, timeout=120)
    return time.perf_counter() - start


def refused(stub: daemon_pb2_grpc.DaemonStub, cid: str) -> float:
    request = daemon_pb2.QueryRequest(query="Add utterance: one too many")
    request.metadata.update({"conversation_id": cid})
    start = time.perf_counter()
    try:
        stub.Query(request, timeout=120)
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise
    else:
        raise SystemExit("a store over max_conversations was accepted")
    return time.perf_counter() - start


def measure(size: int, work: Path, stores: int, keep: bool) -> Figures:
    figures = Figures(size)
    rng = random.Random(size)
    source = work / f"export-{size}.jsonl"
    data = work / f"data-{size}"
    shutil.rmtree(data, ignore_errors=True)
    print(f"[{size}] writing {source.name} ...", file=sys.stderr, flush=True)
    utterances = write_export(source, size)
    print(f"[{size}] chd import ...", file=sys.stderr, flush=True)
    wall, cpu = chd("import", str(source), "--data-dir", str(data))
    figures.import_rate, figures.import_cpu_rate = utterances / wall, utterances / cpu

    proc, target, figures.serving_s = serve(data, size)
    try:
        figures.rss_start_mb = rss_mb(proc.pid)
        ids = [f"conv{i:06d}" for i in range(size)]
        with grpc.insecure_channel(target) as channel:
            stub = daemon_pb2_grpc.DaemonStub(channel)
            # Like for like at every size: stores to conversations nothing has
            # read since start (each a state-cache miss), then, below, stores
            # to conversations just read. The mixed median after them draws
            # from all ids, so at 1k every store hits and at 100k almost none.
            first = rng.sample(ids, min(FIRST_TOUCHES, size))
            figures.first_touch_median_ms = (
                statistics.median(
                    ask(stub, f"Add utterance: {_text(rng, n)}", cid) for n, cid in enumerate(first)
                )
                * 1000
            )
            time.sleep(SETTLE)  # let the folds those stores queued finish before the next figures
            touched = rng.sample(ids, min(1000, size))
            for cid in touched:
                ask(stub, "Get the last 5 utterances", cid)
            figures.rss_touched_mb = rss_mb(proc.pid)
            figures.cached_median_ms = (
                statistics.median(
                    ask(stub, f"Add utterance: {_text(rng, n)}", cid)
                    for n, cid in enumerate(touched[:FIRST_TOUCHES])
                )
                * 1000
            )
            # Each to a conversation no store has reached since start, so every
            # one meets a full buffer and queues a fold at every size. Drawn
            # with repeats, as before, a store at 1k often came back to a
            # conversation a store had just made room in (no fold), and at
            # 100k almost never: the sizes did different work per store.
            stored = set(first) | set(touched[:FIRST_TOUCHES])
            fresh = rng.sample(
                [cid for cid in ids if cid not in stored], min(stores, size - len(stored))
            )
            latencies = [
                ask(stub, f"Add utterance: {_text(rng, n)}", cid) for n, cid in enumerate(fresh)
            ]
            figures.store_median_ms = statistics.median(latencies) * 1000
            figures.store_p99_ms = percentile(latencies, 99) * 1000
            figures.refused_median_ms = (
                statistics.median(refused(stub, f"new{n}") for n in range(50)) * 1000
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)

    print(f"[{size}] chd export ...", file=sys.stderr, flush=True)
    exported = work / f"exported-{size}.jsonl"
    wall, cpu = chd("export", "--data-dir", str(data), "--output", str(exported))
    with exported.open(encoding="utf-8") as lines:
        count = sum(1 for line in lines if line.startswith('{"record":"utterance"'))
    figures.export_rate, figures.export_cpu_rate = count / wall, count / cpu
    exported.unlink()
    source.unlink()
    if not keep:
        shutil.rmtree(data, ignore_errors=True)
    return figures


def empty_baseline(work: Path) -> tuple[float, float]:
    """Time to SERVING and RSS on an empty data dir: what start-up costs without data."""
    data = work / "data-empty"
    shutil.rmtree(data, ignore_errors=True)
    proc, _, serving = serve(data, 1)
    try:
        return serving, rss_mb(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(data, ignore_errors=True)


ROWS = (
    ("time to SERVING (s)", "serving_s", "{:.2f}"),
    ("RSS after start (MB)", "rss_start_mb", "{:.0f}"),
    ("RSS after 1,000 touched (MB)", "rss_touched_mb", "{:.0f}"),
    ("store median (ms)", "store_median_ms", "{:.2f}"),
    ("store p99 (ms)", "store_p99_ms", "{:.2f}"),
    ("store to an untouched conversation (ms)", "first_touch_median_ms", "{:.2f}"),
    ("store to a just-read conversation (ms)", "cached_median_ms", "{:.2f}"),
    ("refused store at the limit, median (ms)", "refused_median_ms", "{:.2f}"),
    ("export (utterances/s)", "export_rate", "{:,.0f}"),
    ("export (utterances/CPU-s)", "export_cpu_rate", "{:,.0f}"),
    ("import (utterances/s)", "import_rate", "{:,.0f}"),
    ("import (utterances/CPU-s)", "import_cpu_rate", "{:,.0f}"),
)


def report(results: list[Figures]) -> None:
    base = results[0]
    header = f"{'conversations':42}" + "".join(f"{r.size:>22,}" for r in results)
    print(header)
    for label, name, fmt in ROWS:
        cells = []
        for r in results:
            value = getattr(r, name)
            cell = fmt.format(value)
            if r is not base:
                cell += f" ({value / getattr(base, name):.2f}x)" if getattr(base, name) else ""
            cells.append(f"{cell:>22}")
        print(f"{label:42}" + "".join(cells))
    largest = results[-1]
    print()
    print("targets (issue 17):")
    serving = largest.serving_s
    print(
        f"  SERVING < 1 s at {largest.size:,}: {'yes' if serving < 1 else 'NO'} ({serving:.2f} s)"
    )
    ratio = largest.store_median_ms / base.store_median_ms
    print(
        f"  store median within 1.5x of {base.size:,}: {'yes' if ratio <= 1.5 else 'NO'} ({ratio:.2f}x)"
    )
    for label, name in (
        ("an untouched", "first_touch_median_ms"),
        ("a just-read", "cached_median_ms"),
    ):
        like = getattr(largest, name) / getattr(base, name)
        print(f"    like for like, store to {label} conversation: {like:.2f}x of {base.size:,}")
    for label, name in (
        ("export", "export_rate"),
        ("import", "import_rate"),
        ("export per CPU-s", "export_cpu_rate"),
        ("import per CPU-s", "import_cpu_rate"),
    ):
        worst = min(getattr(r, name) for r in results)
        print(
            f"  {label} >= 100,000 utterances/s: {'yes' if worst >= 100_000 else 'NO'} (lowest {worst:,.0f})"
        )
    refused_ratio = largest.refused_median_ms / largest.store_median_ms
    print(f"  refused store as fast as a store: {refused_ratio:.2f}x the store median")


def machine_speed() -> float:
    """CPU seconds of a fixed pure-Python loop: the yardstick for comparing runs across machines."""
    start = time.process_time()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated conversation counts")
    parser.add_argument(
        "--work", default=None, help="directory for the files and data dirs (default: a temp dir)"
    )
    parser.add_argument("--stores", type=int, default=500)
    parser.add_argument("--keep", action="store_true", help="keep the data dirs")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="chd-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    # What `pip install .` does at install: with an editable install (and
    # PYTHONDONTWRITEBYTECODE, as on this project's machines) every start
    # of the daemon would otherwise compile chd's modules from source, which
    # is Python's cost, not chd's, and no installed daemon pays it.
    for package in ("daemon", "backends"):
        compileall.compile_dir(str(ROOT / package), quiet=1)
    load = os.getloadavg()[0]
    speed = machine_speed()
    empty_serving, empty_rss = empty_baseline(work)
    results = [measure(size, work, args.stores, args.keep) for size in sizes]
    print(
        f"load average at the start {load:.1f}, at the end {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs); "
        f"this machine runs a fixed 10^7-step Python loop in {speed:.2f} CPU-s (the figures of runs on "
        f"other machines scale with it)"
    )
    print(
        f"an empty data dir, for comparison: SERVING after {empty_serving:.2f} s, RSS {empty_rss:.0f} MB"
    )
    report(results)
    if not args.work and not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
