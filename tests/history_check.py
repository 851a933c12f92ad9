"""A Jepsen/Elle-style history checker for chd replicas sharing one Redis.

Black box: everything here talks to ``chd serve`` processes over gRPC only
(``data.operation`` queries, docs/protocol.md) and judges what a user would
see. Three parts:

* **Recording.** :class:`History` keeps every operation as an invocation
  (client, replica, conversation, kind, args, start) and a completion
  (``ok`` / ``fail`` / ``indeterminate``, parsed result, end), on
  ``time.monotonic``. :class:`ChdClient` performs one operation and records
  it. A definite error (``INVALID_ARGUMENT``, ``NOT_FOUND``,
  ``RESOURCE_EXHAUSTED``...) is ``fail``: the docs promise a failed query
  changes nothing. Anything else (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``,
  ``CANCELLED``, ``INTERNAL``...) is ``indeterminate``: its effect may or may
  not exist.
* **Load.** :func:`run_workload` drives N client threads doing mixed
  store / read-all / remove-by-seq / configure / mark operations on a few
  shared conversations, each operation through a random replica.
* **Checking.** :func:`check_history` verifies, on texts *at* seqs:

  ``seq-text-conflict``     one seq seen (acknowledged or read) with two texts
  ``text-at-two-seqs``      one store's text seen at two seqs
  ``store-ack-wrong-text``  a store acknowledged another text than it sent
  ``phantom-text``          a read shows a text nobody stored
  ``failed-store-visible``  a read shows a store that failed definitely
  ``read-from-future``      a read shows a store invoked after the read ended
  ``missing-acked-store``   a store acknowledged before a read started is not
                            in it, and no remove of that seq (invoked before
                            the read ended) nor an eviction explains it
  ``nonmonotonic-read``     a seq an earlier read (ended before this one
                            started) saw is gone, with no remove/eviction
  ``read-removed-seq``      a read shows a seq whose remove was acknowledged
                            before the read started
  ``read-evicted-seq``      ... whose eviction was acknowledged before
  ``resurrected-seq``       a seq gone (legitimately) from a read is back later
  ``spurious-not-found``    remove/mark of a seq answered NOT_FOUND although
                            the seq was visible and nothing removed it
  ``seq-order``             a store acknowledged before another was invoked
                            got a higher seq (seqs are monotonic)
  ``read-order``            a read's seqs are not strictly ascending
  ``lost-mark``             a read's ``important`` flag matches no mark that
                            could be the last one
  ``internal-error``        the daemon answered INTERNAL / UNKNOWN (a bug,
                            by docs/protocol.md)
  ``replica-divergence``    (final check) an old replica still reads
                            something else than a fresh one after a grace
  ``final-read-failed``     (final check) the fresh replica could not read

  (d) is checked pairwise in real time (a later read may not lose what an
  earlier one saw, nor regain what an earlier one legitimately lost), not by
  searching for one total order of all operations.

  :func:`final_check` reads every conversation through a FRESH replica and
  then polls every old replica until it reads the same (seq, text) pairs.
  Its reads go into the history, so the fresh read must show exactly the
  acknowledged stores minus the acknowledged removes (indeterminate ones may
  go either way).

Evictions: a seq missing from a read is explained by eviction when an
acknowledged store/configure invoked before the read ended reported it in
``evicted``, or when an indeterminate store/configure could have evicted
unreported (possible only if the stores that may exist minus the removes
certainly done exceed the smallest buffer_size ever configured).

The cluster helpers at the end start redis-server (tests/redis_support.py)
and ``chd serve --backend redis`` replicas (tests/conftest.py DaemonProcess)
and stop them, descendants included.
"""

from __future__ import annotations

import bisect
import itertools
import os
import random
import re
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format

from chd.v1 import daemon_pb2, daemon_pb2_grpc

__all__ = [
    "OK",
    "FAIL",
    "INDETERMINATE",
    "STORE",
    "READ",
    "REMOVE",
    "CONFIGURE",
    "MARK",
    "Op",
    "History",
    "ChdClient",
    "Anomaly",
    "Workload",
    "run_workload",
    "check_history",
    "final_check",
    "summary_check",
    "format_report",
    "anomaly_counts",
    "Replica",
    "Cluster",
    "scrub_environment",
]

OK, FAIL, INDETERMINATE, PENDING = "ok", "fail", "indeterminate", "pending"
STORE, READ, REMOVE, CONFIGURE, MARK = "store", "read", "remove", "configure", "mark"
INF = float("inf")

# Codes after which nothing was changed (docs/protocol.md "A failed query
# changes nothing"; RESOURCE_EXHAUSTED also covers gRPC's own concurrency
# refusal). Every other code may hide an applied change: indeterminate.
DEFINITE_FAILURES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
BUG_CODES = frozenset({grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})


# --------------------------------------------------------------------------
# Recording


@dataclass(slots=True)
class Op:
    id: int
    client: str
    replica: str
    conversation: str
    kind: str
    args: dict[str, Any]
    start: float
    end: float | None = None
    status: str = PENDING
    result: dict[str, Any] | None = None
    code: str | None = None  # gRPC status code name of a failed call
    error: str | None = None

    def describe(self) -> str:
        end = f"{self.end:.3f}" if self.end is not None else "?"
        return (
            f"op#{self.id} {self.kind}{self.args} by {self.client} via {self.replica} "
            f"[{self.start:.3f}..{end}] {self.status}{' ' + self.code if self.code else ''}"
        )


class History:
    """Every operation of a run, thread-safe; times are ``time.monotonic``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.ops: list[Op] = []

    def invoke(
        self, client: str, replica: str, conversation: str, kind: str, args: dict[str, Any]
    ) -> Op:
        with self._lock:
            op = Op(
                next(self._ids), client, replica, conversation, kind, dict(args), time.monotonic()
            )
            self.ops.append(op)
        return op

    def complete(
        self,
        op: Op,
        status: str,
        result: dict[str, Any] | None = None,
        code: str | None = None,
        error: str | None = None,
    ) -> Op:
        op.end = time.monotonic()
        op.result, op.code, op.error = result, code, error
        op.status = status  # last: a reader that sees the status sees the rest
        return op

    def __len__(self) -> int:
        return len(self.ops)

    def snapshot(self) -> list[Op]:
        with self._lock:
            return list(self.ops)

    def conversations(self) -> list[str]:
        return sorted({op.conversation for op in self.snapshot()})

    def stats(self) -> dict[str, Any]:
        ops = self.snapshot()
        by_status = Counter(op.status for op in ops)
        return {
            "ops": len(ops),
            "acknowledged": by_status[OK],
            "failed": by_status[FAIL],
            "indeterminate": by_status[INDETERMINATE],
            "pending": by_status[PENDING],
            "by_kind": dict(Counter(op.kind for op in ops)),
            "by_kind_status": dict(Counter(f"{op.kind}:{op.status}" for op in ops)),
            "error_codes": dict(Counter(op.code for op in ops if op.code)),
        }


def _utterance(raw: dict[str, Any]) -> tuple[int, str, bool]:
    return int(raw["seq"]), str(raw["text"]), bool(raw.get("important", False))


def _parse(kind: str, response: daemon_pb2.QueryResponse) -> dict[str, Any]:
    result = json_format.MessageToDict(response.result)
    parsed: dict[str, Any] = {"operation": response.operation}
    if kind == STORE:
        seq, text, important = _utterance(result["utterance"])
        parsed.update(
            seq=seq,
            text=text,
            important=important,
            evicted=[int(s) for s in result.get("evicted", [])],
        )
    elif kind == READ:
        parsed["utterances"] = [_utterance(u) for u in result.get("utterances", [])]
    elif kind == REMOVE:
        parsed["removed"] = [int(s) for s in result.get("removed", [])]
    elif kind == CONFIGURE:
        parsed["evicted"] = [int(s) for s in result.get("evicted", [])]
        settings = result.get("settings", {})
        if "buffer_size" in settings:
            parsed["buffer_size"] = int(settings["buffer_size"])
    elif kind == MARK:
        seq, text, important = _utterance(result["utterance"])
        parsed.update(seq=seq, text=text, important=important)
    return parsed


def _request(kind: str, conversation: str, args: dict[str, Any]) -> daemon_pb2.QueryRequest:
    """``args`` are the operation's data fields; ``query`` (read only) sends text instead."""
    request = daemon_pb2.QueryRequest()
    request.metadata.update({"conversation_id": conversation})
    if kind == READ and args.get("query"):
        request.query = args["query"]
        return request
    operation = {
        STORE: "store",
        READ: "retrieve",
        REMOVE: "remove",
        CONFIGURE: "configure",
        MARK: "mark",
    }[kind]
    request.data.update({"operation": operation, **{k: v for k, v in args.items() if k != "query"}})
    return request


class ChdClient:
    """One logical client: performs operations against replicas and records them."""

    def __init__(self, history: History, name: str, timeout: float = 5.0) -> None:
        self.history = history
        self.name = name
        self.timeout = timeout
        self._channels: dict[str, tuple[grpc.Channel, daemon_pb2_grpc.DaemonStub]] = {}

    def _stub(self, target: str) -> daemon_pb2_grpc.DaemonStub:
        if target not in self._channels:
            channel = grpc.insecure_channel(target)
            self._channels[target] = (channel, daemon_pb2_grpc.DaemonStub(channel))
        return self._channels[target][1]

    def call(self, replica: Replica, conversation: str, kind: str, args: dict[str, Any]) -> Op:
        target = replica.target
        op = self.history.invoke(self.name, replica.name, conversation, kind, args)
        try:
            response = self._stub(target).Query(
                _request(kind, conversation, args), timeout=self.timeout
            )
        except grpc.RpcError as error:
            code = error.code()
            status = FAIL if code in DEFINITE_FAILURES else INDETERMINATE
            return self.history.complete(
                op, status, code=code.name, error=(error.details() or "")[:300]
            )
        except Exception as error:  # a client-side failure: the call may have gone out
            return self.history.complete(op, INDETERMINATE, code="CLIENT", error=repr(error)[:300])
        try:
            parsed = _parse(kind, response)
        except Exception as error:  # an answer without the documented fields
            return self.history.complete(
                op, INDETERMINATE, code="MALFORMED", error=repr(error)[:300]
            )
        return self.history.complete(op, OK, parsed)

    def close(self) -> None:
        for channel, _ in self._channels.values():
            channel.close()
        self._channels.clear()


# --------------------------------------------------------------------------
# Load


@dataclass
class Workload:
    conversations: Sequence[str]
    clients: int = 4
    ops: int | None = None  # stop after this many operations in all ...
    duration: float | None = None  # ... or after this many seconds
    # ... but not before this many were issued (at most 10 x duration): a loaded machine
    # does less in the same seconds, and a test needs enough operations to judge.
    at_least: int = 0
    mix: dict[str, float] = field(
        default_factory=lambda: {STORE: 0.36, READ: 0.34, REMOVE: 0.14, MARK: 0.08, CONFIGURE: 0.08}
    )
    buffer_sizes: Sequence[int] = (1000, 999)  # configure alternates among these
    read_query_share: float = 0.2  # reads sent as the query "Get all utterances"
    timeout: float = 5.0
    seed: int = 1
    tag: str = ""  # prefix of the stored texts


class _Known:
    """Seqs clients have learned per conversation, to pick remove/mark targets."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seqs: dict[str, set[int]] = defaultdict(set)

    def add(self, conversation: str, seqs: Iterable[int]) -> None:
        with self._lock:
            self._seqs[conversation].update(seqs)

    def forget(self, conversation: str, seqs: Iterable[int]) -> None:
        with self._lock:
            self._seqs[conversation].difference_update(seqs)

    def pick(self, conversation: str, rng: random.Random) -> int | None:
        with self._lock:
            seqs = self._seqs[conversation]
            return rng.choice(tuple(seqs)) if seqs else None


def run_workload(
    history: History,
    replicas: Sequence[Replica],
    workload: Workload,
    stop: threading.Event | None = None,
) -> float:
    """Runs the client threads to the end of the workload; returns the seconds it took."""
    if workload.ops is None and workload.duration is None:
        raise ValueError("a workload needs ops or duration")
    stop = stop or threading.Event()
    known = _Known()
    budget_lock = threading.Lock()
    issued = [0]
    began = time.monotonic()
    deadline = began + workload.duration if workload.duration is not None else INF
    kinds = list(workload.mix)
    weights = [workload.mix[k] for k in kinds]

    longest = began + 10 * workload.duration if workload.duration is not None else INF

    def take() -> bool:
        now = time.monotonic()
        if stop.is_set() or now >= longest:
            return False
        with budget_lock:
            if now >= deadline and issued[0] >= workload.at_least:
                return False
            if workload.ops is not None and issued[0] >= workload.ops:
                return False
            issued[0] += 1
            return True

    def client_loop(index: int) -> None:
        rng = random.Random(workload.seed * 7919 + index)
        client = ChdClient(history, f"c{index}", workload.timeout)
        number = 0
        try:
            while take():
                number += 1
                conversation = rng.choice(list(workload.conversations))
                replica = rng.choice(list(replicas))
                kind = rng.choices(kinds, weights)[0]
                seq = known.pick(conversation, rng) if kind in (REMOVE, MARK) else None
                if kind in (REMOVE, MARK) and seq is None:
                    kind = STORE
                if kind == STORE:
                    op = client.call(
                        replica, conversation, STORE, {"text": f"{workload.tag}c{index}-op{number}"}
                    )
                    if op.status == OK:
                        known.add(conversation, [op.result["seq"]])
                elif kind == READ:
                    args = (
                        {"query": "Get all utterances"}
                        if rng.random() < workload.read_query_share
                        else {}
                    )
                    op = client.call(replica, conversation, READ, args)
                    if op.status == OK:
                        seen = [u[0] for u in op.result["utterances"]]
                        known.add(conversation, seen)
                elif kind == REMOVE:
                    op = client.call(replica, conversation, REMOVE, {"seq": seq})
                    if op.status == OK or op.code == "NOT_FOUND":
                        known.forget(conversation, [seq])
                elif kind == MARK:
                    client.call(
                        replica, conversation, MARK, {"seq": seq, "important": rng.random() < 0.6}
                    )
                else:
                    op = client.call(
                        replica,
                        conversation,
                        CONFIGURE,
                        {"buffer_size": rng.choice(list(workload.buffer_sizes))},
                    )
                    if op.status == OK:
                        known.forget(conversation, op.result["evicted"])
        finally:
            client.close()

    threads = [
        threading.Thread(target=client_loop, args=(i,), name=f"history-client-{i}", daemon=True)
        for i in range(workload.clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - began


# --------------------------------------------------------------------------
# Checking


@dataclass
class Anomaly:
    kind: str
    conversation: str
    seq: int | None
    expected: Any
    got: Any
    replica: str | None
    op: int | None
    detail: str = ""
    count: int = 1

    def line(self) -> str:
        where = f"seq {self.seq}" if self.seq is not None else "-"
        return (
            f"{self.kind}: conversation {self.conversation} {where}: expected {self.expected!r}, "
            f"read {self.got!r} via replica {self.replica} (op#{self.op}, seen {self.count}x)"
            + (f"; {self.detail}" if self.detail else "")
        )


class _Anomalies:
    """Collects anomalies, one per (kind, conversation, seq, expected, got, replica), counting repeats."""

    def __init__(self) -> None:
        self.items: dict[tuple, Anomaly] = {}

    def add(
        self,
        kind: str,
        conversation: str,
        seq: int | None,
        expected: Any,
        got: Any,
        op: Op | None,
        detail: str = "",
    ) -> None:
        replica = op.replica if op is not None else None
        key = (kind, conversation, seq, repr(expected), repr(got), replica)
        if key in self.items:
            self.items[key].count += 1
        else:
            self.items[key] = Anomaly(
                kind,
                conversation,
                seq,
                expected,
                got,
                replica,
                op.id if op is not None else None,
                detail,
            )


def check_history(
    history: History | Sequence[Op], default_buffer_size: int = 1000
) -> list[Anomaly]:
    """Every anomaly of the history (see the module docstring), oldest kinds first."""
    ops = history.snapshot() if isinstance(history, History) else list(history)
    found = _Anomalies()
    by_conversation: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.status == PENDING:
            continue  # never completed: treated as not issued at all would be wrong for writes
        by_conversation[op.conversation].append(op)
        if op.code in {c.name for c in BUG_CODES}:
            found.add(
                "internal-error",
                op.conversation,
                op.args.get("seq"),
                "a documented status",
                op.code,
                op,
                op.error or "",
            )
    # A pending write (a client thread still waiting) may have taken effect: as indeterminate.
    for op in ops:
        if op.status == PENDING and op.kind != READ:
            op_copy = Op(
                op.id,
                op.client,
                op.replica,
                op.conversation,
                op.kind,
                op.args,
                op.start,
                INF,
                INDETERMINATE,
            )
            by_conversation[op.conversation].append(op_copy)
    for conversation, conv_ops in sorted(by_conversation.items()):
        _check_conversation(conversation, conv_ops, default_buffer_size, found)
    order = list(dict.fromkeys(a.kind for a in found.items.values()))
    return sorted(found.items.values(), key=lambda a: (order.index(a.kind), a.op or 0))


def _check_conversation(
    conv: str, ops: list[Op], default_buffer_size: int, found: _Anomalies
) -> None:
    stores = [o for o in ops if o.kind == STORE]
    store_by_text: dict[str, Op] = {o.args["text"]: o for o in stores}
    acked_stores = sorted((o for o in stores if o.status == OK), key=lambda o: o.end)
    reads = sorted((o for o in ops if o.kind == READ and o.status == OK), key=lambda o: o.start)
    marks = [o for o in ops if o.kind == MARK]
    removes = [o for o in ops if o.kind == REMOVE]
    configures = [o for o in ops if o.kind == CONFIGURE]

    # ---- (a) seq <-> text: acknowledgements first, then every observation in completion order
    canonical: dict[int, tuple[str, Op]] = {}
    text_seqs: dict[str, dict[int, Op]] = defaultdict(dict)
    for o in acked_stores:
        sent, seq = o.args["text"], o.result["seq"]
        if o.result["text"] != sent:
            found.add("store-ack-wrong-text", conv, seq, sent, o.result["text"], o)
        if seq in canonical and canonical[seq][0] != sent:
            found.add(
                "seq-text-conflict",
                conv,
                seq,
                canonical[seq][0],
                sent,
                o,
                f"two stores acknowledged at one seq ({canonical[seq][1].describe()})",
            )
        else:
            canonical.setdefault(seq, (sent, o))
        text_seqs[sent].setdefault(seq, o)

    observations: list[tuple[Op, int, str, bool]] = []
    for o in sorted((m for m in marks if m.status == OK), key=lambda m: m.end):
        observations.append((o, o.result["seq"], o.result["text"], o.result["important"]))
    for r in reads:
        seqs = [u[0] for u in r.result["utterances"]]
        if any(b <= a for a, b in zip(seqs, seqs[1:])):
            found.add("read-order", conv, None, "strictly ascending seqs", seqs[:50], r)
        for seq, text, important in r.result["utterances"]:
            observations.append((r, seq, text, important))
    observations.sort(key=lambda ob: ob[0].end)

    for op, seq, text, _ in observations:
        store = store_by_text.get(text)
        if store is None:
            found.add("phantom-text", conv, seq, None, text, op, "no store sent this text")
        elif store.status == FAIL:
            found.add(
                "failed-store-visible",
                conv,
                seq,
                None,
                text,
                op,
                f"its store failed definitely: {store.describe()}",
            )
        elif store.start > op.end:
            found.add(
                "read-from-future",
                conv,
                seq,
                None,
                text,
                op,
                f"store invoked later: {store.describe()}",
            )
        if seq not in canonical:
            canonical[seq] = (text, op)
        elif canonical[seq][0] != text:
            origin = canonical[seq][1]
            found.add(
                "seq-text-conflict",
                conv,
                seq,
                canonical[seq][0],
                text,
                op,
                f"{canonical[seq][0]!r} from {origin.kind} op#{origin.id} via {origin.replica}",
            )
        text_seqs[text].setdefault(seq, op)
    right_seq: dict[str, int] = {}
    for text, seqs in text_seqs.items():
        if len(seqs) > 1:
            store = store_by_text.get(text)
            right_seq[text] = (
                store.result["seq"] if store is not None and store.status == OK else min(seqs)
            )
    for op, seq, text, _ in observations:
        if text in right_seq and seq != right_seq[text]:
            found.add(
                "text-at-two-seqs",
                conv,
                seq,
                f"{text!r} only at seq {right_seq[text]}",
                text,
                op,
                f"one store, seen at seqs {sorted(text_seqs[text])}",
            )

    # ---- seqs are monotonic in real time
    ends = [o.end for o in acked_stores]
    prefix_max: list[tuple[int, Op]] = []
    for o in acked_stores:
        prev = prefix_max[-1] if prefix_max else (0, o)
        prefix_max.append(max(prev, (o.result["seq"], o), key=lambda p: p[0]))
    for o in acked_stores:
        i = bisect.bisect_left(ends, o.start)  # stores acknowledged before o was invoked
        if i and prefix_max[i - 1][0] >= o.result["seq"]:
            earlier = prefix_max[i - 1][1]
            found.add(
                "seq-order",
                conv,
                o.result["seq"],
                f"seq > {earlier.result['seq']}",
                o.result["seq"],
                o,
                f"{earlier.describe()} was acknowledged first",
            )

    # ---- what explains an absence
    removal_start: dict[int, float] = {}  # earliest remove of seq that may have happened
    removal_done: dict[int, tuple[float, Op]] = {}  # earliest acknowledged remove
    for o in removes:
        if o.status == FAIL:
            continue
        seq = o.args["seq"]
        removal_start[seq] = min(removal_start.get(seq, INF), o.start)
        if o.status == OK and seq in o.result["removed"]:
            if o.end < removal_done.get(seq, (INF, o))[0]:
                removal_done[seq] = (o.end, o)
    evicted_start: dict[int, float] = {}
    evicted_done: dict[int, tuple[float, Op]] = {}
    for o in itertools.chain(stores, configures):
        if o.status != OK:
            continue
        for seq in o.result["evicted"]:
            evicted_start[seq] = min(evicted_start.get(seq, INF), o.start)
            if o.end < evicted_done.get(seq, (INF, o))[0]:
                evicted_done[seq] = (o.end, o)
    # Unreported evictions: only an indeterminate store/configure can make one.
    blind_evictor_starts = sorted(
        o.start for o in itertools.chain(stores, configures) if o.status == INDETERMINATE
    )
    min_buffer = min(
        [default_buffer_size] + [o.args["buffer_size"] for o in configures if o.status != FAIL]
    )
    maybe_store_starts = sorted(o.start for o in stores if o.status != FAIL)
    sure_remove_ends = sorted(e for e, _ in removal_done.values())

    def absence_explained(seq: int, op: Op) -> bool:
        if removal_start.get(seq, INF) < op.end or evicted_start.get(seq, INF) < op.end:
            return True
        if blind_evictor_starts and blind_evictor_starts[0] < op.end:
            could_exist = bisect.bisect_left(maybe_store_starts, op.end)
            surely_removed = bisect.bisect_left(sure_remove_ends, op.start)
            return could_exist - surely_removed > min_buffer
        return False

    # ---- (b)(d) visibility: seqs known to exist (acknowledged, or seen) before an op started
    first_seen: dict[int, tuple[float, Op]] = {}
    for o in acked_stores:
        seq = o.result["seq"]
        if (
            canonical.get(seq, ("",))[0] == o.args["text"]
            and o.end < first_seen.get(seq, (INF,))[0]
        ):
            first_seen[seq] = (o.end, o)
    for op, seq, text, _ in observations:
        if canonical[seq][0] == text and op.end < first_seen.get(seq, (INF,))[0]:
            first_seen[seq] = (op.end, op)
    ack_end = {o.result["seq"]: o.end for o in acked_stores}

    gone_since: dict[int, float] = {}  # a legitimate absence was read, ending then (earliest)
    for r in reads:
        present = {u[0] for u in r.result["utterances"]}
        for seq, (seen_end, seen_op) in first_seen.items():
            if seen_end >= r.start or seq in present:
                continue
            if absence_explained(seq, r):
                gone_since[seq] = min(gone_since.get(seq, INF), r.end)
                continue
            text = canonical[seq][0]
            if ack_end.get(seq, INF) < r.start:
                found.add(
                    "missing-acked-store",
                    conv,
                    seq,
                    text,
                    None,
                    r,
                    f"store acknowledged {r.start - ack_end[seq]:.3f}s before the read started",
                )
            else:
                found.add(
                    "nonmonotonic-read",
                    conv,
                    seq,
                    text,
                    None,
                    r,
                    f"seen by {seen_op.kind} op#{seen_op.id} via {seen_op.replica}, "
                    f"{r.start - seen_end:.3f}s before this read started",
                )
    # NOT_FOUND answers are reads of one seq's absence.
    for o in itertools.chain(removes, marks):
        if o.code != "NOT_FOUND":
            continue
        seq = o.args["seq"]
        seen = first_seen.get(seq)
        if seen is None or seen[0] >= o.start:
            continue
        if absence_explained(seq, o):
            gone_since[seq] = min(gone_since.get(seq, INF), o.end)
        else:
            found.add(
                "spurious-not-found",
                conv,
                seq,
                canonical[seq][0],
                "NOT_FOUND",
                o,
                f"seen by {seen[1].kind} op#{seen[1].id} before; no remove or eviction",
            )

    # ---- (c) presence of what must be gone; important flags
    marks_of: dict[int, list[Op]] = defaultdict(list)
    for o in marks:
        if o.status != FAIL:
            marks_of[o.args["seq"]].append(o)
    for r in reads:
        for seq, text, important in r.result["utterances"]:
            done = removal_done.get(seq)
            if done and done[0] < r.start:
                found.add(
                    "read-removed-seq",
                    conv,
                    seq,
                    "absent",
                    text,
                    r,
                    f"removed by {done[1].describe()}",
                )
            gone = evicted_done.get(seq)
            if gone and gone[0] < r.start:
                found.add(
                    "read-evicted-seq",
                    conv,
                    seq,
                    "absent",
                    text,
                    r,
                    f"evicted by {gone[1].describe()}",
                )
            if gone_since.get(seq, INF) < r.start:
                found.add(
                    "resurrected-seq",
                    conv,
                    seq,
                    "absent",
                    text,
                    r,
                    "an earlier read or NOT_FOUND showed it gone after a remove/eviction",
                )
            values = _possible_flags(marks_of.get(seq, []), r)
            if important not in values:
                found.add(
                    "lost-mark",
                    conv,
                    seq,
                    sorted(values),
                    important,
                    r,
                    "important flag after marks "
                    + ", ".join(f"op#{m.id}={m.args['important']}" for m in marks_of.get(seq, [])),
                )


def _possible_flags(marks: list[Op], read: Op) -> set[bool]:
    done = [m for m in marks if m.status == OK and m.end < read.start]
    values: set[bool] = set() if done else {False}
    for m in marks:
        if m.start >= read.end:
            continue
        superseded = any(m.end is not None and m.end < later.start for later in done)
        if not superseded:
            values.add(bool(m.args["important"]))
    return values


def anomaly_counts(anomalies: Sequence[Anomaly]) -> dict[str, int]:
    """Distinct anomalies by kind (repeats of one are counted once)."""
    return dict(Counter(a.kind for a in anomalies))


def format_report(
    anomalies: Sequence[Anomaly], history: History | None = None, limit: int = 8
) -> str:
    lines = []
    if history is not None:
        stats = history.stats()
        lines.append(
            f"ops {stats['ops']}: acknowledged {stats['acknowledged']}, failed {stats['failed']}, "
            f"indeterminate {stats['indeterminate']}; error codes {stats['error_codes']}"
        )
    counts = anomaly_counts(anomalies)
    lines.append(f"anomalies: {sum(counts.values())} {counts or ''}".rstrip())
    by_op = {op.id: op for op in history.snapshot()} if history is not None else {}
    for a in anomalies[:limit]:
        lines.append("  " + a.line())
        if a.op in by_op:
            lines.append("      " + by_op[a.op].describe())
    if len(anomalies) > limit:
        lines.append(f"  ... and {len(anomalies) - limit} more")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# The final check


def final_check(
    history: History,
    old_replicas: Sequence[Replica],
    fresh: Replica,
    conversations: Iterable[str],
    converge: float = 5.0,
    timeout: float = 10.0,
) -> list[Anomaly]:
    """After the load: read each conversation through ``fresh`` (a replica started
    against the same Redis after the load), then poll every old replica until it
    reads the same (seq, text) pairs, within ``converge`` seconds of the first
    fresh read (one grace for all: a replica still different after it is read once more).

    Every read lands in ``history``, so :func:`check_history` judges the fresh
    read against the acknowledged stores and removes. Returned: reads that
    failed and replicas that never converged.
    """
    client = ChdClient(history, "final", timeout)
    found = _Anomalies()
    deadline = None  # one grace for all replicas and conversations, from the first fresh read
    try:
        for conv in conversations:
            truth = client.call(fresh, conv, READ, {})
            if truth.status != OK:
                found.add(
                    "final-read-failed", conv, None, "a read", truth.code, truth, truth.error or ""
                )
                continue
            want = [(u[0], u[1]) for u in truth.result["utterances"]]
            if deadline is None:
                deadline = time.monotonic() + converge
            for replica in old_replicas:
                while True:
                    read = client.call(replica, conv, READ, {})
                    got = (
                        [(u[0], u[1]) for u in read.result["utterances"]]
                        if read.status == OK
                        else None
                    )
                    if got == want:
                        break
                    if time.monotonic() > deadline:
                        if got is None:
                            found.add(
                                "replica-divergence",
                                conv,
                                None,
                                "a read",
                                read.code,
                                read,
                                read.error or "",
                            )
                            break
                        fresh_map, old_map = dict(want), dict(got)
                        for seq in sorted(set(fresh_map) | set(old_map)):
                            if fresh_map.get(seq) != old_map.get(seq):
                                found.add(
                                    "replica-divergence",
                                    conv,
                                    seq,
                                    fresh_map.get(seq),
                                    old_map.get(seq),
                                    read,
                                    f"fresh replica {fresh.name} vs {replica.name} after {converge:.0f}s",
                                )
                        break
                    time.sleep(0.1)
    finally:
        client.close()
    return list(found.items.values())


def summary_check(
    history: History,
    fresh: Replica,
    conversations: Iterable[str],
    settle: float = 15.0,
    timeout: float = 10.0,
) -> list[Anomaly]:
    """The summary, read through ``fresh`` once every fold has landed, against what was acknowledged.

    For a run whose summary budget is large enough to keep every evicted
    utterance's text (the replicas' --summary-token-limit): each acknowledged
    store that left the buffer and was not removed is in the summary, as a
    whole word; a store acknowledged as removed is not. The summary's
    provenance checked by what a reader gets from it, not by a counter.
    """
    client = ChdClient(history, "summary", timeout)
    found = _Anomalies()
    ops = history.snapshot()
    try:
        for conv in conversations:
            deadline = time.monotonic() + settle
            while True:
                answer = client._stub(fresh.target).Query(_summary_request(conv), timeout=timeout)
                result = _plain(answer.result)
                if not result.get("summary_pending") or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            summary = str(result.get("summary", ""))
            buffered = {u[0] for u in client.call(fresh, conv, READ, {}).result["utterances"]}
            through = int(result.get("summary_through_seq", 0))
            removed = {
                int(op.args["seq"])
                for op in ops
                if op.conversation == conv
                and op.kind == REMOVE
                and op.status == OK
                and "seq" in op.args
            }
            for op in ops:
                if op.conversation != conv or op.kind != STORE or op.status != OK or not op.result:
                    continue
                seq, text = op.result["seq"], op.args["text"]
                said = re.search(rf"(?<![\w-]){re.escape(text)}(?![\w-])", summary) is not None
                if seq in removed and said:
                    found.add(
                        "summary-keeps-removed",
                        conv,
                        seq,
                        text,
                        "in the summary",
                        op,
                        "removed, yet summarized",
                    )
                elif seq not in removed and seq not in buffered and seq <= through and not said:
                    found.add(
                        "summary-lost",
                        conv,
                        seq,
                        text,
                        "not in the summary",
                        op,
                        f"left the buffer (summary through seq {through}) but the summary does not hold it",
                    )
    finally:
        client.close()
    return list(found.items.values())


def _summary_request(conversation: str) -> daemon_pb2.QueryRequest:
    request = daemon_pb2.QueryRequest()
    request.metadata.update({"conversation_id": conversation})
    request.data.update({"operation": "retrieve", "summary_only": True})
    return request


def _plain(struct: Any) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(struct)


# --------------------------------------------------------------------------
# Processes: redis-server and chd replicas


def scrub_environment() -> None:
    """As tests/conftest.py does for a session: no developer CHD_* / ANTHROPIC_* reaches a daemon."""
    for name in [n for n in os.environ if n.startswith(("ANTHROPIC_", "CHD_"))]:
        del os.environ[name]


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                children = [int(c) for c in handle.read().split()]
        except OSError:
            continue
        for child in children:
            found.append(child)
            found.extend(_descendants(child))
    return found


def _kill_pids(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


class Replica:
    """One ``chd serve`` process on shared storage (``storage``: its --backend and where);
    ``target`` follows restarts (new port each time)."""

    def __init__(self, name: str, storage: Sequence[str], extra: Sequence[str] = ()) -> None:
        self.name = name
        self.storage = tuple(storage)
        self.extra = tuple(extra)
        self.process: Any = None
        self.generation = 0
        self._target = ""

    @property
    def target(self) -> str:
        return self._target

    def start(self) -> Replica:
        from tests.conftest import DaemonProcess

        self.process = DaemonProcess(*self.storage, *self.extra)
        self._target = self.process.target
        self.generation += 1
        return self

    @property
    def pid(self) -> int | None:
        return self.process.proc.pid if self.process is not None else None

    def kill(self) -> None:
        """SIGKILL, as a crash; its children (the summarizer process) are killed by pid too."""
        if self.process is None:
            return
        children = _descendants(self.process.proc.pid)
        self.process.kill()
        _kill_pids(children)
        self.process = None

    def stop(self) -> None:
        """SIGTERM (a clean stop, children included), SIGKILL if it hangs."""
        if self.process is None:
            return
        children = _descendants(self.process.proc.pid)
        try:
            self.process.terminate(timeout=10)
        except Exception:
            self.process.kill()
        _kill_pids(children)
        self.process = None

    def log(self) -> str:
        return self.process.log if self.process is not None else ""


class Cluster:
    """Shared storage and its chd replicas, all stopped by :meth:`stop`: one redis-server, or
    (``backend="disk"``) one data directory that every replica process opens."""

    def __init__(
        self,
        directory: Any,
        redis_args: Sequence[str] = ("--appendonly", "yes", "--appendfsync", "everysec"),
        replica_args: Sequence[str] = ("--buffer-size", "1000"),
        backend: str = "redis",
    ) -> None:
        from pathlib import Path

        from tests.redis_support import start_redis

        self.directory = Path(directory)
        self.replica_args = tuple(replica_args)
        self.redis = (
            start_redis(self.directory / "redis", *redis_args) if backend == "redis" else None
        )
        self.storage = (
            ("--backend", "redis", "--redis-url", self.redis.url)
            if self.redis is not None
            else ("--backend", "disk", "--data-dir", str(self.directory / "data"))
        )
        self.replicas: list[Replica] = []
        self._extra: list[Replica] = []

    @property
    def url(self) -> str:
        return self.redis.url if self.redis is not None else self.storage[-1]

    def start_replicas(self, count: int, prefix: str = "r") -> list[Replica]:
        new = [
            Replica(f"{prefix}{len(self.replicas) + i}", self.storage, self.replica_args)
            for i in range(count)
        ]
        self.replicas.extend(new)
        errors: list[BaseException] = []

        def start(replica: Replica) -> None:
            try:
                replica.start()
            except BaseException as error:  # reported below
                errors.append(error)

        threads = [threading.Thread(target=start, args=(r,)) for r in new]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return new

    def fresh_replica(self, name: str = "fresh") -> Replica:
        """A replica started now, which has served nothing yet."""
        replica = Replica(name, self.storage, self.replica_args)
        self._extra.append(replica)
        return replica.start()

    def kill_redis(self) -> None:
        assert self.redis is not None, "a redis fault on a disk cluster"
        self.redis.kill()

    def restart_redis(self) -> None:
        """Start redis-server again on the same port and directory: it loads its AOF."""
        assert self.redis is not None, "a redis fault on a disk cluster"
        self.redis.start()

    def pause_redis(self) -> None:
        if self.redis is not None and self.redis.process is not None:
            os.kill(self.redis.process.pid, signal.SIGSTOP)

    def resume_redis(self) -> None:
        if self.redis is not None and self.redis.process is not None:
            os.kill(self.redis.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Every replica (SIGTERM, in parallel), then redis-server."""
        self.resume_redis()
        threads = [threading.Thread(target=r.stop) for r in [*self.replicas, *self._extra]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for replica in [*self.replicas, *self._extra]:
            replica.stop()  # one that raised in its thread
        if self.redis is not None:
            self.redis.stop()
