"""Store-many against single stores: utterances per second over gRPC, per backend (issue 31).

    python bench/bench_store_many.py [--batch 20] [--batches 100] [--clients 1] [--rounds 7]
                                     [--backend memory --backend disk ...] [--scenario default|storage]

For each backend one ``chd serve`` process; in each round, interleaved,
``--batches`` store-many requests of ``--batch`` utterances (``data.utterances``)
and ``--batches`` x ``--batch`` single stores of the same utterances
(``data.operation: store`` with ``data.text``, the client library's path, so
the parser is not what is measured), each on conversations of its own.
Reported: utterances stored per second, and the median over rounds of each
round's ratio store-many / single (paired in the round, so drift on a shared
machine cancels), with a 95 % interval for that median. Target: >= 5x for a
batch of 20.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_backends import SCENARIOS, Target, median_interval, server_cpu  # noqa: E402

from chd.v1 import daemon_pb2, daemon_pb2_grpc  # noqa: E402

CONVERSATIONS = 8
GOAL = 5.0


def _item(i: int) -> dict[str, str]:
    return {
        "text": f"message {i} about the weather in Paris and the train to Lyon tomorrow",
        "speaker": "user" if i % 2 == 0 else "assistant",
    }


def _requests(mode: str, batch: int, batches: int, tag: str) -> list[daemon_pb2.QueryRequest]:
    out = []
    for b in range(batches):
        cid = f"{tag}-{mode}-c{b % CONVERSATIONS}"
        items = [_item(b * batch + i) for i in range(batch)]
        if mode == "many":
            request = daemon_pb2.QueryRequest()
            request.metadata.update({"conversation_id": cid})
            request.data.update({"operation": "store", "utterances": items})
            out.append(request)
            continue
        for item in items:
            request = daemon_pb2.QueryRequest()
            request.metadata.update({"conversation_id": cid, "speaker": item["speaker"]})
            request.data.update({"operation": "store", "text": item["text"]})
            out.append(request)
    return out


def _run(address: str, requests: list[daemon_pb2.QueryRequest], clients: int) -> float:
    """Seconds to send every request with ``clients`` threads sharing the list."""
    with grpc.insecure_channel(address) as channel:
        stub = daemon_pb2_grpc.DaemonStub(channel)
        cursor = iter(range(len(requests)))
        lock = threading.Lock()

        def client() -> None:
            while True:
                with lock:
                    i = next(cursor, None)
                if i is None:
                    return
                stub.Query(requests[i], timeout=60)

        threads = [threading.Thread(target=client) for _ in range(clients)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=20, help="utterances per store-many")
    parser.add_argument("--batches", type=int, default=100, help="store-many requests per round")
    parser.add_argument("--clients", type=int, default=1, help="client threads")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--backend", action="append", choices=("memory", "disk"), help="default: both"
    )
    parser.add_argument("--scenario", choices=tuple(SCENARIOS), default="default")
    args = parser.parse_args()
    backends = args.backend or ["memory", "disk"]
    load = os.getloadavg()[0]
    data = Path(tempfile.mkdtemp(prefix="chd-bench-many-"))
    base = [sys.executable, "-m", "chd", "serve", "--port", "0", "--log-level", "WARNING"]
    base += SCENARIOS[args.scenario]
    targets = {}
    try:
        for name in backends:
            extra = ["--data-dir", str(data / name)] if name == "disk" else []
            targets[name] = Target(name, [*base, "--backend", name, *extra])
        rates: dict[str, dict[str, list[float]]] = {n: {"many": [], "one": []} for n in targets}
        cpu: dict[str, dict[str, list[float]]] = {n: {"many": [], "one": []} for n in targets}
        utterances = args.batch * args.batches
        for round_number in range(args.rounds):
            for name, target in targets.items():
                modes = ("many", "one") if round_number % 2 == 0 else ("one", "many")
                for mode in modes:
                    requests = _requests(mode, args.batch, args.batches, f"r{round_number}")
                    before = server_cpu(target.proc.pid)
                    seconds = _run(target.address, requests, args.clients)
                    rates[name][mode].append(utterances / seconds)
                    cpu[name][mode].append(
                        (server_cpu(target.proc.pid) - before) / utterances * 1e6
                    )
    finally:
        for target in targets.values():
            target.stop()
        shutil.rmtree(data, ignore_errors=True)
    print(
        f"\nstore-many of {args.batch} against {args.batch} single stores: {args.batches} batches "
        f"({utterances} utterances) per mode x {args.rounds} rounds, {args.clients} client thread(s), "
        f"scenario {args.scenario}, {os.cpu_count()} CPUs, load average at start {load:.2f}"
    )
    print(
        f"{'backend':<8} {'many utt/s':>10} {'single utt/s':>12} {'ratio (95 % interval) [rounds]':>44}"
        f"  {'CPU us/utt many / single':>24}  goal"
    )
    failed = False
    for name in targets:
        paired = [m / o for m, o in zip(rates[name]["many"], rates[name]["one"])]
        median = statistics.median(paired)
        low, high = median_interval(paired)
        met = median >= GOAL
        failed |= not met
        print(
            f"{name:<8} {statistics.median(rates[name]['many']):>10.0f} "
            f"{statistics.median(rates[name]['one']):>12.0f} "
            f"{median:>10.2f}x ({low:.2f}-{high:.2f}) [{min(paired):.2f}-{max(paired):.2f}]"
            f"  {statistics.median(cpu[name]['many']):>10.0f} / {statistics.median(cpu[name]['one']):<10.0f}"
            f"  >= {GOAL:.0f}x: {'met' if met else 'NOT met'}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
