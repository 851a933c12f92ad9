"""Topic search at buffer_size 10,000: query latency in the core and index update cost per store.

    python bench/bench_search.py [--size 10000] [--queries 300]

Targets (issue 5): a topic query answers in under 1 ms (p50) inside the core,
and a store's index update costs under 50 us. Both are reported next to a
baseline measured in the same run on the same conversation: the query-time
BM25 the daemon used before the index (every query scores every utterance)
and a full index rebuild (what a rebuild-on-change library such as bm25s
pays per store).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chd.core.history import ConversationHistory  # noqa: E402
from chd.core.language.intents import RetrieveIntent  # noqa: E402
from chd.core.memory.index import ConversationIndex  # noqa: E402
from chd.core.memory.retrieval import find_utterances  # noqa: E402
from chd.core.memory.terms import terms  # noqa: E402
from chd.core.settings import Settings  # noqa: E402
from chd.core.utterance import Utterance  # noqa: E402

SEED = 5


def _vocabulary(rng: random.Random, size: int = 3000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))))
    return sorted(words)


def _utterances(rng: random.Random, count: int) -> list[str]:
    """Zipf-distributed words, 8-25 per utterance: a few words are common, most are rare."""
    vocabulary = _vocabulary(rng)
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    return [" ".join(rng.choices(vocabulary, weights, k=rng.randint(8, 25))) for _ in range(count)]


def _old_rank(candidates: Sequence[Utterance], topic: str) -> list[tuple[float, int]]:
    """The query-time BM25 of commit 961fc11 (daemon/core/memory/search.py then): the baseline."""
    query = set(terms(topic))
    docs = [Counter(terms(u.text)) for u in candidates]
    average = sum(sum(d.values()) for d in docs) / len(docs) or 1.0
    frequency = Counter(t for d in docs for t in query if t in d)
    n = len(docs)
    hits = []
    for position, (utterance, doc) in enumerate(zip(candidates, docs)):
        length = sum(doc.values())
        score = 0.0
        for term in query:
            tf = doc.get(term, 0)
            if tf:
                idf = math.log(1 + (n - frequency[term] + 0.5) / (frequency[term] + 0.5))
                score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))
        if score > 0:
            hits.append((score * (1 + 0.2 * position / max(n - 1, 1)), utterance.seq))
    hits.sort(reverse=True)
    return hits


def _timed(fn: Callable[[], object], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:9.1f} us"


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--size", type=int, default=10_000)
    args.add_argument("--queries", type=int, default=300)
    options = args.parse_args(argv)
    rng = random.Random(SEED)
    texts = _utterances(rng, options.size + 200)

    settings = Settings(buffer_size=options.size, max_tokens=10**9, eviction_batch=1)
    history = ConversationHistory(settings=settings)
    start = time.perf_counter()
    for text in texts[: options.size]:
        history.add_utterance(text)
    fill = time.perf_counter() - start
    state = history.backend.read("default")
    print(f"conversation: {len(state.utterances)} utterances (filled in {fill:.1f} s)")

    # Topics of increasing document frequency: rare, medium, common words.
    frequency = Counter(t for u in state.utterances for t in set(terms(u.text)))
    by_df = sorted(frequency, key=frequency.get)
    bands = {
        "rare (~10 docs)": [w for w in by_df if 5 <= frequency[w] <= 20][:20],
        "medium (~100 docs)": [w for w in by_df if 60 <= frequency[w] <= 150][:20],
        "common (~1000 docs)": [w for w in by_df if 600 <= frequency[w] <= 1500][:20],
    }
    mixed = [f"{a} {b}" for a, b in zip(bands["rare (~10 docs)"], bands["medium (~100 docs)"])]

    history.query("Find utterances about warmup")  # builds the index once, as the first search does
    index = history.indexes.get("default")

    print(
        "\nTopic query, p50 / p99 (new: the core with its index; old: query-time BM25 of 961fc11)"
    )
    print(
        f"{'topic words':22} {'core query p50':>16} {'p99':>12} {'search only p50':>16} {'old p50':>12} {'old/new':>8}"
    )
    overall_new, overall_old = [], []
    for band, words in [*bands.items(), ("rare + medium", mixed)]:
        topics = [words[i % len(words)] for i in range(options.queries)]
        it = iter(topics)
        core = _timed(lambda: history.query(f"Find utterances about {next(it)}"), options.queries)
        it = iter(topics)
        search = _timed(
            lambda: find_utterances(state, RetrieveIntent(topic=next(it)), index, time.time()),
            options.queries,
        )
        it = iter(topics)
        old_repeat = max(5, options.queries // 30)
        old = _timed(lambda: _old_rank(state.utterances, next(it)), old_repeat)
        overall_new += core
        overall_old += old
        print(
            f"{band:22} {_us(_p(core, 0.5)):>16} {_us(_p(core, 0.99)):>12} {_us(_p(search, 0.5)):>16} "
            f"{_us(_p(old, 0.5)):>12} {_p(old, 0.5) / _p(core, 0.5):7.0f}x"
        )
    print(
        f"{'all topics':22} {_us(_p(overall_new, 0.5)):>16} {_us(_p(overall_new, 0.99)):>12} {'':>16} "
        f"{_us(_p(overall_old, 0.5)):>12} {_p(overall_old, 0.5) / _p(overall_new, 0.5):7.0f}x"
    )

    # Index update per store: what _note_store adds to a store at this size.
    extra = [
        Utterance("default", state.next_seq + i, "user", text, 0, "2026-01-01T00:00:00.000000Z", 10)
        for i, text in enumerate(texts[options.size :])
    ]
    victims = iter(u.seq for u in state.utterances)
    updates = []
    for utterance in extra:
        begin = time.perf_counter()
        with index.lock:
            index.note_store(utterance, (next(victims),))
        updates.append(time.perf_counter() - begin)
    rebuild = _timed(lambda: ConversationIndex().sync(state), 3)
    store = _timed(lambda: history.add_utterance(texts[0]), 50)
    print("\nIndex update per store (add the new utterance, drop an evicted one)")
    print(
        f"  index update p50 {_us(_p(updates, 0.5))}  p99 {_us(_p(updates, 0.99))}  mean {_us(statistics.mean(updates))}"
    )
    print(
        f"  whole store in the core p50 {_us(_p(store, 0.5))} (update share {_p(updates, 0.5) / _p(store, 0.5):.1%})"
    )
    print(
        f"  baseline, full rebuild per change p50 {_us(_p(rebuild, 0.5))} "
        f"({_p(rebuild, 0.5) / _p(updates, 0.5):.0f}x the incremental update)"
    )

    verdict_query = _p(overall_new, 0.5) < 1e-3
    verdict_update = _p(updates, 0.5) < 50e-6
    print(
        f"\ntargets: query p50 < 1 ms: {'met' if verdict_query else 'MISSED'}; "
        f"index update < 50 us: {'met' if verdict_update else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
