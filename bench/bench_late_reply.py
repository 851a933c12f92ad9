"""How soon the summary is current with a slow Claude, with and without late replies (issue 13).

    python bench/bench_late_reply.py [--model-s 2.0] [--wait-s 0.3]

The real anthropic SDK against tests/fake_anthropic.py answering every call
after ``--model-s`` seconds. Five stores evict two utterances; the background
worker folds them. Without late replies (the baseline, measured in the same
run) the worker waits for Claude to the end; with ``--summarizer-wait``
``--wait-s`` it folds offline after that long and Claude's late reply
replaces the offline text. Reported: when the summary first holds the
evicted utterances, when it holds Claude's text, the ratio of the first to
the baseline, and the calls made (one in both: the late reply is the
rewrite).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chd.core.history import ConversationHistory  # noqa: E402
from chd.core.language.intents import StoreIntent  # noqa: E402
from chd.core.settings import Settings  # noqa: E402
from chd.core.summaries.claude import ClaudeConfig, ClaudeSummarizer  # noqa: E402
from chd.core.summaries.extractive import ExtractiveSummarizer  # noqa: E402
from chd.core.summaries.writer import SummaryWriter  # noqa: E402
from chd.core.tokens import default_counter  # noqa: E402
from tests.fake_anthropic import FakeAnthropic  # noqa: E402

COUNTER = default_counter()


def run(model_s: float, late_after: float | None) -> dict[str, float]:
    """Seconds from the first store until the summary has content, and until it has Claude's text."""
    with FakeAnthropic(
        reply=lambda body: "<fact>Claude kept the parcels.</fact>", delay=model_s
    ) as api:
        claude = ClaudeSummarizer(
            ClaudeConfig(
                api_key="sk-bench", base_url=api.base_url, timeout=model_s * 5, max_retries=0
            ),
            COUNTER,
        )
        writer = SummaryWriter(
            claude, COUNTER, ExtractiveSummarizer(COUNTER), attempts=1, late_after=late_after
        )
        history = ConversationHistory(
            settings=Settings(buffer_size=4, eviction_batch=2, fold_delay=0), writer=writer
        )
        try:
            start = time.monotonic()
            for i in range(5):
                history.execute(
                    StoreIntent(f"Parcel K{i:03d}W goes to locker {i * 7 + 3}.", "user"), "bench"
                )
            current = by_claude = None
            while by_claude is None and time.monotonic() - start < model_s * 10:
                segments = history.backend.read("bench").summary.segments
                if segments and current is None:
                    current = time.monotonic() - start
                if segments and all(s.made_by == claude.name for s in segments):
                    by_claude = time.monotonic() - start
                time.sleep(0.005)
            if current is None or by_claude is None:
                raise SystemExit("the summary never became current")
            return {"current_s": current, "claude_s": by_claude, "calls": len(api.requests)}
        finally:
            history.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model-s", type=float, default=2.0, help="seconds the fake model takes per call"
    )
    parser.add_argument(
        "--wait-s", type=float, default=0.3, help="--summarizer-wait of the late-reply run"
    )
    args = parser.parse_args()
    baseline = run(args.model_s, None)
    late = run(args.model_s, args.wait_s)
    print(f"slow model {args.model_s:g} s per call, 2 evicted utterances")
    print(
        f"  waited to the end  : current after {baseline['current_s']:.2f} s, Claude's text after "
        f"{baseline['claude_s']:.2f} s, {baseline['calls']:g} call(s)"
    )
    print(
        f"  late reply ({args.wait_s:g} s): current after {late['current_s']:.2f} s, Claude's text after "
        f"{late['claude_s']:.2f} s, {late['calls']:g} call(s)"
    )
    print(
        f"  time to a current summary, late / waited: {late['current_s'] / baseline['current_s']:.2f}"
    )


if __name__ == "__main__":
    main()
