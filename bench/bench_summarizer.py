"""Benchmark: does summarization slow down stores, and what does the offline summarizer cost?

    python bench/bench_summarizer.py [--stores 600] [--rounds 3] [--model-ms 300] [--interval-ms 2]

1. Store latency (in-process core, memory backend, buffer 20, eviction batch
   5) with summarization off, and with Claude through the real SDK against a
   fake Messages API that takes ``--model-ms`` per call. Stores are paced
   (``--interval-ms``) so the worker folds while they run, as under real
   traffic. Rounds alternate the two modes so drift on a shared machine hits
   both; the figures are pooled. The
   target is a p50 and p99 ratio of at most 1.2: summarizing must not be on
   the store's path.
2. The offline (extractive) summarizer: time per evicted utterance, folding
   batches of 5 into a running summary of 512 tokens (wall time, and the
   process's CPU time, which other jobs on a shared machine inflate less).
3. ``fold_delay``: summarizer calls for one conversation's stores, paced
   (``--delay-interval-ms``) with buffer 4 and eviction batch 2, without a
   delay and with 0.5 s; the ratio of calls is the figure (every utterance
   must end up summarized either way).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from percentiles import percentile  # noqa: E402

from chd.core.history import ConversationHistory  # noqa: E402
from chd.core.settings import Settings  # noqa: E402
from chd.core.summaries.claude import ClaudeConfig, ClaudeSummarizer  # noqa: E402
from chd.core.summaries.extractive import ExtractiveSummarizer  # noqa: E402
from chd.core.summaries.segments import fold_into  # noqa: E402
from chd.core.summaries.summarizer import Summarized  # noqa: E402
from chd.core.summaries.writer import SummaryWriter  # noqa: E402
from chd.core.tokens import default_counter  # noqa: E402
from chd.core.utterance import Summary, Utterance  # noqa: E402
from tests.fake_anthropic import FakeAnthropic  # noqa: E402

COUNTER = default_counter()
_PEOPLE = ["Ada", "Bruno", "Chen", "Dana", "Emeka", "Fatima", "Goran", "Hana"]
_TOPICS = [
    "the Lisbon offsite",
    "the Q3 budget",
    "the data migration",
    "the hiring plan",
    "the client demo",
    "the security audit",
    "the pricing page",
    "the on-call rota",
]


def utterance_text(i: int) -> str:
    """A plausible, varied utterance of two or three sentences."""
    person, topic = _PEOPLE[i % len(_PEOPLE)], _TOPICS[(i * 3) % len(_TOPICS)]
    if i % 2 == 0:
        return (
            f"Can you check where we are with {topic}? {person} said the deadline moved to "
            f"day {i % 28 + 1} and the cost is now {1000 + i * 37} euros."
        )
    return (
        f"{person} confirmed {topic} is on track. We agreed to spend at most {900 + i * 41} euros "
        f"and to review it again in {i % 6 + 2} weeks. Nothing else is blocking."
    )


def store_round(
    history: ConversationHistory, stores: int, offset: int, interval: float = 0.0
) -> list[float]:
    timings = []
    for i in range(offset, offset + stores):
        if interval:
            time.sleep(interval)  # paced like traffic, so folds run while stores do
        speaker = "user" if i % 2 == 0 else "assistant"
        text = f"Add {speaker} utterance: {utterance_text(i)}"
        started = time.perf_counter()
        history.query(text, {"conversation_id": f"bench-{i % 4}"})
        timings.append(time.perf_counter() - started)
    return timings


def bench_store_latency(
    stores: int, model_ms: float, rounds: int, interval_ms: float
) -> dict[str, float]:
    with FakeAnthropic(
        reply=lambda body: "The team reviewed budgets and deadlines.", delay=model_ms / 1000
    ) as api:
        config = ClaudeConfig(api_key="bench", base_url=api.base_url, timeout=30, max_retries=0)
        writer = SummaryWriter(
            ClaudeSummarizer(config, COUNTER), COUNTER, ExtractiveSummarizer(COUNTER)
        )
        plain = ConversationHistory(settings=Settings(summarization_enabled=False))
        summarizing = ConversationHistory(settings=Settings(), writer=writer)
        store_round(plain, 50, 0)  # warm-up: imports, tiktoken caches, first HTTP connection
        store_round(summarizing, 50, 0)
        base: list[float] = []
        slow: list[float] = []
        for r in range(rounds):
            offset = 1000 + r * stores
            base += store_round(plain, stores, offset, interval_ms / 1000)
            slow += store_round(summarizing, stores, offset, interval_ms / 1000)
        folds = len(api.requests)
        summarizing.close()
        plain.close()
    out = {
        "stores_per_mode": len(base),
        "model_ms": model_ms,
        "model_calls": folds,
        "interval_ms": interval_ms,
        "no_summarizer_p50_ms": statistics.median(base) * 1000,
        "no_summarizer_p99_ms": percentile(base, 0.99) * 1000,
        "slow_model_p50_ms": statistics.median(slow) * 1000,
        "slow_model_p99_ms": percentile(slow, 0.99) * 1000,
    }
    out["p50_ratio"] = out["slow_model_p50_ms"] / out["no_summarizer_p50_ms"]
    out["p99_ratio"] = out["slow_model_p99_ms"] / out["no_summarizer_p99_ms"]
    return out


def bench_offline(batches: int) -> dict[str, float]:
    offline = ExtractiveSummarizer(COUNTER)

    def write(previous, utterances, limit, context=None):
        return Summarized(offline.summarize(previous, utterances, limit, context), offline.name)

    summary = Summary()
    per_utterance: list[float] = []
    cpu = 0.0
    seq = 1
    for _ in range(batches):
        batch = []
        for _ in range(5):
            text = utterance_text(seq)
            batch.append(
                Utterance(
                    "bench",
                    seq,
                    "user" if seq % 2 else "assistant",
                    text,
                    (seq + 1) // 2,
                    "t",
                    COUNTER.count(text),
                )
            )
            seq += 1
        started, started_cpu = time.perf_counter(), time.process_time()
        summary, _ = fold_into(
            summary, batch, limit=512, max_segments=4, write=write, counter=COUNTER
        )
        per_utterance.append((time.perf_counter() - started) / len(batch))
        cpu += time.process_time() - started_cpu
    return {
        "batches": batches,
        "offline_per_utterance_mean_ms": statistics.mean(per_utterance) * 1000,
        "offline_per_utterance_p99_ms": percentile(per_utterance, 0.99) * 1000,
        # CPU time of this process: what other jobs on a shared machine do not inflate.
        "offline_per_utterance_cpu_ms": cpu / (5 * batches) * 1000,
        "summary_tokens_after": summary.tokens,
    }


class _CountingSummarizer:
    """The offline summarizer, counting its calls."""

    def __init__(self, inner: ExtractiveSummarizer) -> None:
        self.inner, self.name, self.calls = inner, inner.name, 0

    def summarize(self, previous, utterances, token_limit: int) -> str:
        self.calls += 1
        return self.inner.summarize(previous, utterances, token_limit)


def bench_fold_delay(stores: int, interval_ms: float) -> dict[str, float]:
    calls: dict[float, int] = {}
    for delay in (0.0, 0.5):
        history = ConversationHistory(
            settings=Settings(buffer_size=4, eviction_batch=2, fold_delay=delay)
        )
        counted = _CountingSummarizer(history.offline)
        history.writer.primary = counted
        try:
            for i in range(stores):
                history.query(f"Add utterance: {utterance_text(i)}")
                time.sleep(
                    interval_ms / 1000
                )  # a conversation's pace: each fold has time to finish
            assert history.worker is not None and history.worker.idle(30)
            state = history.backend.read("default")
            assert state.pending == [], "every evicted utterance is summarized"
            calls[delay] = counted.calls
        finally:
            history.close()
    return {
        "delay_stores": stores,
        "delay_interval_ms": interval_ms,
        "calls_without_delay": calls[0.0],
        "calls_with_delay_0_5s": calls[0.5],
        "delay_call_ratio": calls[0.5] / calls[0.0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", type=int, default=600, help="stores per mode per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model-ms", type=float, default=300.0, help="fake model latency per call")
    parser.add_argument(
        "--interval-ms", type=float, default=2.0, help="pause between stores (0: flat out)"
    )
    parser.add_argument("--batches", type=int, default=200, help="offline fold batches of 5")
    parser.add_argument(
        "--delay-stores", type=int, default=44, help="stores of the fold_delay comparison"
    )
    parser.add_argument(
        "--delay-interval-ms", type=float, default=20.0, help="pause between those stores"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = (
        bench_store_latency(args.stores, args.model_ms, args.rounds, args.interval_ms)
        | bench_offline(args.batches)
        | bench_fold_delay(args.delay_stores, args.delay_interval_ms)
    )
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    r = results
    print(
        f"store latency, {r['stores_per_mode']} stores per mode, one every {r['interval_ms']:g} ms, "
        f"fake model {r['model_ms']:.0f} ms ({r['model_calls']} model calls)"
    )
    print(
        f"  no summarizer : p50 {r['no_summarizer_p50_ms']:.3f} ms   p99 {r['no_summarizer_p99_ms']:.3f} ms"
    )
    print(
        f"  slow model    : p50 {r['slow_model_p50_ms']:.3f} ms   p99 {r['slow_model_p99_ms']:.3f} ms"
    )
    print(
        f"  ratio         : p50 {r['p50_ratio']:.2f}   p99 {r['p99_ratio']:.2f}   (target <= 1.2)"
    )
    print(f"offline summarizer, {r['batches']} batches of 5 into a 512-token summary")
    print(
        f"  per evicted utterance: mean {r['offline_per_utterance_mean_ms']:.3f} ms   "
        f"p99 {r['offline_per_utterance_p99_ms']:.3f} ms   CPU mean {r['offline_per_utterance_cpu_ms']:.3f} ms"
    )
    print(
        f"fold_delay, {r['delay_stores']} stores one every {r['delay_interval_ms']:g} ms (buffer 4, batch 2)"
    )
    print(
        f"  summarizer calls: {r['calls_without_delay']} without a delay, {r['calls_with_delay_0_5s']} with 0.5 s"
        f"   ratio {r['delay_call_ratio']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
