"""What the operations layer costs per call: bare server vs fully assembled.

Runs the same store/retrieve mix against three in-process servers on
loopback, in one process and one run, and prints each one's median
round-trip time as a ratio against the bare server:

    bare       build_server(history) - the servicer only
    assembled  daemon.app.start - trace, deadline, decoding, limits
    everything assembled + auth token + metrics

    python bench/ops_overhead.py [--calls 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chd.core.history import ConversationHistory  # noqa: E402
from chd.service.app import start  # noqa: E402
from chd.service.auth import bearer_metadata  # noqa: E402
from chd.service.config import load  # noqa: E402
from chd.service.server import build_server  # noqa: E402
from chd.v1 import daemon_pb2, daemon_pb2_grpc  # noqa: E402


def _requests(n: int) -> list[daemon_pb2.QueryRequest]:
    out = []
    for i in range(n):
        text = (
            f"Add utterance: message number {i} about the weather"
            if i % 2 == 0
            else "Get the last 5 utterances"
        )
        request = daemon_pb2.QueryRequest(query=text)
        request.metadata.update({"conversation_id": f"bench-{i % 10}"})
        out.append(request)
    return out


def _median_seconds(port: int, requests: list[daemon_pb2.QueryRequest], token: str | None) -> float:
    metadata = bearer_metadata(token) if token else None
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = daemon_pb2_grpc.DaemonStub(channel)
        for request in requests[:50]:  # warm up the channel
            stub.Query(request, metadata=metadata, timeout=10)
        times = []
        for request in requests:
            began = time.perf_counter()
            stub.Query(request, metadata=metadata, timeout=10)
            times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    # The trace logs at INFO; send it nowhere so the terminal is not the cost.
    logging.getLogger("chd.trace").addHandler(logging.NullHandler())
    logging.getLogger("chd.trace").propagate = False
    logging.getLogger("chd.trace").setLevel(logging.INFO)
    requests = _requests(args.calls)
    results: dict[str, list[float]] = {"bare": [], "assembled": [], "everything": []}
    for _ in range(args.rounds):  # interleaved, so drift in machine load hits all three alike
        bare = build_server(ConversationHistory(), "127.0.0.1", 0)
        results["bare"].append(_median_seconds(bare.port, requests, None))
        bare.stop(0)
        assembled = start(load({"port": 0}, {}))
        results["assembled"].append(_median_seconds(assembled.port, requests, None))
        assembled.stop(0)
        everything = start(load({"port": 0, "auth_token": "t", "metrics_port": 0}, {}))
        results["everything"].append(_median_seconds(everything.port, requests, "t"))
        everything.stop(0)
    base = statistics.median(results["bare"])
    print(f"{args.calls} calls x {args.rounds} rounds, median round trip per call")
    for name, values in results.items():
        value = statistics.median(values)
        print(f"  {name:<11} {value * 1e6:8.0f} us   x{value / base:.2f} of bare")


if __name__ == "__main__":
    main()
