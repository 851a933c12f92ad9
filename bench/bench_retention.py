"""Benchmark: how much of what was said survives in the running summary?

    python bench/bench_retention.py [--sizes 20,100,500] [--limits 128,512,2048] [--json]

Hand-written conversations (bench/retention_conversations.py: trip planning,
a coding session, support cases, each with corrections) are stored into an
in-process core with the offline summarizer and the default buffer (20
utterances, evictions of 5, folded as they happen) until ``size`` utterances
were evicted. Then "Get summary" is read and each fact of the evicted
utterances (names, numbers, dates, codes, decisions, marked in the text) is
looked up verbatim in it.

Reported per scenario, size and summary limit:

* kept: the share of the evicted utterances' distinct facts found in the
  summary, and the same by thirds of the evicted range (oldest, middle,
  newest; a fact belongs to the third where it was first said);
* tokens: the summary's size against its limit;
* bound: the share of facts that would fit in the limit as a bare list
  ("a; b; c", cheapest first), what any summary of that size could keep at
  most, and kept / bound.

Deterministic: same code, same figures.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chd.core.history import ConversationHistory  # noqa: E402
from chd.core.language.intents import StoreIntent  # noqa: E402
from chd.core.settings import Settings  # noqa: E402
from chd.core.tokens import TokenCounter, default_counter  # noqa: E402
from retention_conversations import SCENARIOS, Said, utterances  # noqa: E402

__all__ = ["retention", "bare_list_bound", "facts_by_third", "said_in"]

COUNTER = default_counter()


def facts_by_third(evicted: list[Said]) -> list[list[str]]:
    """The distinct facts of ``evicted``, each in the third where it was first said."""
    thirds: list[list[str]] = [[], [], []]
    seen: set[str] = set()
    for i, said in enumerate(evicted):
        for fact in said.facts:
            if fact not in seen:
                seen.add(fact)
                thirds[min(2, 3 * i // len(evicted))].append(fact)
    return thirds


def said_in(fact: str, text: str) -> bool:
    """Whether ``fact`` occurs verbatim in ``text`` as whole words ("March 3" is not in "March 31")."""
    return re.search(rf"(?<![\w-]){re.escape(fact)}(?![\w-])", text) is not None


def bare_list_bound(facts: list[str], limit: int, counter: TokenCounter) -> float:
    """The share of ``facts`` that fit in ``limit`` tokens as "a; b; c", cheapest first."""
    costs = sorted(counter.count(f) + 1 for f in facts)  # one token for "; "
    used = fitted = 0
    for cost in costs:
        if used + cost > limit:
            break
        used += cost
        fitted += 1
    return fitted / len(facts) if facts else 1.0


def retention(scenario: str, evicted: int, limit: int, buffer_size: int = 20) -> dict[str, object]:
    """Store ``scenario`` until ``evicted`` utterances left the buffer; what the summary kept."""
    history = ConversationHistory(
        settings=Settings(summary_token_limit=limit, buffer_size=buffer_size), background=False
    )
    try:
        said = utterances(scenario, evicted + buffer_size + 10)
        stored = 0
        while history.backend.read("default").summary.through_seq < evicted or history.backend.read(
            "default"
        ).pending:
            line = said[stored]
            history.execute(StoreIntent(line.text, line.speaker), "default")  # type: ignore[arg-type]
            stored += 1
        summary = history.get_summary()
    finally:
        history.close()
    text = summary["summary"]
    through = summary["summary_through_seq"]
    thirds = facts_by_third(said[:through])
    kept = [sum(1 for f in third if said_in(f, text)) for third in thirds]
    facts = [f for third in thirds for f in third]
    bound = bare_list_bound(facts, limit, COUNTER)
    share = sum(kept) / len(facts) if facts else 1.0
    return {
        "scenario": scenario,
        "evicted": through,
        "limit": limit,
        "facts": len(facts),
        "kept": round(share, 4),
        "thirds": [round(k / len(t), 4) if t else 1.0 for k, t in zip(kept, thirds)],
        "tokens": summary["summary_tokens"],
        "bound": round(bound, 4),
        "of_bound": round(share / bound, 4) if bound else 1.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20,100,500", help="evicted utterances, comma-separated")
    parser.add_argument("--limits", default="128,512,2048", help="summary token limits, comma-separated")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [
        retention(scenario, int(size), int(limit))
        for size in args.sizes.split(",")
        for limit in args.limits.split(",")
        for scenario in args.scenarios.split(",")
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'scenario':9} {'evicted':>7} {'limit':>5} {'facts':>5} {'kept':>6} "
          f"{'oldest':>6} {'middle':>6} {'newest':>6} {'tokens':>6} {'bound':>6} {'of bound':>8}")
    for r in rows:
        thirds = r["thirds"]
        assert isinstance(thirds, list)
        print(f"{r['scenario']:9} {r['evicted']:>7} {r['limit']:>5} {r['facts']:>5} {r['kept']:>6.0%} "
              f"{thirds[0]:>6.0%} {thirds[1]:>6.0%} {thirds[2]:>6.0%} {r['tokens']:>6} "
              f"{r['bound']:>6.0%} {r['of_bound']:>8.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
