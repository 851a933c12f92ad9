"""Store and retrieve throughput over gRPC, per backend, against this machine's ceiling.

    python bench/bench_backends.py [--requests 1000] [--clients 4] [--rounds 7] [--scenario storage|default]
                                   [--against REV] [--archive-evicted] [--search-first]

Each target is a separate server process on 127.0.0.1, driven by the same
client threads in this process:

* ceiling: a do-nothing Daemon servicer that answers every Query with a
  canned response of the same shape and size as the real one, on the same
  gRPC server setup: what gRPC and the client cost on this machine;
* memory, disk (durability normal) and disk-full (durability full): real
  ``chd serve`` processes.

Two scenarios: ``storage`` gives the buffer room for every utterance, so a
store is parse, count, and one append to the backend (the storage path
alone); ``default`` keeps the default buffer of 20, so every fifth store
evicts a batch for the background worker to fold into the summary.

``--against REV`` adds memory@REV and disk@REV: the same servers run from
git revision REV's code (exported to a temporary folder), in the same
rounds, and prints each store and retrieve rate as the median of each
round's ratio to REV's (paired). ``--archive-evicted`` runs every chd server
with the archive kept; ``--search-first`` makes one topic search in each
conversation before its stores, so the search index is live and every
store keeps it in step (issue 27: store cost with the archive index on).

The store phase sends "Add utterance: ..." round-robin over 8 conversations
(new ones each round); the retrieve phase then sends "Get the last 5
utterances" to the same ones.
Rates are the median of ``--rounds`` runs. A ratio is taken per round,
against the ceiling measured in that same round, and the median of those
ratios is reported with a 95 % interval for that median (a bootstrap over
the rounds) and with its lowest and highest round (targets: memory >= 70 %,
disk >= 40 %). On a shared 2-CPU machine single runs vary by 30 % and more;
pairing within a round and taking medians over rounds is what makes two runs
comparable, and the interval says how far to trust a median. Each target's
server CPU per call (user + system time of its process, from /proc) is
printed too, and with ``--against`` its paired ratio: another process on
the machine slows calls but does not add to their CPU time, so it spreads
far less than a rate does (issue 31).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chd.v1 import daemon_pb2, daemon_pb2_grpc  # noqa: E402

CONVERSATIONS = 8
SCENARIOS = {
    "storage": ["--buffer-size", "10000", "--max-tokens", "10000000"],
    "default": [],
}
TARGETS = {"memory": 0.70, "disk": 0.40, "disk-full": None}


# --- the ceiling server -----------------------------------------------------------


def _canned_responses() -> dict[str, daemon_pb2.QueryResponse]:
    """Real responses from the core, captured once, so the ceiling sends the same bytes."""
    from chd.core.history import ConversationHistory
    from chd.service.wire import dict_to_struct

    history = ConversationHistory()
    for i in range(25):
        history.query(store_text(i), {"conversation_id": "c0"})
    out = {}
    for kind, text in (("store", store_text(25)), ("retrieve", "Get the last 5 utterances")):
        result = history.query(text, {"conversation_id": "c0"})
        out[kind] = daemon_pb2.QueryResponse(
            operation=result.operation,
            result=dict_to_struct(result.result),
            metadata=dict_to_struct(result.metadata),
        )
    return out


class NullServicer(daemon_pb2_grpc.DaemonServicer):
    """Answers without doing anything: the cost of gRPC alone."""

    def __init__(self) -> None:
        self._responses = _canned_responses()

    def Query(
        self, request: daemon_pb2.QueryRequest, context: grpc.ServicerContext
    ) -> daemon_pb2.QueryResponse:
        return self._responses["store" if request.query.startswith("Add") else "retrieve"]


def serve_null() -> None:
    # The same executor size as daemon.server.build_server.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    daemon_pb2_grpc.add_DaemonServicer_to_server(NullServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"chd listening on 127.0.0.1:{port}", flush=True)
    server.wait_for_termination()


# --- driving a server ---------------------------------------------------------------


def store_text(i: int) -> str:
    return f"Add utterance: message {i} about the weather in Paris and the train to Lyon tomorrow"


class Target:
    """A server subprocess that prints its port first, like ``chd serve --port 0``."""

    def __init__(self, name: str, command: list[str], path: Path = ROOT) -> None:
        self.name = name
        env = dict(os.environ, PYTHONPATH=str(path))
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        match = re.search(r"listening on \S+:(\d+)", line)
        if not match:
            self.proc.kill()
            raise RuntimeError(f"{name} did not start: {line!r}")
        self.address = f"127.0.0.1:{match.group(1)}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far; 0.0 where /proc is missing.

    Per call, this is steadier than a rate on a shared machine: another
    process taking a core slows the calls but does not add to their CPU
    time (issue 31: rounds within 3 % where rates spread 30 %).
    """
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _run(address: str, requests: list[daemon_pb2.QueryRequest], clients: int) -> float:
    """Requests per second with ``clients`` threads sharing the list."""
    with grpc.insecure_channel(address) as channel:
        stub = daemon_pb2_grpc.DaemonStub(channel)
        stub.Query(requests[0], timeout=30)  # connect and warm up
        cursor = iter(range(len(requests)))
        lock = threading.Lock()

        def client() -> None:
            while True:
                with lock:
                    i = next(cursor, None)
                if i is None:
                    return
                stub.Query(requests[i], timeout=30)

        threads = [threading.Thread(target=client) for _ in range(clients)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return len(requests) / (time.perf_counter() - start)


def _export(revision: str, into: Path) -> Path:
    """Revision ``revision``'s package, laid out as installed (chd = daemon/, chd.backends = backends/)."""
    tree = into / "tree"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "archive", revision, "daemon", "backends"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    package = into / "pkg"
    package.mkdir()
    (tree / "daemon").rename(package / "chd")
    (tree / "backends").rename(package / "chd" / "backends")
    return package


def _search_first(address: str, round_number: int) -> None:
    """One topic search per conversation of the round, so its index is live before the stores."""
    with grpc.insecure_channel(address) as channel:
        stub = daemon_pb2_grpc.DaemonStub(channel)
        for c in range(CONVERSATIONS):
            request = daemon_pb2.QueryRequest(query="Find utterances about the weather")
            request.metadata.update({"conversation_id": f"round{round_number}-c{c}"})
            stub.Query(request, timeout=30)


def _requests(kind: str, count: int, round_number: int) -> list[daemon_pb2.QueryRequest]:
    """Each round writes to its own conversations, so buffers are the same size every round."""
    out = []
    for i in range(count):
        text = store_text(i) if kind == "store" else "Get the last 5 utterances"
        request = daemon_pb2.QueryRequest(query=text)
        request.metadata.update({"conversation_id": f"round{round_number}-c{i % CONVERSATIONS}"})
        out.append(request)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per phase and round")
    parser.add_argument("--clients", type=int, default=4, help="client threads")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; medians are reported")
    parser.add_argument(
        "--scenario",
        choices=tuple(SCENARIOS),
        action="append",
        help="storage and/or default (default: both)",
    )
    parser.add_argument(
        "--against", metavar="REV", help="also run memory and disk from git revision REV, paired"
    )
    parser.add_argument(
        "--archive-evicted", action="store_true", help="chd servers keep an archive"
    )
    parser.add_argument(
        "--search-first",
        action="store_true",
        help="a topic search per conversation before its stores",
    )
    parser.add_argument("--null-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.null_server:
        serve_null()
        return 0

    failed = False
    for scenario in args.scenario or list(SCENARIOS):
        failed |= _bench(scenario, args)
    return 1 if failed else 0


def _cpu_times() -> list[int]:
    """The machine's CPU time counters (user, nice, system, idle, iowait, irq, softirq, steal), if Linux has them."""
    try:
        with open("/proc/stat") as stat:
            return [int(x) for x in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return []


def _steal(before: list[int], after: list[int]) -> str:
    """The share of CPU time the hypervisor gave to other guests: the noise no pairing removes."""
    if len(before) < 8 or len(after) < 8:
        return "unknown"
    spent = [b - a for a, b in zip(before, after)]
    return f"{spent[7] / max(1, sum(spent)):.0%}"


def _bench(scenario: str, args: argparse.Namespace) -> bool:
    """Run one scenario and print its table; True if a goal was missed."""
    load = os.getloadavg()[0]
    cpu_before = _cpu_times()
    data = Path(tempfile.mkdtemp(prefix="chd-bench-"))
    chd = [
        sys.executable,
        "-m",
        "chd",
        "serve",
        "--port",
        "0",
        "--log-level",
        "WARNING",
        *SCENARIOS[scenario],
    ]
    if args.archive_evicted:
        chd.append("--archive-evicted")
    commands = {
        "ceiling": [sys.executable, str(Path(__file__).resolve()), "--null-server"],
        "memory": [*chd, "--backend", "memory"],
        "disk": [
            *chd,
            "--backend",
            "disk",
            "--data-dir",
            str(data / "normal"),
            "--durability",
            "normal",
        ],
        "disk-full": [
            *chd,
            "--backend",
            "disk",
            "--data-dir",
            str(data / "full"),
            "--durability",
            "full",
        ],
    }
    paths = {name: ROOT for name in commands}
    if args.against:
        old = _export(args.against, data)
        commands[f"memory@{args.against}"] = [*chd, "--backend", "memory"]
        commands[f"disk@{args.against}"] = [
            *chd,
            "--backend",
            "disk",
            "--data-dir",
            str(data / "old"),
            "--durability",
            "normal",
        ]
        paths |= {name: old for name in commands if "@" in name}
    results: dict[str, dict[str, list[float]]] = {
        name: {"store": [], "retrieve": []} for name in commands
    }
    cpu: dict[str, dict[str, list[float]]] = {
        name: {"store": [], "retrieve": []} for name in commands
    }
    targets = {name: Target(name, command, paths[name]) for name, command in commands.items()}
    try:
        names = list(targets)
        for round_number in range(args.rounds):
            # Interleaved, so drift on a shared machine hits every target alike,
            # and each round starts with another target, so no target always
            # runs just after the disk targets' writeback.
            order = names[round_number % len(names) :] + names[: round_number % len(names)]
            if args.search_first:
                for name in order:
                    if name != "ceiling":
                        _search_first(targets[name].address, round_number)
            for phase in ("store", "retrieve"):
                for name in order:
                    target = targets[name]
                    requests = _requests(phase, args.requests, round_number)
                    before = server_cpu(target.proc.pid)
                    results[name][phase].append(_run(target.address, requests, args.clients))
                    cpu[name][phase].append(
                        (server_cpu(target.proc.pid) - before) / len(requests) * 1e6
                    )
    finally:
        for target in targets.values():
            target.stop()
        shutil.rmtree(data, ignore_errors=True)

    steal = _steal(cpu_before, _cpu_times())
    print(
        f"\nscenario {scenario}: {args.requests} requests x {args.rounds} rounds, {args.clients} client "
        f"threads, {CONVERSATIONS} conversations, {os.cpu_count()} CPUs, load average at start {load:.2f}, "
        f"CPU steal during the run {steal}"
    )
    print(
        "median requests/s; 'ceiling' is the median of each round's ratio to the ceiling measured in that"
    )
    print(
        "round (paired, so drift on a shared machine cancels), its 95 % interval in parentheses, and the"
    )
    print("lowest and highest round in brackets")
    print(f"{'target':<10} {'store/s':>8} {'ceiling':>27} {'retrieve/s':>11} {'ceiling':>27}  goal")
    rate = {name: {p: statistics.median(r[p]) for p in r} for name, r in results.items()}
    ratios = {
        name: {p: [x / c for x, c in zip(r[p], results["ceiling"][p])] for p in r}
        for name, r in results.items()
    }
    failed = False
    for name in commands:
        row = f"{name:<10}"
        medians, intervals = [], []
        for phase, width in (("store", 8), ("retrieve", 11)):
            paired = ratios[name][phase]
            median, (low, high) = statistics.median(paired), median_interval(paired)
            medians.append(median)
            intervals.append((low, high))
            spread = f"({low:.0%}-{high:.0%}) [{min(paired):.0%}-{max(paired):.0%}]"
            row += f" {rate[name][phase]:>{width}.0f} {median:>6.0%} {spread:>20}"
        goal = TARGETS.get(name)
        if goal is not None:
            met = all(m >= goal for m in medians)
            failed |= not met
            verdict = "met" if met else "NOT met"
            if any(low <= goal <= high for low, high in intervals):
                verdict += " (the goal is inside an interval: take more runs)"
            row += f"  >= {goal:.0%} of ceiling: {verdict}"
        print(row)
    print("server CPU per call (user + system, us), median over rounds:")
    for name in commands:
        print(
            f"{name:<10}"
            + "".join(
                f"  {phase} {statistics.median(cpu[name][phase]):6.0f}"
                for phase in ("store", "retrieve")
            )
        )
    if args.against:
        print(
            f"this checkout against {args.against}: median of each round's rate ratio (95 % interval)"
        )
        for name in ("memory", "disk"):
            old = f"{name}@{args.against}"
            row = f"{name:<10}"
            for phase in ("store", "retrieve"):
                paired = [new / was for new, was in zip(results[name][phase], results[old][phase])]
                low, high = median_interval(paired)
                row += f"  {phase} {statistics.median(paired):.3f}x ({low:.3f}-{high:.3f})"
            print(row)
        print(
            f"server CPU per call, this checkout against {args.against}: median of each round's ratio (95 % interval)"
        )
        for name in ("memory", "disk"):
            old = f"{name}@{args.against}"
            row = f"{name:<10}"
            for phase in ("store", "retrieve"):
                paired = [new / was for new, was in zip(cpu[name][phase], cpu[old][phase]) if was]
                low, high = median_interval(paired) if paired else (0.0, 0.0)
                row += f"  {phase} {statistics.median(paired) if paired else 0:.3f}x ({low:.3f}-{high:.3f})"
            print(row)
    return failed


def median_interval(
    values: list[float], share: float = 0.95, resamples: int = 2000
) -> tuple[float, float]:
    """A bootstrap interval for the median of ``values``: how closely these rounds pin it down.

    Rounds of one run share its stretch of machine noise, so runs taken at
    other times spread wider than this. Seeded: the same rounds always print
    the same interval.
    """
    rng = random.Random(0)
    medians = sorted(
        statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples)
    )
    tail = (1 - share) / 2
    return medians[int(tail * resamples)], medians[min(resamples - 1, int((1 - tail) * resamples))]


if __name__ == "__main__":
    sys.exit(main())
