"""LoCoMo recall of topic search: chd against bm25s and recency in the same run.

    python bench/bench_locomo.py PATH [--mode buffer|archive] [--conversations 1-5]
    CHD_LOCOMO=PATH python bench/bench_locomo.py

PATH is the public LoCoMo data (snap-research/locomo, never committed here):
``data/locomo10.json`` (a list of ten samples), or the repository's older
``data/locomo10.zip`` / its unpacked ``locomo10_v2`` folder (one JSON file per
conversation, same content). docs/search.md says how to get it.

Every turn of a conversation is stored through the core
(``ConversationHistory.query`` with ``data.operation``, as the gRPC servicer
calls it) as "<Name>: <text>", the first speaker as ``user`` and the second
as ``assistant``. Each question of categories 1-4 is then asked as a topic
search; recall@k is the share of the question's evidence turns among the
top k hits, averaged over questions. Questions whose evidence names no turn
of the conversation are skipped (4 of 1,540: ids
of turns that do not exist).

``--embedder wordllama`` runs chd with hybrid search (daemon/core/memory/
hybrid.py) on the static model the wordllama package ships.

``--mode buffer`` keeps every turn in the buffer; ``--mode archive`` uses
the default buffer of 20 with ``archive_evicted`` (summaries off), so most
evidence lives in the archive and one topic search must reach it there.

Baselines in the same run, on the same texts: bm25s (BM25, English
stopwords, Snowball stemmer; needs the test extra) and recency (the newest
k turns). Tune on conversations 1-5 only; 6-10 are the held-out figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import zipfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chd.core.history import ConversationHistory  # noqa: E402
from chd.core.settings import Settings  # noqa: E402

KS = (1, 5, 10)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
# LoCoMo's own category numbers: 1 multi-hop, 2 temporal, 3 open-domain,
# 4 single-hop, 5 adversarial (no answer in the conversation; left out).


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    session_time: str


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    name: str
    speakers: tuple[str, str]
    turns: list[Turn]
    questions: list[Question]


def _number(name: str) -> int:
    found = re.findall(r"\d+", name)
    return int(found[-1]) if found else 0


def _samples(path: Path) -> list[dict[str, Any]]:
    """Each conversation as {"name", "conversation", "qa"}, in LoCoMo's order (by sample number)."""
    if path.is_dir():
        files = sorted(path.rglob("*.json"), key=lambda p: _number(p.stem))
        raw = [(p.stem, json.loads(p.read_text())) for p in files]
    elif path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            names = sorted(
                (n for n in archive.namelist() if n.endswith(".json")),
                key=lambda n: _number(Path(n).stem),
            )
            raw = [(Path(n).stem, json.loads(archive.read(n))) for n in names]
    else:
        data = json.loads(path.read_text())
        raw = [(str(s.get("sample_id", i)), s) for i, s in enumerate(data)]
    samples = []
    for name, sample in raw:
        if "conversation" in sample:  # locomo10.json
            samples.append(
                {"name": name, "conversation": sample["conversation"], "qa": sample["qa"]}
            )
        else:  # locomo10_v2: the conversation's keys at the top level
            samples.append({"name": f"conv-{name}", "conversation": sample, "qa": sample["qa"]})
    return samples


def _evidence(raw: Sequence[str]) -> tuple[str, ...]:
    """Turn ids as the conversation spells them: a few entries hold several
    ("D8:6; D9:17") or stray spellings ("D:11:26", "D30:05")."""
    return tuple(f"D{s}:{int(t)}" for entry in raw for s, t in re.findall(r"D:?(\d+):(\d+)", entry))


def load(path: Path) -> list[Conversation]:
    conversations = []
    for sample in _samples(path):
        c = sample["conversation"]
        sessions = sorted(
            (k for k in c if re.fullmatch(r"session_\d+", k) and c[k]),
            key=lambda k: int(k.split("_")[1]),
        )
        turns = [
            Turn(t["dia_id"], t["speaker"], t["text"], c.get(f"{k}_date_time", ""))
            for k in sessions
            for t in c[k]
        ]
        questions = [
            Question(q["question"], q["category"], _evidence(q.get("evidence", ())))
            for q in sample["qa"]
            if q.get("category") in CATEGORIES
        ]
        conversations.append(
            Conversation(sample["name"], (c["speaker_a"], c["speaker_b"]), turns, questions)
        )
    return conversations


def _stored_text(turn: Turn) -> str:
    return f"{turn.speaker}: {turn.text}"


# --- the systems ranked ----------------------------------------------------------

Ranker = Callable[[str, int], list[str]]  # question, k -> dia_ids best first


def chd_ranker(
    conversation: Conversation, mode: str, embedder: Any = None
) -> tuple[Ranker, dict[str, float]]:
    size = len(conversation.turns) + 10
    if mode == "buffer":
        settings = Settings(buffer_size=size, max_tokens=10_000_000, summarization_enabled=False)
    else:
        settings = Settings(summarization_enabled=False, archive_evicted=True)
    history = ConversationHistory(settings=settings, background=False, embedder=embedder)
    cid = conversation.name
    by_seq: dict[int, str] = {}
    user = conversation.speakers[0]
    start = time.perf_counter()
    for turn in conversation.turns:
        speaker = "user" if turn.speaker == user else "assistant"
        result = history.query(
            "",
            {"conversation_id": cid, "speaker": speaker},
            {"operation": "store", "text": _stored_text(turn)},
        )
        by_seq[result.result["utterance"]["seq"]] = turn.dia_id
    store_seconds = time.perf_counter() - start
    timings: list[float] = []

    def rank(question: str, k: int) -> list[str]:
        began = time.perf_counter()
        result = history.query(
            "", {"conversation_id": cid}, {"operation": "retrieve", "topic": question, "limit": k}
        )
        timings.append(time.perf_counter() - began)
        return [by_seq[u["seq"]] for u in result.result["utterances"] if u.get("seq") in by_seq]

    stats = {"store_seconds": store_seconds, "timings": timings}  # type: ignore[dict-item]
    return rank, stats  # type: ignore[return-value]


def bm25s_ranker(conversation: Conversation) -> Ranker | None:
    try:
        import bm25s
        import Stemmer
    except ImportError:
        return None
    stemmer = Stemmer.Stemmer("english")
    corpus = [_stored_text(t) for t in conversation.turns]
    ids = [t.dia_id for t in conversation.turns]
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )

    def rank(question: str, k: int) -> list[str]:
        tokens = bm25s.tokenize([question], stopwords="en", stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            return []
        results, scores = retriever.retrieve(tokens, k=min(k, len(corpus)), show_progress=False)
        return [ids[i] for i, s in zip(results[0], scores[0]) if s > 0]

    return rank


def recency_ranker(conversation: Conversation) -> Ranker:
    newest = [t.dia_id for t in reversed(conversation.turns)]
    return lambda question, k: newest[:k]


# --- scoring ------------------------------------------------------------------------


def recall(ranker: Ranker, conversation: Conversation) -> dict[int, list[tuple[int, float]]]:
    """Per k: (category, recall) of every question whose evidence is in the conversation."""
    known = {t.dia_id for t in conversation.turns}
    out: dict[int, list[tuple[int, float]]] = {k: [] for k in KS}
    for q in conversation.questions:
        evidence = {e for e in q.evidence if e in known}
        if not evidence:
            continue
        ranked = ranker(q.text, max(KS))
        for k in KS:
            out[k].append((q.category, len(evidence & set(ranked[:k])) / len(evidence)))
    return out


def _parse_range(text: str, count: int) -> list[int]:
    chosen: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        chosen.update(range(int(low), int(high or low) + 1))
    return [i for i in sorted(chosen) if 1 <= i <= count]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "path", nargs="?", default=os.environ.get("CHD_LOCOMO"), help="LoCoMo data (or CHD_LOCOMO)"
    )
    parser.add_argument("--mode", choices=("buffer", "archive"), default="buffer")
    parser.add_argument(
        "--conversations", default="1-10", help="which of the ten, e.g. 1-5 or 6-10"
    )
    parser.add_argument(
        "--no-baselines", action="store_true", help="chd only (faster while tuning)"
    )
    parser.add_argument(
        "--embedder",
        choices=("none", "wordllama"),
        default="none",
        help="hybrid search with the wordllama package's shipped model (pip install wordllama)",
    )
    args = parser.parse_args(argv)
    if not args.path:
        parser.error("give the LoCoMo data's path (or set CHD_LOCOMO); see docs/search.md")
    conversations = load(Path(args.path))
    chosen = _parse_range(args.conversations, len(conversations))
    groups = {
        "1-5": [i for i in chosen if i <= 5],
        "6-10": [i for i in chosen if i > 5],
        "all": chosen,
    }
    systems = ["chd"] + ([] if args.no_baselines else ["bm25s", "recency"])
    # system -> conversation number -> k -> [(category, recall)]
    results: dict[str, dict[int, dict[int, list[tuple[int, float]]]]] = defaultdict(dict)
    timings: list[float] = []
    stores = 0.0
    embedder = None
    if args.embedder == "wordllama":
        from chd.core.memory.embedder import WordLlamaEmbedder

        embedder = WordLlamaEmbedder()
    for number in chosen:
        conversation = conversations[number - 1]
        rank, stats = chd_ranker(conversation, args.mode, embedder)
        results["chd"][number] = recall(rank, conversation)
        timings += stats["timings"]  # type: ignore[arg-type]
        stores += stats["store_seconds"]
        if "bm25s" in systems:
            ranker = bm25s_ranker(conversation)
            if ranker is None:
                systems.remove("bm25s")
                print(
                    "bm25s or PyStemmer not installed (pip install -e '.[test]'): left out",
                    file=sys.stderr,
                )
            else:
                results["bm25s"][number] = recall(ranker, conversation)
        if "recency" in systems:
            results["recency"][number] = recall(recency_ranker(conversation), conversation)
    questions = sum(len(results["chd"][n][1]) for n in chosen)
    turns = sum(len(conversations[n - 1].turns) for n in chosen)
    print(
        f"LoCoMo: conversations {args.conversations}, {turns} turns, {questions} questions (categories 1-4), "
        f"mode {args.mode}, embedder {args.embedder}"
    )
    print(
        f"chd: {turns} stores in {stores:.1f} s; topic search p50 {statistics.median(timings) * 1e3:.2f} ms"
    )
    print()
    print(
        f"{'system':<8} {'convs':<6} "
        + " ".join(f"{'R@' + str(k):>6}" for k in KS)
        + "   "
        + " ".join(f"{name[:11]:>11}" for name in CATEGORIES.values())
        + "  (R@10)"
    )
    for system in systems:
        for label, numbers in groups.items():
            if not numbers:
                continue
            row = []
            for k in KS:
                values = [r for n in numbers for _, r in results[system][n][k]]
                row.append(f"{statistics.fmean(values):>6.3f}")
            by_category = []
            for category in CATEGORIES:
                values = [r for n in numbers for c, r in results[system][n][10] if c == category]
                by_category.append(f"{statistics.fmean(values):>11.3f}" if values else f"{'-':>11}")
            print(f"{system:<8} {label:<6} " + " ".join(row) + "   " + " ".join(by_category))


if __name__ == "__main__":
    main()
