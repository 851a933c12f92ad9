"""grpc.aio against the thread-pool server, for the same servicer (issue 31).

    python bench/bench_aio.py [--requests 600] [--rounds 5] [--clients 1,4,16]

Each target is a server process on 127.0.0.1 answering ``Query``:

* ``null-pool`` / ``null-aio``: the do-nothing servicer of bench_backends.py
  (canned responses of the real shape) on a thread-pool server (16 workers,
  as ``build_server``) and on a ``grpc.aio`` server: gRPC's own cost in each
  serving model;
* ``chd-pool``: ``chd.service.server.DaemonServicer`` over a memory-backed
  ConversationHistory (storage scenario: no eviction) on the thread-pool
  server, as ``chd serve`` runs it without its guards;
* ``chd-aio``: the same servicer's work called inline from an ``async def``
  on a ``grpc.aio`` server (the core is synchronous; a memory store holds
  the event loop for its few hundred microseconds);
* ``chd-aio-exec``: the same, with the work handed to a 16-thread executor
  (what a blocking backend such as disk would need on an event loop).

The store phase sends "Add utterance: ..." and the retrieve phase "Get the
last 5 utterances", round-robin over 8 conversations, from ``--clients``
client threads sharing one channel. Rounds alternate the targets' order;
each figure is the median over rounds of each round's ratio to the pool
server measured in the same round (``chd-aio`` / ``chd-pool`` and
``null-aio`` / ``null-pool``), with a bootstrap 95 % interval.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from concurrent import futures
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_backends import NullServicer, Target, _requests, _run, median_interval  # noqa: E402

from chd.v1 import daemon_pb2, daemon_pb2_grpc  # noqa: E402

TARGETS = ("null-pool", "null-aio", "chd-pool", "chd-aio", "chd-aio-exec")


def _chd_servicer() -> daemon_pb2_grpc.DaemonServicer:
    from chd.core.history import ConversationHistory
    from chd.core.settings import Settings
    from chd.service.server import DaemonServicer

    history = ConversationHistory(settings=Settings(buffer_size=10000, max_tokens=10_000_000))
    return DaemonServicer(history)


def _serve(kind: str) -> None:
    servicer = NullServicer() if kind.startswith("null") else _chd_servicer()
    if kind.endswith("pool"):
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=16), options=(("grpc.so_reuseport", 0),)
        )
        daemon_pb2_grpc.add_DaemonServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        print(f"chd listening on 127.0.0.1:{port}", flush=True)
        server.wait_for_termination()
        return
    asyncio.run(_serve_aio(servicer, executor=kind.endswith("exec")))


async def _serve_aio(inner: daemon_pb2_grpc.DaemonServicer, executor: bool) -> None:
    pool = futures.ThreadPoolExecutor(max_workers=16) if executor else None

    class Servicer(daemon_pb2_grpc.DaemonServicer):
        async def Query(
            self, request: daemon_pb2.QueryRequest, context
        ) -> daemon_pb2.QueryResponse:
            if pool is None:
                return inner.Query(request, context)
            return await asyncio.get_running_loop().run_in_executor(
                pool, inner.Query, request, context
            )

    server = grpc.aio.server(options=(("grpc.so_reuseport", 0),))
    daemon_pb2_grpc.add_DaemonServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"chd listening on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--requests", type=int, default=600, help="requests per phase, round and concurrency"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", default="1,4,16", help="comma-separated client thread counts")
    parser.add_argument("--serve", choices=TARGETS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve)
        return 0

    load = os.getloadavg()[0]
    concurrencies = [int(c) for c in args.clients.split(",")]
    rates: dict[tuple[str, str, int], list[float]] = {}
    targets = {
        name: Target(name, [sys.executable, str(Path(__file__).resolve()), "--serve", name])
        for name in TARGETS
    }
    try:
        names = list(targets)
        for round_number in range(args.rounds):
            order = names[round_number % len(names) :] + names[: round_number % len(names)]
            if round_number % 2:
                order.reverse()
            for clients in concurrencies:
                for phase in ("store", "retrieve"):
                    for name in order:
                        requests = _requests(phase, args.requests, round_number * 100 + clients)
                        rate = _run(targets[name].address, requests, clients)
                        rates.setdefault((name, phase, clients), []).append(rate)
    finally:
        for target in targets.values():
            target.stop()

    print(
        f"\n{args.requests} requests x {args.rounds} rounds, {os.cpu_count()} CPUs, load average at start "
        f"{load:.2f}, at end {os.getloadavg()[0]:.2f}"
    )
    print(
        "median calls/s; ratio = median of each round's ratio to the pool server in that round (95 % interval)"
    )
    print(
        f"{'clients':>7} {'phase':<8} "
        + " ".join(f"{n:>13}" for n in TARGETS)
        + f" {'null aio/pool':>22} {'chd aio/pool':>22} {'chd aio-exec/pool':>22} {'chd-pool/null-pool':>22}"
    )
    for clients in concurrencies:
        for phase in ("store", "retrieve"):
            row = f"{clients:>7} {phase:<8} "
            row += " ".join(
                f"{statistics.median(rates[(n, phase, clients)]):>13.0f}" for n in TARGETS
            )
            for new, old in (
                ("null-aio", "null-pool"),
                ("chd-aio", "chd-pool"),
                ("chd-aio-exec", "chd-pool"),
                ("chd-pool", "null-pool"),
            ):
                paired = [
                    a / b
                    for a, b in zip(rates[(new, phase, clients)], rates[(old, phase, clients)])
                ]
                low, high = median_interval(paired)
                row += f" {statistics.median(paired):>8.3f} ({low:.3f}-{high:.3f})"
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
