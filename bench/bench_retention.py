"""Benchmark: how much of what was said survives in the running summary?

    python bench/bench_retention.py [--sizes 20,100,500] [--limits 128,512,2048] [--json]
    python bench/bench_retention.py --blind [--pairs 20/512,100/512,500/2048,500/512,100/128]

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

With ``--blind`` the scenarios are the conversations written blind
(bench/blind_conversations/*.jsonl, frozen before issue 26 changed the
summarizer): the facts are the ones their writers marked, less any value a
later utterance corrects. They are the *reported* set: the bench prints
aggregate figures only, never which fact was missed, so nobody tunes on
them. Besides kept and bound, it prints (bench/summary_measures.py):

* anchored: the share of kept facts whose anchor (what the fact is about,
  marked by the writer) is in the same item (items: lines split on "; ");
* truncated: facts with a unit or scale word whose number the summary
  holds without it ("USD 5" for "USD 5 million");
* unbalanced: items with an unclosed bracket or quote;
* corrections marked: of the corrected pairs with both values in the
  summary, the share whose old value is marked superseded ("(was …)").

Deterministic: same code, same figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from retention_conversations import SCENARIOS, Said, utterances  # noqa: E402
from summary_measures import anchored, corrections_marked, items_of, truncated, unbalanced  # noqa: E402

from chd.core.history import ConversationHistory  # noqa: E402
from chd.core.language.intents import StoreIntent  # noqa: E402
from chd.core.settings import Settings  # noqa: E402
from chd.core.tokens import TokenCounter, default_counter  # noqa: E402

__all__ = ["retention", "bare_list_bound", "facts_by_third", "said_in", "blind", "BLIND"]

COUNTER = default_counter()
BLIND_DIR = ROOT / "bench" / "blind_conversations"
BLIND = sorted(p.stem for p in BLIND_DIR.glob("*.jsonl"))


class Blind(NamedTuple):
    """A conversation written blind: its utterances, each fact's anchor, the corrected pairs."""

    said: list[Said]
    anchors: dict[str, str]
    corrections: list[tuple[int, str, str]]  # (index of the correcting utterance, old, new)


@functools.cache
def blind(name: str) -> Blind:
    """Load ``bench/blind_conversations/<name>.jsonl``: facts are the marked ones less superseded values."""
    rows = [
        json.loads(line)
        for line in (BLIND_DIR / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    superseded = {value for row in rows for value in row.get("superseded", ())}
    said: list[Said] = []
    anchors: dict[str, str] = {}
    corrections: list[tuple[int, str, str]] = []
    for i, row in enumerate(rows):
        facts = tuple(f["fact"] for f in row.get("facts", ()) if f["fact"] not in superseded)
        for f in row.get("facts", ()):
            anchors.setdefault(f["fact"], f["anchor"])
        for c in row.get("corrects", ()):
            corrections.append((i, c["old"], c["new"]))
        said.append(Said(row["speaker"], row["text"], facts))
    return Blind(said, anchors, corrections)


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
        conversation = blind(scenario) if scenario in BLIND else None
        said = (
            conversation.said if conversation else utterances(scenario, evicted + buffer_size + 10)
        )
        stored = 0
        while (
            history.backend.read("default").summary.through_seq < evicted
            or history.backend.read("default").pending
        ):
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
    } | _readability(text, facts, through, conversation)


def _readability(
    text: str, facts: list[str], through: int, conversation: Blind | None
) -> dict[str, object]:
    """Anchored, truncated, unbalanced and corrections marked (anchors and corrections: blind only)."""
    items = items_of(text)
    out: dict[str, object] = {
        "items": len(items),
        # A fact list's group ("Oakhurst, USD 9,800") is read piece by piece: a cut
        # number before ", " is as cut as one before "; ".
        "truncated": truncated(
            facts,
            text,
            [p for item in items for p in item.split(", ")],
            [item for item in items for _ in item.split(", ")],
        ),
        "unbalanced": unbalanced(items),
    }
    if conversation is None:
        return out
    kept = [(f, conversation.anchors[f]) for f in facts if said_in(f, text)]
    out["anchored"] = round(anchored(kept, items) / len(kept), 4) if kept else 1.0
    pairs = [(old, new) for i, old, new in conversation.corrections if i < through]
    both, marked = corrections_marked(pairs, text, items)
    out["corrections_both"] = both
    out["corrections_marked"] = marked
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20,100,500", help="evicted utterances, comma-separated")
    parser.add_argument(
        "--limits", default="128,512,2048", help="summary token limits, comma-separated"
    )
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--blind", action="store_true", help="the conversations written blind (the reported set)"
    )
    parser.add_argument(
        "--pairs",
        default="",
        help="evicted/limit pairs instead of sizes x limits, e.g. 100/512,500/2048",
    )
    args = parser.parse_args()
    scenarios = BLIND if args.blind else args.scenarios.split(",")
    if args.blind and not args.pairs:
        args.pairs = "20/512,100/512,500/2048,500/512,100/128"
    pairs = (
        [tuple(int(x) for x in p.split("/")) for p in args.pairs.split(",")]
        if args.pairs
        else [(int(s), int(lim)) for s in args.sizes.split(",") for lim in args.limits.split(",")]
    )
    rows = [retention(scenario, size, limit) for size, limit in pairs for scenario in scenarios]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"{'scenario':16} {'evicted':>7} {'limit':>5} {'facts':>5} {'kept':>6} "
        f"{'oldest':>6} {'middle':>6} {'newest':>6} {'tokens':>6} {'bound':>6} {'of bound':>8} "
        f"{'anchored':>8} {'trunc':>5} {'unbal':>5} {'items':>5} {'corr marked':>11}"
    )
    for r in rows:
        thirds = r["thirds"]
        assert isinstance(thirds, list)
        anchored_share = f"{r['anchored']:.0%}" if "anchored" in r else "-"
        corr = (
            f"{r['corrections_marked']}/{r['corrections_both']}" if "corrections_both" in r else "-"
        )
        print(
            f"{r['scenario']:16} {r['evicted']:>7} {r['limit']:>5} {r['facts']:>5} {r['kept']:>6.0%} "
            f"{thirds[0]:>6.0%} {thirds[1]:>6.0%} {thirds[2]:>6.0%} {r['tokens']:>6} "
            f"{r['bound']:>6.0%} {r['of_bound']:>8.0%} {anchored_share:>8} {r['truncated']:>5} "
            f"{r['unbalanced']:>5} {r['items']:>5} {corr:>11}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
