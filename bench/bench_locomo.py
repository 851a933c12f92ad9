"""LoCoMo recall of topic search: chd against bm25s and recency in the same run.

    python bench/bench_locomo.py PATH [--mode buffer|archive] [--conversations 1-5]
                                      [--against REV [--rounds 3]]
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

``--against REV`` runs chd from git revision REV too, in child processes
alternating with this checkout's: recall of both in the same run, and store
time and topic search p50 as the median of each round's ratio (this / REV).

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
import subprocess
import sys
import tempfile
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


Row = list[float | None]  # R@1, R@5, R@10, then R@10 per category (None: no question)


def _rows(
    results: dict[str, dict[int, dict[int, list[tuple[int, float]]]]],
    systems: list[str],
    groups: dict[str, list[int]],
) -> dict[str, dict[str, Row]]:
    """system -> group of conversations -> its row of averages."""
    out: dict[str, dict[str, Row]] = {}
    for system in systems:
        for label, numbers in groups.items():
            if not numbers:
                continue
            row: Row = []
            for k in KS:
                row.append(statistics.fmean(r for n in numbers for _, r in results[system][n][k]))
            for category in CATEGORIES:
                values = [r for n in numbers for c, r in results[system][n][10] if c == category]
                row.append(statistics.fmean(values) if values else None)
            out.setdefault(system, {})[label] = row
    return out


def _print_rows(rows: dict[str, dict[str, Row]]) -> None:
    print(
        f"{'system':<12} {'convs':<6} "
        + " ".join(f"{'R@' + str(k):>6}" for k in KS)
        + "   "
        + " ".join(f"{name[:11]:>11}" for name in CATEGORIES.values())
        + "  (R@10)"
    )
    for system, by_group in rows.items():
        for label, row in by_group.items():
            cells = [f"{v:>6.3f}" for v in row[: len(KS)]]
            cells.append("  ")
            cells += [f"{v:>11.3f}" if v is not None else f"{'-':>11}" for v in row[len(KS) :]]
            print(f"{system:<12} {label:<6} " + " ".join(cells))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every chosen conversation stored and asked; the rows, store seconds and search p50."""
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
    return {
        "rows": _rows(results, systems, groups),
        "questions": sum(len(results["chd"][n][1]) for n in chosen),
        "turns": sum(len(conversations[n - 1].turns) for n in chosen),
        "store_seconds": stores,
        "search_p50": statistics.median(timings),
    }


def _export(revision: str, into: Path) -> Path:
    """Revision ``revision``'s package laid out as installed (chd = daemon/, chd.backends = backends/)."""
    root = Path(__file__).resolve().parent.parent
    tree = into / "tree"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "archive", revision, "daemon", "backends"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    package = into / "pkg"
    package.mkdir()
    (tree / "daemon").rename(package / "chd")
    (tree / "backends").rename(package / "chd" / "backends")
    return package


def against(args: argparse.Namespace, argv: Sequence[str]) -> None:
    """This checkout and ``args.against`` in alternating child processes, ``args.rounds`` rounds each.

    Recall is deterministic, so it is shown once per side; store time and
    search p50 vary with the machine's load, so each round pairs the two
    and the median of the rounds' ratios is printed.
    """
    child = [sys.executable, str(Path(__file__).resolve()), *_without_against(argv), "--json"]
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "old": []}
    with tempfile.TemporaryDirectory() as folder:
        package = _export(args.against, Path(folder))
        for round_number in range(args.rounds):
            order = ("this", "old") if round_number % 2 == 0 else ("old", "this")
            for side in order:
                env = dict(os.environ)
                if side == "old":
                    # Ahead of the editable install of this checkout.
                    env["PYTHONPATH"] = str(package)
                done = subprocess.run(child, env=env, check=True, capture_output=True, text=True)
                runs[side].append(json.loads(done.stdout))
    this, old = runs["this"][0], runs["old"][0]
    rows = {f"chd@{args.against}"[:12]: old["rows"]["chd"], "chd": this["rows"]["chd"]}
    rows |= {name: by_group for name, by_group in this["rows"].items() if name != "chd"}
    print(
        f"LoCoMo: conversations {args.conversations}, {this['turns']} turns, {this['questions']} questions "
        f"(categories 1-4), mode {args.mode}, embedder {args.embedder}; this checkout against "
        f"{args.against}, {args.rounds} rounds"
    )
    stores = [t["store_seconds"] / o["store_seconds"] for t, o in zip(runs["this"], runs["old"])]
    searches = [t["search_p50"] / o["search_p50"] for t, o in zip(runs["this"], runs["old"])]
    print(
        f"store time, this / {args.against}: median {statistics.median(stores):.3f} "
        f"(rounds {', '.join(f'{r:.3f}' for r in stores)})"
    )
    print(
        f"topic search p50, this / {args.against}: median {statistics.median(searches):.3f} "
        f"(rounds {', '.join(f'{r:.3f}' for r in searches)}; this "
        f"{statistics.median(t['search_p50'] for t in runs['this']) * 1e3:.2f} ms)"
    )
    print()
    _print_rows(rows)


def _without_against(argv: Sequence[str]) -> list[str]:
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item in ("--against", "--rounds"):
            skip = True
        elif not item.startswith(("--against=", "--rounds=")):
            out.append(item)
    return out


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
    parser.add_argument(
        "--against",
        metavar="REV",
        help="also run chd from git revision REV in alternating processes: its recall, and "
        "store time and search p50 as ratios of this checkout's to its",
    )
    parser.add_argument("--rounds", type=int, default=3, help="with --against: rounds per side")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not args.path:
        parser.error("give the LoCoMo data's path (or set CHD_LOCOMO); see docs/search.md")
    if args.against:
        against(args, argv)
        return
    measured = measure(args)
    if args.json:
        print(json.dumps(measured))
        return
    print(
        f"LoCoMo: conversations {args.conversations}, {measured['turns']} turns, "
        f"{measured['questions']} questions (categories 1-4), mode {args.mode}, embedder {args.embedder}"
    )
    print(
        f"chd: {measured['turns']} stores in {measured['store_seconds']:.1f} s; "
        f"topic search p50 {measured['search_p50'] * 1e3:.2f} ms"
    )
    print()
    _print_rows(measured["rows"])


if __name__ == "__main__":
    main()
