"""Benchmark: how many LoCoMo answers are still in the running summary?

    python bench/bench_locomo_summary.py PATH [--limits 512,2048] [--conversations 1-5] [--json]
    CHD_LOCOMO=PATH python bench/bench_locomo_summary.py

LoCoMo (snap-research/locomo, Maharana et al. 2024) is ten public
conversations of about 600 turns between two people over many sessions,
with question–answer pairs. The data is not committed here; PATH is either
``data/locomo10.json`` of https://github.com/snap-research/locomo or the
``data/locomo10.zip`` of its earlier snapshot (the same ten conversations,
one file each), for example::

    git clone https://github.com/snap-research/locomo /tmp/locomo
    python bench/bench_locomo_summary.py /tmp/locomo/data/locomo10.json

Each conversation is stored into an in-process core with the offline
summarizer and the default buffer (20 utterances, evictions of 5, folded
as they happen): a session opens with a system utterance giving its date
("Session 3, 7:55 pm on 9 June, 2023"), and every turn is a ``user``
utterance ``Name: text`` (a shared photo adds its caption), the way a
multi-party transcript reaches chd. Then "Get summary" is read.

An answer is **in** a text when all its words (lower case, less a few
function words: "the", "a", "of", "in"...) occur in the text as words. The
bench reports, per summary limit, the share of answers in the summary,
beside the **ceiling** (answers in the whole conversation's text) and the
**truncation baseline** (answers in its last ``limit`` tokens). Questions
without an answer (LoCoMo's adversarial category 5) are left out.

Tune on conversations 1–5 only; 6–10 are reported separately.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chd.core.history import ConversationHistory  # noqa: E402
from chd.core.language.intents import StoreIntent  # noqa: E402
from chd.core.settings import Settings  # noqa: E402
from chd.core.tokens import default_counter  # noqa: E402

__all__ = ["load", "turns_of", "answer_words", "answered", "measure"]

COUNTER = default_counter()
_WORD = re.compile(r"\w+")
_FUNCTION_WORDS = frozenset(
    "a an the of in on at to for and or by with from is was were be her his their its my your".split()
)


def load(path: str) -> list[dict]:
    """The ten samples, in the order of locomo10.json (conv-26, conv-30, …)."""
    if path.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            names = sorted(
                (n for n in z.namelist() if n.endswith(".json")), key=lambda n: int(Path(n).stem)
            )
            samples = []
            for name in names:
                data = json.loads(z.read(name))
                samples.append({"conversation": data, "qa": data.get("qa", [])})
            return samples
    return json.loads(Path(path).read_text(encoding="utf-8"))


def turns_of(sample: dict) -> list[tuple[str, str]]:
    """(speaker, text) of every utterance to store, sessions in order."""
    conv = sample["conversation"]
    sessions = sorted(
        (int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k) and conv[k]),
    )
    out: list[tuple[str, str]] = []
    for n in sessions:
        when = conv.get(f"session_{n}_date_time")
        if when:
            out.append(("system", f"Session {n}, {when}."))
        for turn in conv[f"session_{n}"]:
            text = turn["text"]
            if turn.get("blip_caption"):
                text = f"{text} [shares {turn['blip_caption']}]"
            out.append(("user", f"{turn['speaker']}: {text}"))
    return out


def answer_words(answer: object) -> frozenset[str]:
    """The words of an answer that must all be present: lower case, function words aside."""
    return frozenset(w for w in _WORD.findall(str(answer).lower()) if w not in _FUNCTION_WORDS)


def answered(words: frozenset[str], text_words: frozenset[str]) -> bool:
    return bool(words) and words <= text_words


def _words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


def _tail(text: str, limit: int) -> str:
    """The last ``limit`` tokens of ``text``, whole lines first."""
    lines = text.split("\n")
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        cost = COUNTER.count(line) + 1
        if used + cost > limit:
            break
        kept.append(line)
        used += cost
    return "\n".join(reversed(kept))


def measure(sample: dict, limits: list[int]) -> dict[str, object]:
    """Answers in the summary at each limit, the ceiling and the truncation baseline."""
    turns = turns_of(sample)
    full = "\n".join(
        f"{speaker}: {text}" if speaker == "system" else text for speaker, text in turns
    )
    questions = [answer_words(q["answer"]) for q in sample["qa"] if "answer" in q]
    questions = [q for q in questions if q]
    full_words = _words(full)
    row: dict[str, object] = {
        "turns": len(turns),
        "questions": len(questions),
        "ceiling": sum(answered(q, full_words) for q in questions) / len(questions),
    }
    for limit in limits:
        history = ConversationHistory(
            settings=Settings(summary_token_limit=limit), background=False
        )
        try:
            for speaker, text in turns:
                history.execute(StoreIntent(text, speaker), "default")  # type: ignore[arg-type]
            summary = history.get_summary()
        finally:
            history.close()
        text = summary["summary"]
        assert summary["summary_tokens"] <= limit
        summary_words = _words(text)
        tail_words = _words(_tail(full, limit))
        row[f"summary_{limit}"] = sum(answered(q, summary_words) for q in questions) / len(
            questions
        )
        row[f"tail_{limit}"] = sum(answered(q, tail_words) for q in questions) / len(questions)
        row[f"tokens_{limit}"] = summary["summary_tokens"]
    return row


def _span(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=os.environ.get("CHD_LOCOMO"))
    parser.add_argument("--limits", default="512,2048")
    parser.add_argument(
        "--conversations", default="1-5,6-10", help="groups reported apart, 1-based"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.path:
        parser.error(
            "give the path of locomo10.json (or locomo10.zip), or set CHD_LOCOMO; see the docstring"
        )
    samples = load(args.path)
    limits = [int(x) for x in args.limits.split(",")]
    groups = [_span(g) for g in args.conversations.split(",")]
    rows = {n: measure(samples[n - 1], limits) for g in groups for n in g}
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    head = f"{'conv':>5} {'turns':>5} {'qs':>4} {'ceiling':>7}"
    for limit in limits:
        head += f" {'sum ' + str(limit):>9} {'tail ' + str(limit):>9}"
    print(head)
    for group in groups:
        for n in group:
            r = rows[n]
            line = f"{n:>5} {r['turns']:>5} {r['questions']:>4} {r['ceiling']:>7.1%}"
            for limit in limits:
                line += f" {r[f'summary_{limit}']:>9.1%} {r[f'tail_{limit}']:>9.1%}"
            print(line)
        qs = sum(rows[n]["questions"] for n in group)  # type: ignore[misc]

        def pooled(key: str) -> float:
            return sum(rows[n][key] * rows[n]["questions"] for n in group) / qs  # type: ignore[operator]

        line = (
            f"{str(group[0]) + '-' + str(group[-1]):>5} {'':>5} {qs:>4} {pooled('ceiling'):>7.1%}"
        )
        for limit in limits:
            line += f" {pooled(f'summary_{limit}'):>9.1%} {pooled(f'tail_{limit}'):>9.1%}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
