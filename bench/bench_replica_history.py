"""The long run of the replica history check: chd replicas on one Redis, with faults.

Starts a redis-server (AOF on, ``--appendonly yes --appendfsync everysec``)
and 2 or 4 ``chd serve --backend redis --buffer-size 1000`` replicas, drives
``--clients`` threads through ``--ops`` mixed operations (store, read all,
remove by seq, configure, mark) on ``--conversations`` shared conversations,
each operation through a random replica, optionally injects one fault
mid-run, then reads every conversation through a fresh replica and checks
the whole history with tests/history_check.py (the anomaly kinds are listed
in its docstring).

Faults (``--fault``), injected once ``--fault-at`` of the operations are done:

* ``kill-replica``  SIGKILL one replica (and its summarizer child), restart it 1 s later
* ``stop-redis``    SIGSTOP redis-server for 3 s, then SIGCONT
* ``restart-redis`` SIGKILL redis-server, start it again 1 s later from its AOF

Operations that fail with anything but a definite error (UNAVAILABLE,
DEADLINE_EXCEEDED...) are indeterminate: their effect may or may not exist.

    python bench/bench_replica_history.py                       # 2 replicas, 10,000 ops, no fault
    python bench/bench_replica_history.py --replicas 4 --fault kill-replica
    python bench/bench_replica_history.py --fault restart-redis --ops 20000

Exit status: 0 without anomalies, 1 with.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.history_check import (  # noqa: E402
    Cluster,
    History,
    Workload,
    anomaly_counts,
    check_history,
    final_check,
    format_report,
    run_workload,
    scrub_environment,
)

FAULTS = ("none", "kill-replica", "stop-redis", "restart-redis")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--replicas", type=int, choices=(2, 3, 4), default=2, help="chd replicas (default 2)"
    )
    parser.add_argument(
        "--backend",
        choices=("redis", "disk"),
        default="redis",
        help="shared storage: one redis-server, or one data dir opened by every process",
    )
    parser.add_argument(
        "--ops", type=int, default=10_000, help="operations in all (default 10,000)"
    )
    parser.add_argument(
        "--conversations", type=int, default=4, help="shared conversations (default 4)"
    )
    parser.add_argument("--clients", type=int, default=8, help="client threads (default 8)")
    parser.add_argument(
        "--fault", choices=FAULTS, default="none", help="fault injected mid-run (default none)"
    )
    parser.add_argument(
        "--fault-at",
        type=float,
        default=0.4,
        help="share of the operations done before the fault (default 0.4)",
    )
    parser.add_argument(
        "--buffer-size",
        type=int,
        default=1000,
        help="the replicas' --buffer-size, and what configure sets (default 1000: no evictions)",
    )
    parser.add_argument(
        "--small-buffers",
        action="store_true",
        help="configure buffers of 6-12 utterances, so stores evict",
    )
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="deadline of each call, seconds (default 5)"
    )
    parser.add_argument(
        "--converge",
        type=float,
        default=5.0,
        help="seconds old replicas get to read what the fresh one reads (default 5)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--show", type=int, default=10, help="anomalies printed in full (default 10)"
    )
    parser.add_argument(
        "--json", action="store_true", help="also print the summary as one JSON line"
    )
    parser.add_argument("--keep", action="store_true", help="keep the Redis directory (printed)")
    return parser.parse_args(argv)


def inject(fault: str, cluster: Cluster, log: list[str], began: float) -> None:
    stamp = lambda: f"{time.monotonic() - began:7.2f}s"  # noqa: E731
    if fault == "kill-replica":
        victim = cluster.replicas[0]
        log.append(f"{stamp()} SIGKILL replica {victim.name} (pid {victim.pid}, {victim.target})")
        victim.kill()
        time.sleep(1.0)
        victim.start()
        log.append(f"{stamp()} replica {victim.name} restarted on {victim.target}")
    elif fault == "stop-redis":
        log.append(f"{stamp()} SIGSTOP redis-server")
        cluster.pause_redis()
        try:
            time.sleep(3.0)
        finally:
            cluster.resume_redis()
        log.append(f"{stamp()} SIGCONT redis-server")
    elif fault == "restart-redis":
        log.append(f"{stamp()} SIGKILL redis-server")
        cluster.kill_redis()
        time.sleep(1.0)
        cluster.restart_redis()
        log.append(f"{stamp()} redis-server restarted from its AOF on port {cluster.redis.port}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.backend == "disk" and args.fault in ("stop-redis", "restart-redis"):
        print(f"--fault {args.fault} needs --backend redis", file=sys.stderr)
        return 2
    scrub_environment()
    directory = Path(tempfile.mkdtemp(prefix="chd-history-"))
    began = time.monotonic()
    cluster = None
    fault_log: list[str] = []
    try:
        cluster = Cluster(
            directory, replica_args=("--buffer-size", str(args.buffer_size)), backend=args.backend
        )
        replicas = cluster.start_replicas(args.replicas)
        run = uuid.uuid4().hex[:8]
        names = [f"bench-{run}-{i}" for i in range(args.conversations)]
        buffer_sizes = (
            (6, 9, 12) if args.small_buffers else (args.buffer_size, args.buffer_size - 1)
        )
        workload = Workload(
            conversations=names,
            clients=args.clients,
            ops=args.ops,
            buffer_sizes=buffer_sizes,
            timeout=args.timeout,
            seed=args.seed,
            tag=f"{run}-",
        )
        history = History()
        fault_errors: list[BaseException] = []
        load_done = threading.Event()

        def fault_thread() -> None:
            try:
                while len(history) < args.fault_at * args.ops and not load_done.is_set():
                    time.sleep(0.01)
                if not load_done.is_set():
                    inject(args.fault, cluster, fault_log, began)
            except BaseException as error:  # reported at the end
                fault_errors.append(error)

        injector = (
            threading.Thread(target=fault_thread, daemon=True) if args.fault != "none" else None
        )
        print(
            f"{args.replicas} replicas on {args.backend} {cluster.url}, {args.clients} clients, {args.ops} ops "
            f"on {args.conversations} conversations, fault {args.fault}",
            flush=True,
        )
        started = time.monotonic()
        if injector:
            injector.start()
        load_seconds = run_workload(history, replicas, workload)
        load_done.set()
        if injector:
            injector.join()
        if fault_errors:
            raise RuntimeError(f"the fault could not be injected: {fault_errors[0]!r}")
        fresh = cluster.fresh_replica()
        divergence = final_check(history, replicas, fresh, names, converge=args.converge)
        check_started = time.monotonic()
        anomalies = check_history(history, default_buffer_size=args.buffer_size) + divergence
        check_seconds = time.monotonic() - check_started
        stats = history.stats()
        counts = anomaly_counts(anomalies)
        for line in fault_log:
            print("fault:", line)
        print(
            f"load: {load_seconds:.1f}s, {stats['ops'] / max(load_seconds, 1e-9):.0f} ops/s "
            f"(started {started - began:.1f}s in); check: {check_seconds:.1f}s"
        )
        print(
            f"ops {stats['ops']}  acknowledged {stats['acknowledged']}  failed {stats['failed']}  "
            f"indeterminate {stats['indeterminate']}"
        )
        print("by kind:", json.dumps(stats["by_kind_status"], sort_keys=True))
        print("error codes:", json.dumps(stats["error_codes"], sort_keys=True))
        print(
            f"anomalies: {sum(counts.values())}",
            json.dumps(counts, sort_keys=True) if counts else "",
        )
        if anomalies:
            print(format_report(anomalies, history, limit=args.show))
        print(f"total: {time.monotonic() - began:.1f}s")
        if args.json:
            print(
                json.dumps(
                    {
                        "replicas": args.replicas,
                        "fault": args.fault,
                        "ops": stats["ops"],
                        "acknowledged": stats["acknowledged"],
                        "failed": stats["failed"],
                        "indeterminate": stats["indeterminate"],
                        "anomalies": counts,
                        "load_seconds": round(load_seconds, 2),
                    },
                    sort_keys=True,
                )
            )
        return 1 if anomalies else 0
    finally:
        if cluster is not None:
            cluster.stop()
        if args.keep:
            print(f"kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
