"""Replicas sharing one Redis, checked as a black box by a history checker.

Real ``chd serve --backend redis`` processes on one real redis-server; client
threads do mixed stores, full reads, removes by seq, configures and marks
through random replicas; tests/history_check.py then checks every read
against the acknowledged writes, on texts at seqs (see its docstring for the
anomaly kinds), and a fresh replica started after the load must read exactly
what was acknowledged, as must every old replica within a few seconds.

The long run with faults is ``python bench/bench_replica_history.py``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.history_check import (
    INDETERMINATE,
    MARK,
    OK,
    READ,
    REMOVE,
    STORE,
    ChdClient,
    Cluster,
    History,
    Op,
    Workload,
    check_history,
    final_check,
    format_report,
    run_workload,
    summary_check,
)

BUFFER = 1000  # replicas run with --buffer-size 1000: no evictions unless a test configures them


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A redis-server (AOF on) for this test; every replica started on it is stopped at the end."""
    started = Cluster(tmp_path, replica_args=("--buffer-size", str(BUFFER)))
    try:
        yield started
    finally:
        started.stop()


def _run_and_check(
    cluster: Cluster,
    replicas: int,
    clients: int,
    conversations: int,
    seconds: float,
    buffer_sizes: tuple[int, ...] = (BUFFER, BUFFER - 1),
    seed: int = 1,
    summaries: bool = False,
) -> None:
    old = cluster.start_replicas(replicas)
    run = uuid.uuid4().hex[:8]
    names = [f"hist-{run}-{i}" for i in range(conversations)]
    history = History()
    run_workload(
        history,
        old,
        Workload(
            conversations=names,
            clients=clients,
            duration=seconds,
            buffer_sizes=buffer_sizes,
            seed=seed,
            tag=f"{run}-",
            at_least=80,  # the check below needs more than 50 acknowledged
        ),
    )
    fresh = cluster.fresh_replica()
    divergence = final_check(history, old, fresh, names, converge=3.0)
    anomalies = check_history(history, default_buffer_size=BUFFER) + divergence
    if summaries:
        anomalies += summary_check(history, fresh, names)
    stats = history.stats()
    assert stats["acknowledged"] > 50, f"the load did too little to judge: {stats}"
    if anomalies:
        pytest.fail("history anomalies:\n" + format_report(anomalies, history), pytrace=False)


def test_two_replicas_mixed_load(cluster: Cluster) -> None:
    _run_and_check(cluster, replicas=2, clients=4, conversations=2, seconds=4.0, seed=11)


def test_four_replicas_mixed_load(cluster: Cluster) -> None:
    _run_and_check(cluster, replicas=4, clients=6, conversations=4, seconds=4.0, seed=12)


def test_two_replicas_small_buffers_evict_and_the_summary_holds_what_left(tmp_path: Path) -> None:
    """Configures small buffers, so stores evict and replicas fold: every absence must be a reported
    (or possible) eviction, and with a summary budget that holds them all, every text that left the
    buffer is in the summary a fresh replica reads, and no removed one (the loser of a race once
    folded a summary without the winner's utterance)."""
    # --archive-evicted: a remove rebuilds the summary segments it touches from the originals
    # (without it, documented, a segment holding a removed utterance is dropped whole).
    cluster = Cluster(
        tmp_path,
        replica_args=(
            "--buffer-size",
            str(BUFFER),
            "--summary-token-limit",
            "60000",
            "--archive-evicted",
        ),
    )
    try:
        _run_and_check(
            cluster,
            replicas=2,
            clients=3,
            conversations=2,
            seconds=3.0,
            buffer_sizes=(6, 9, 12),
            seed=13,
            summaries=True,
        )
    finally:
        cluster.stop()


def test_two_disk_processes_on_one_data_dir_mixed_load(tmp_path: Path) -> None:
    """The same checker on the disk backend: two `chd serve --backend disk` processes sharing one
    directory (diskcache lets them; each checks its cached state against the stored meta record)."""
    cluster = Cluster(tmp_path, replica_args=("--buffer-size", str(BUFFER)), backend="disk")
    try:
        _run_and_check(cluster, replicas=2, clients=4, conversations=2, seconds=3.0, seed=14)
    finally:
        cluster.stop()


def test_simultaneous_stores_through_two_replicas(cluster: Cluster) -> None:
    """One store through each replica at the same moment into a new conversation; both
    replicas must then read the (seq, text) pairs Redis holds (read through a replica
    that never saw the conversation before), 20 times."""
    a, b = cluster.start_replicas(2)
    reader = cluster.fresh_replica("reader")
    history = History()
    run = uuid.uuid4().hex[:8]
    writers = [ChdClient(history, "w0"), ChdClient(history, "w1")]
    checker = ChdClient(history, "check")
    for writer, replica in zip(writers, (a, b)):  # connect before the first barrier
        writer.call(replica, f"race-{run}-warmup", READ, {})
    failures: list[str] = []
    try:
        for round_ in range(20):
            conversation = f"race-{run}-{round_}"
            barrier = threading.Barrier(2)
            acks: list = [None, None]

            def store(i: int) -> None:
                barrier.wait()
                acks[i] = writers[i].call(
                    (a, b)[i], conversation, STORE, {"text": f"r{round_}-via-{(a, b)[i].name}"}
                )

            threads = [threading.Thread(target=store, args=(i,)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            truth = checker.call(reader, conversation, READ, {})
            views = {
                replica.name: checker.call(replica, conversation, READ, {}) for replica in (a, b)
            }

            def pairs(op):
                return (
                    [(u[0], u[1]) for u in op.result["utterances"]]
                    if op.status == OK
                    else f"{op.status} {op.code}"
                )

            acked = sorted((op.result["seq"], op.args["text"]) for op in acks if op.status == OK)
            problems = []
            if any(op.status != OK for op in acks):
                problems.append(
                    "a store was not acknowledged: " + "; ".join(op.describe() for op in acks)
                )
            if pairs(truth) != acked:
                problems.append(f"Redis (reader) holds {pairs(truth)}")
            for name, view in views.items():
                if pairs(view) != pairs(truth):
                    problems.append(f"{name} reads {pairs(view)}")
            if problems:
                failures.append(f"round {round_}: acknowledged {acked}; " + "; ".join(problems))
    finally:
        for client in (*writers, checker):
            client.close()
    anomalies = check_history(history, default_buffer_size=BUFFER)
    report = format_report(anomalies, history)
    if failures or anomalies:
        pytest.fail(
            f"{len(failures)} of 20 rounds disagree:\n  "
            + "\n  ".join(failures[:5])
            + "\n"
            + report,
            pytrace=False,
        )


def _op(
    id_: int,
    kind: str,
    args: dict,
    start: float,
    end: float,
    status: str = OK,
    result: dict | None = None,
    replica: str = "r0",
    code: str | None = None,
) -> Op:
    return Op(id_, "c0", replica, "conv", kind, args, start, end, status, result, code)


def _store(
    id_: int, text: str, seq: int, start: float, end: float, evicted: tuple = (), **kw
) -> Op:
    return _op(
        id_,
        STORE,
        {"text": text},
        start,
        end,
        result={"seq": seq, "text": text, "important": False, "evicted": list(evicted)},
        **kw,
    )


def _read(id_: int, pairs: list, start: float, end: float, replica: str = "r0") -> Op:
    return _op(
        id_,
        READ,
        {},
        start,
        end,
        result={"utterances": [(s, t, imp) for s, t, imp in pairs]},
        replica=replica,
    )


def _remove(id_: int, seq: int, start: float, end: float) -> Op:
    return _op(id_, REMOVE, {"seq": seq}, start, end, result={"removed": [seq]})


@pytest.mark.parametrize(
    "ops, kinds",
    [
        # the store of seq 1 was acknowledged before the read started: it must be in it
        ([_store(1, "a", 1, 0, 1), _read(2, [], 2, 3)], {"missing-acked-store"}),
        # ... unless a remove of seq 1 may have happened first (here concurrent with the read)
        ([_store(1, "a", 1, 0, 1), _remove(2, 1, 2, 6), _read(3, [], 4, 5)], set()),
        # ... or a store reported it evicted
        (
            [
                _store(1, "a", 1, 0, 1),
                _store(2, "b", 2, 1, 2, evicted=(1,)),
                _read(3, [(2, "b", False)], 3, 4),
            ],
            set(),
        ),
        # a seq an earlier read saw is gone from a later one
        (
            [
                _store(1, "a", 1, 0, 9, status=INDETERMINATE),
                _read(2, [(1, "a", False)], 1, 2),
                _read(3, [], 3, 4, replica="r1"),
            ],
            {"nonmonotonic-read"},
        ),
        # removed before the read started, still there; then gone; then back
        (
            [
                _store(1, "a", 1, 0, 1),
                _remove(2, 1, 2, 3),
                _read(3, [(1, "a", False)], 4, 5),
                _read(4, [], 6, 7),
                _read(5, [(1, "a", False)], 8, 9),
            ],
            {"read-removed-seq", "resurrected-seq"},
        ),
        # issue 24: the loser of a concurrent commit reads its own text at both seqs
        (
            [
                _store(1, "a", 1, 0, 1),
                _store(2, "b", 2, 0, 1, replica="r1"),
                _read(3, [(1, "b", False), (2, "b", False)], 2, 3, replica="r1"),
            ],
            {"seq-text-conflict", "text-at-two-seqs"},
        ),
        # a text nobody stored; a store that failed; seqs out of order
        ([_read(1, [(1, "x", False)], 0, 1)], {"phantom-text"}),
        (
            [
                _op(1, STORE, {"text": "a"}, 0, 1, status="fail", code="INVALID_ARGUMENT"),
                _read(2, [(1, "a", False)], 2, 3),
            ],
            {"failed-store-visible"},
        ),
        ([_store(1, "a", 2, 0, 1), _store(2, "b", 1, 2, 3)], {"seq-order"}),
        # marked important before the read started, read unmarked
        (
            [
                _store(1, "a", 1, 0, 1),
                _op(
                    2,
                    MARK,
                    {"seq": 1, "important": True},
                    2,
                    3,
                    result={"seq": 1, "text": "a", "important": True},
                ),
                _read(3, [(1, "a", False)], 4, 5),
            ],
            {"lost-mark"},
        ),
        # NOT_FOUND for a seq that is there and that nothing removed
        (
            [
                _store(1, "a", 1, 0, 1),
                _op(2, REMOVE, {"seq": 1}, 2, 3, status="fail", code="NOT_FOUND"),
            ],
            {"spurious-not-found"},
        ),
    ],
    ids=[
        "lost-store",
        "concurrent-remove",
        "eviction",
        "nonmonotonic",
        "removed-resurrected",
        "issue-24",
        "phantom",
        "failed-store",
        "seq-order",
        "lost-mark",
        "not-found",
    ],
)
def test_checker_flags_known_anomalies(ops: list, kinds: set) -> None:
    """The checker itself, on hand-made histories: it must not pass what it should catch."""
    assert {a.kind for a in check_history(ops)} == kinds
