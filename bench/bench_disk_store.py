"""In-process cost of a store, disk backend against memory, in the same run.

    python bench/bench_disk_store.py [--stores 4000] [--rounds 5] [--durability normal]

Each round times ``ConversationHistory.query("Add utterance: ...")`` over 8
conversations, single thread, on a fresh memory backend and on a fresh disk
backend in a temporary directory (the order alternates between rounds, so
drift on a shared machine hits both alike). It prints per round and as the
median of the rounds: microseconds per store for each, their ratio, and the
disk store's latency percentiles (p99 and p99.9 show WAL checkpoints, which
stall the store that triggers them; "slow" is the share of the disk
stores' time spent in stores slower than 1 ms).

This is the core's own cost with no gRPC; bench/bench_backends.py measures
the daemon over gRPC against its ceiling (issue 3).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_backends import store_text  # noqa: E402  (the same stores as over gRPC)
from percentiles import percentile  # noqa: E402

from chd.backends import open_backend  # noqa: E402
from chd.core.history import ConversationHistory  # noqa: E402
from chd.core.settings import Settings  # noqa: E402

CONVERSATIONS = 8


def _run(kind: str, stores: int, durability: str) -> list[float]:
    """Per-store latencies in seconds, on a fresh backend of ``kind``."""
    tmp = Path(tempfile.mkdtemp(prefix="chd-bench-disk-"))
    options = {"data_dir": str(tmp), "durability": durability} if kind == "disk" else {}
    history = ConversationHistory(
        backend=open_backend(kind, **options),
        settings=Settings(buffer_size=10000, max_tokens=10**7),
        background=False,
    )
    try:
        for i in range(50):  # warm up: connections, caches, first records
            history.query(store_text(i), {"conversation_id": f"warm{i % CONVERSATIONS}"})
        metadata = [{"conversation_id": f"c{i % CONVERSATIONS}"} for i in range(CONVERSATIONS)]
        texts = [store_text(i) for i in range(stores)]
        clock = time.perf_counter
        out = []
        for i, text in enumerate(texts):
            start = clock()
            history.query(text, metadata[i % CONVERSATIONS])
            out.append(clock() - start)
        return out
    finally:
        history.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", type=int, default=4000, help="stores per backend and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported")
    parser.add_argument("--durability", choices=("normal", "full"), default="normal")
    args = parser.parse_args()

    rows = []
    print(
        f"{args.stores} stores x {args.rounds} rounds, {CONVERSATIONS} conversations, durability {args.durability}"
    )
    print(
        f"{'round':<6} {'memory us':>10} {'disk us':>8} {'ratio':>6} {'disk p50':>9} {'p99':>7} {'p99.9':>7} "
        f"{'max':>7} {'slow':>6}"
    )
    for round_number in range(args.rounds):
        order = ("memory", "disk") if round_number % 2 == 0 else ("disk", "memory")
        latencies = {kind: _run(kind, args.stores, args.durability) for kind in order}
        memory = statistics.fmean(latencies["memory"]) * 1e6
        disk = statistics.fmean(latencies["disk"]) * 1e6
        ranked = sorted(latencies["disk"])
        row = (
            memory,
            disk,
            disk / memory,
            percentile(ranked, 0.5) * 1e6,
            percentile(ranked, 0.99) * 1e6,
            percentile(ranked, 0.999) * 1e6,
            ranked[-1] * 1e6,
            sum(t for t in ranked if t > 1e-3) / sum(ranked),
        )
        rows.append(row)
        print(
            f"{round_number + 1:<6} {row[0]:>10.0f} {row[1]:>8.0f} {row[2]:>6.2f} "
            f"{row[3]:>9.0f} {row[4]:>7.0f} {row[5]:>7.0f} {row[6]:>7.0f} {row[7]:>6.1%}"
        )
    median = [statistics.median(column) for column in zip(*rows)]
    print(
        f"{'median':<6} {median[0]:>10.0f} {median[1]:>8.0f} {median[2]:>6.2f} "
        f"{median[3]:>9.0f} {median[4]:>7.0f} {median[5]:>7.0f} {median[6]:>7.0f} {median[7]:>6.1%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
