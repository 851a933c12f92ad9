"""Stores per second with ``chd serve --processes 2`` against 1, disk backend, many concurrent clients (issue 31).

    python bench/bench_processes.py [--clients 16] [--client-processes 4] [--stores 150] [--rounds 5]
                                    [--processes 2] [--durability normal]

Two targets, each a ``chd serve --backend disk`` on a data dir of its own:
``--processes 1`` and ``--processes N``. In each round, one after the other
(the order alternates by round), ``--clients`` clients store ``--stores``
utterances each ("Add utterance: ...", over 8 conversations per client).
The clients are threads spread over ``--client-processes`` processes (a
Python client is GIL-bound too), each thread with a gRPC channel and
connection of its own (``grpc.use_local_subchannel_pool``): the kernel
spreads SO_REUSEPORT connections, not calls, over the serving processes.
Reported: stores/s per target (the median over rounds), and the median of
each round's ratio N/1 with a 95 % interval. The clients run on the same
machine as the daemons: on 2 CPUs they take a large share of them, which
the ratio pays for; the line printed says how much CPU they used.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_backends import Target, median_interval, server_cpu  # noqa: E402

GOAL = 1.6
CONVERSATIONS = 8


def _worker(address: str, threads: int, stores: int, tag: str) -> None:
    """One client process: ``threads`` threads, each its own connection, ``stores`` stores each."""
    import grpc

    from chd.v1 import daemon_pb2, daemon_pb2_grpc

    def run(number: int) -> None:
        with grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
            stub = daemon_pb2_grpc.DaemonStub(ch)
            requests = []
            for i in range(stores):
                request = daemon_pb2.QueryRequest(
                    query=f"Add utterance: message {i} from client {number} about the train to Lyon"
                )
                cid = f"{tag}-t{number}-c{i % CONVERSATIONS}"
                request.metadata.update({"conversation_id": cid})
                requests.append(request)
            stub.Query(requests[0], timeout=60)  # connect first: the clock starts for all at once
            connected.wait()
            go.wait()
            for request in requests[1:]:
                stub.Query(request, timeout=60)

    connected = threading.Barrier(threads + 1)
    go = threading.Event()
    pool = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    connected.wait()
    print("ready", flush=True)
    sys.stdin.readline()  # the parent says go once every client process is connected
    go.set()
    for thread in pool:
        thread.join()
    print(json.dumps({"end": time.time()}), flush=True)


def _round(address: str, args: argparse.Namespace, tag: str) -> float:
    """Stores per second of one round against ``address``, from "go" to the last client's end."""
    per = args.clients // args.client_processes
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                address,
                str(per),
                str(args.stores),
                f"{tag}-p{p}",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for p in range(args.client_processes)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    start = time.time()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    ends = []
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        ends.append(json.loads(out.strip().splitlines()[-1])["end"])
    return per * args.client_processes * (args.stores - 1) / (max(ends) - start)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        address, threads, stores, tag = sys.argv[2:6]
        _worker(address, int(threads), int(stores), tag)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--client-processes", type=int, default=4)
    parser.add_argument("--stores", type=int, default=150, help="stores per client per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--durability", choices=("normal", "full"), default="normal")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    data = Path(tempfile.mkdtemp(prefix="chd-bench-proc-"))
    base = [sys.executable, "-m", "chd", "serve", "--port", "0", "--log-level", "WARNING"]
    base += ["--backend", "disk", "--durability", args.durability]
    names = {"1": 1, str(args.processes): args.processes}
    targets: dict[str, Target] = {}
    rates: dict[str, list[float]] = {name: [] for name in names}
    server_cpus: dict[str, list[float]] = {name: [] for name in names}
    client_cpu: list[float] = []
    try:
        for name, n in names.items():
            targets[name] = Target(
                name, [*base, "--data-dir", str(data / name), "--processes", str(n)]
            )
        children = {name: _group_pids(t.proc.pid) for name, t in targets.items()}
        for round_number in range(args.rounds):
            order = list(names) if round_number % 2 == 0 else list(reversed(names))
            for name in order:
                before = sum(server_cpu(p) for p in children[name])
                spent_before = os.times()
                rate = _round(targets[name].address, args, f"r{round_number}-{name}")
                spent = os.times()
                rates[name].append(rate)
                stores = args.clients * (args.stores - 1)
                server_cpus[name].append(
                    (sum(server_cpu(p) for p in children[name]) - before) / stores * 1e6
                )
                client_cpu.append(
                    (
                        spent.children_user
                        + spent.children_system
                        - spent_before.children_user
                        - spent_before.children_system
                    )
                    / stores
                    * 1e6
                )
    finally:
        for target in targets.values():
            target.stop()
        shutil.rmtree(data, ignore_errors=True)
    many = str(args.processes)
    paired = [m / o for m, o in zip(rates[many], rates["1"])]
    median = statistics.median(paired)
    low, high = median_interval(paired)
    print(
        f"\n{args.clients} concurrent clients ({args.client_processes} client processes, each thread its own "
        f"connection), {args.stores} stores each per round, {args.rounds} rounds, disk backend "
        f"(durability {args.durability}), {os.cpu_count()} CPUs, load average at start {load:.2f}"
    )
    for name in names:
        print(
            f"--processes {name:<3} {statistics.median(rates[name]):8.0f} stores/s   "
            f"server CPU per store {statistics.median(server_cpus[name]):5.0f} us (all its processes)"
        )
    print(f"client CPU per store {statistics.median(client_cpu):5.0f} us (all client processes)")
    # What the machine could do at all: every store costs the server's CPU
    # and the clients', and there are only os.cpu_count() CPUs for both.
    per_store = (statistics.median(server_cpus[many]) + statistics.median(client_cpu)) / 1e6
    bound = (os.cpu_count() or 1) / per_store
    print(
        f"CPU-bound ceiling with the clients on this machine: {os.cpu_count()} CPUs / "
        f"{per_store * 1e6:.0f} us per store = {bound:.0f} stores/s, "
        f"{bound / statistics.median(rates['1']):.2f}x the one-process rate"
    )
    print(
        f"--processes {many} / --processes 1: {median:.2f}x (95 % interval {low:.2f}-{high:.2f}; "
        f"rounds {min(paired):.2f}-{max(paired):.2f})  >= {GOAL}x: {'met' if median >= GOAL else 'NOT met'}"
    )
    return 0 if median >= GOAL else 1


def _group_pids(pid: int) -> list[int]:
    """``pid`` and its children (a group's serving processes), from /proc; waits for them to be there."""
    out = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


if __name__ == "__main__":
    sys.exit(main())
