"""Valid callers' latency with and without one client sending the worst 2 kB queries (issue 28, item 10).

Starts one memory-backend `chd serve`, finds the costliest 2 kB shapes of
tests/parser_shapes.py and bench/bench_hostile.py (round trip, best of 3,
against a valid query's),
then runs --clients threads of --requests valid queries each, twice in the
same run: alone, and beside one more thread sending those shapes one after
another until the valid ones are done. It prints the valid calls' p50/p99
for both runs and their ratio (the issue's target: p99 within 1.5x).

    python bench/bench_hostile_fairness.py [--clients 8] [--requests 500]
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_hostile import SHAPES as REQUEST_SHAPES  # noqa: E402
from bench_hostile import Daemon
from percentiles import percentile  # noqa: E402

from tests.parser_shapes import SHAPES, build  # noqa: E402

VALID = "Get the last 5 utterances"
SIZE = 2000


Request = tuple[str, dict, dict]


def _round_trip(daemon: Daemon, request: Request) -> float:
    return min(daemon.ask(*request, 60) for _ in range(3))


def _shapes() -> dict[str, Request]:
    shapes: dict[str, Request] = {f"query: {name}": (build(name, SIZE), {}, {}) for name in SHAPES}
    shapes |= {name: shape(SIZE) for name, shape in REQUEST_SHAPES.items()}
    return shapes


def _valid_latencies(
    daemon: Daemon, clients: int, requests: int, attack: list[Request] | None
) -> list[float]:
    latencies: list[float] = []
    lock = threading.Lock()
    done = threading.Event()

    def valid(n: int) -> None:
        mine = [daemon.ask(VALID, {"conversation_id": f"v{n}"}, {}, 60) for _ in range(requests)]
        with lock:
            latencies.extend(mine)

    def attacker() -> None:
        while not done.is_set():
            for query, metadata, data in attack or ():
                daemon.ask(query, {"conversation_id": "attacker", **metadata}, data, 60)

    threads = [threading.Thread(target=valid, args=(n,)) for n in range(clients)]
    hostile = threading.Thread(target=attacker) if attack else None
    if hostile:
        hostile.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    if hostile:
        hostile.join()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument(
        "--worst", type=int, default=3, help="how many of the costliest shapes the attacker cycles"
    )
    args = parser.parse_args()
    daemon = Daemon()
    try:
        for n in range(args.clients):
            for k in range(5):
                daemon.ask(
                    f"Add utterance: fact {k} for client {n}", {"conversation_id": f"v{n}"}, {}, 10
                )
        valid = _round_trip(daemon, (VALID, {}, {}))
        shapes = _shapes()
        costs = sorted(
            ((_round_trip(daemon, request), name) for name, request in shapes.items()), reverse=True
        )
        print(f"valid query round trip {valid * 1e3:.2f} ms; costliest {SIZE}-character shapes:")
        for seconds, shape in costs[: args.worst]:
            print(f"   {seconds * 1e3:7.2f} ms = {seconds / valid:5.1f}x  {shape}")
        attack = [shapes[name] for _, name in costs[: args.worst]]
        alone = _valid_latencies(daemon, args.clients, args.requests, None)
        beside = _valid_latencies(daemon, args.clients, args.requests, attack)
        for name, values in (("alone", alone), ("beside the attacker", beside)):
            print(
                f"{args.clients} x {args.requests} valid calls {name}: p50 {percentile(values, 0.5) * 1e3:.2f} ms, "
                f"p99 {percentile(values, 0.99) * 1e3:.2f} ms"
            )
        print(f"p99 ratio {percentile(beside, 0.99) / percentile(alone, 0.99):.2f} (target 1.5)")
    finally:
        daemon.stop()


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
