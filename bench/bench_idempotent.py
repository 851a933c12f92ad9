"""In-process cost of a store with an idempotency key against one without, in the same run (issue 29).

    python bench/bench_idempotent.py [--held 5000] [--stores 300] [--rounds 15] [--backends memory,disk]

Each backend's conversation first holds ``--held`` utterances (a buffer
that large, so a scan would show). Then each round times ``--stores``
stores through ``ConversationHistory.query`` with ``data.operation`` store
and no key, and as many each with a fresh ``metadata.idempotency_key``, the
order alternating between rounds so drift on a shared machine hits both
alike. It prints microseconds per store for each as the median of the
rounds, and their ratio.

On a chd without idempotency keys the key is unknown metadata and ignored,
so the same script run there gives the cost from before (both columns).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chd.backends import open_backend  # noqa: E402
from chd.core.history import ConversationHistory  # noqa: E402
from chd.core.settings import Settings  # noqa: E402


def _timed(history: ConversationHistory, stores: int, keyed: bool, start: int) -> float:
    keys = [{"idempotency_key": uuid.uuid4().hex} if keyed else {} for _ in range(stores)]
    data = [
        {"operation": "store", "text": f"utterance {start + i} about the train to Lyon"}
        for i in range(stores)
    ]
    began = time.perf_counter()
    for metadata, fields in zip(keys, data):
        history.query("", metadata, fields)
    return (time.perf_counter() - began) / stores * 1e6


def run(kind: str, held: int, stores: int, rounds: int) -> tuple[float, float]:
    directory = Path(tempfile.mkdtemp(prefix="chd-bench-idem-"))
    try:
        backend = (
            open_backend(kind, data_dir=str(directory)) if kind == "disk" else open_backend(kind)
        )
        total = held + stores * rounds * 2 + 10
        history = ConversationHistory(
            backend, Settings(buffer_size=total, max_tokens=total * 40), background=False
        )
        for i in range(held):
            history.query(
                "", {"idempotency_key": f"fill-{i}"}, {"operation": "store", "text": f"held {i}"}
            )
        plain, keyed = [], []
        n = held
        for r in range(rounds):
            for kind_keyed in (False, True) if r % 2 == 0 else (True, False):
                cost = _timed(history, stores, kind_keyed, n)
                n += stores
                (keyed if kind_keyed else plain).append(cost)
        history.close()
        return statistics.median(plain), statistics.median(keyed)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--held", type=int, default=5000)
    parser.add_argument("--stores", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--backends", default="memory,disk")
    args = parser.parse_args()
    for kind in args.backends.split(","):
        plain, keyed = run(kind, args.held, args.stores, args.rounds)
        print(
            f"{kind:7s} held={args.held}: no key {plain:7.1f} us/store, keyed {keyed:7.1f} us/store, "
            f"ratio {keyed / plain:.3f}"
        )


if __name__ == "__main__":
    main()
