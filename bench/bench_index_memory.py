"""RSS of a `chd serve` whose search indexes cover many conversations of long utterances (outside review of issue 28).

The reviewer's repro: 50 conversations of 2,000-word utterances stored until
a 20 MB ``max_memory_bytes`` refuses them, then one topic search in each.
Each search builds that conversation's index (terms and postings), which is
far larger than its text; before the index cache was bounded in bytes, RSS
went from 147 MB to 1,083 MB here.

    python bench/bench_index_memory.py
    python bench/bench_index_memory.py --budget 100000000 --conversations 20
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_hostile import Daemon  # noqa: E402

from chd.v1 import daemon_pb2  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budget", type=int, default=20_000_000, help="max_memory_bytes")
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--words", type=int, default=2000, help="words per utterance")
    args = parser.parse_args()
    rng = random.Random(28)
    vocabulary = [f"w{rng.getrandbits(40):x}" for _ in range(200_000)]
    daemon = Daemon(
        "--max-memory-bytes",
        str(args.budget),
        "--buffer-size",
        "10000",
        "--max-utterances-per-conversation",
        "10000",
        "--max-conversations",
        str(args.conversations + 10),
    )
    try:
        # One search first: the lemmatizer's dictionaries load on the first
        # (about 20 MB, once), and are not what this measures.
        daemon.ask("Add utterance: warm up", {"conversation_id": "warm"}, {}, 10)
        daemon.ask("", {"conversation_id": "warm"}, {"operation": "retrieve", "topic": "warm"}, 10)
        start = daemon.rss_mib()
        stored = 0
        full = False
        while not full:
            for n in range(args.conversations):
                message = daemon_pb2.QueryRequest()
                message.metadata.update({"conversation_id": f"c{n}"})
                message.data.update(
                    {"operation": "store", "text": " ".join(rng.choices(vocabulary, k=args.words))}
                )
                try:
                    daemon.stub.Query(message, timeout=60)
                    stored += 1
                except grpc.RpcError as error:
                    if error.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise
                    full = True
                    break
        stored_rss = daemon.rss_mib()
        for n in range(args.conversations):
            daemon.ask(
                "",
                {"conversation_id": f"c{n}"},
                {"operation": "retrieve", "topic": vocabulary[n]},
                120,
            )
        searched = daemon.rss_mib()
        print(
            f"{stored:,} utterances of {args.words:,} words over {args.conversations} conversations, budget "
            f"{args.budget / 1e6:.0f} MB: RSS {start:.0f} MiB at start, {stored_rss:.0f} MiB stored, "
            f"{searched:.0f} MiB after one search each; growth {(searched - start) * 1048576 / args.budget:.2f}x the budget"
        )
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
