"""How much of a `chd serve` process's memory `max_memory_bytes` accounts for (issue 28, item 2).

Stores utterances of one size into a memory-backend daemon until the budget
refuses them (or --count is reached), then prints the RSS growth against the
budget and the bytes the backend counted. Run it for tiny and large
utterances, and spread over many conversations, to see the factor at both ends:

    python bench/bench_memory_budget.py --size 2 --budget 10000000
    python bench/bench_memory_budget.py --size 2 --budget 10000000 --conversations 5000
    python bench/bench_memory_budget.py --size 20000 --budget 100000000
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--size", type=int, default=2, help="characters of each utterance")
    parser.add_argument("--budget", type=int, default=10_000_000, help="max_memory_bytes")
    parser.add_argument("--count", type=int, default=200_000, help="most stores to send")
    parser.add_argument(
        "--conversations", type=int, default=1, help="spread the stores over this many"
    )
    args = parser.parse_args()
    per = max(args.count // args.conversations + 1, 10)
    daemon = Daemon(
        "--max-memory-bytes",
        str(args.budget),
        "--buffer-size",
        str(per),
        "--max-utterances-per-conversation",
        str(per),
        "--max-conversations",
        str(args.conversations + 10),
    )
    try:
        daemon.ask("Add utterance: warm up", {"conversation_id": "warm"}, {}, 10)
        start = daemon.rss_mib()
        stored = refused = 0
        for n in range(args.count):
            text = (f"{n:x}" * args.size)[: args.size]
            message = daemon_pb2.QueryRequest()
            message.metadata.update({"conversation_id": f"c{n % args.conversations}"})
            message.data.update({"operation": "store", "text": text})
            try:
                daemon.stub.Query(message, timeout=30)
                stored += 1
            except grpc.RpcError as error:
                if error.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                refused += 1
                if refused >= 20:
                    break
        grown = (daemon.rss_mib() - start) * 1024 * 1024
        print(
            f"size {args.size} B x {stored:,} stored ({refused} refused) over {args.conversations:,} conversation(s), "
            f"budget {args.budget:,}: RSS grew {grown / 1e6:.1f} MB = {grown / args.budget:.2f}x the budget, "
            f"{grown / max(stored, 1):.0f} B per utterance"
        )
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
