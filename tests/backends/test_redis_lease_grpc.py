"""The read lease through two `chd serve` replicas over gRPC: no retrieve misses an acknowledged store."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from pathlib import Path

from chd.backends.redis_read_lease import LEASE_KEY
from tests.backends.test_redis_replicas import ROOMY, store, stubs
from tests.conftest import DaemonProcess, query
from tests.redis_support import RedisServer, running_redis, wait_for


def _held(server: RedisServer) -> bool:
    with server.client() as client:
        return (client.get(LEASE_KEY) or b"").startswith(b"sole:")


def test_retrieves_through_the_holder_have_every_store_acknowledged_through_a_replica_that_comes_and_goes(
    tmp_path: Path,
) -> None:
    """A holds the lease; B arrives, stores, leaves; A takes the lease again: every retrieve through A has
    every store acknowledged before it began."""
    for server in running_redis(tmp_path / "redis"):
        holder = DaemonProcess("--backend", "redis", "--redis-url", server.url, *ROOMY)
        passing: DaemonProcess | None = None
        stop = threading.Event()
        try:
            with ExitStack() as stack:
                (a,) = stubs([holder], stack)
                conversations = ["p", "q"]
                acknowledged = {cid: store(a, cid, f"{cid} opens") for cid in conversations}
                guard = threading.Lock()
                stale: list[str] = []
                retrieves = [0]

                def read_through_holder() -> None:
                    while not stop.is_set():
                        with guard:
                            before = dict(acknowledged)
                        for cid, seq in before.items():
                            reply = query(a, "Get all utterances", {"conversation_id": cid})
                            seqs = [int(u["seq"]) for u in reply.result["utterances"]]
                            retrieves[0] += 1
                            if max(seqs, default=0) < seq:
                                stale.append(
                                    f"{cid}: retrieved up to {max(seqs, default=0)} after {seq} was stored"
                                )

                wait_for(lambda: _held(server), "A to hold the lease", 10)
                reader = threading.Thread(target=read_through_holder)
                reader.start()
                try:
                    passing = DaemonProcess("--backend", "redis", "--redis-url", server.url, *ROOMY)
                    (b,) = stubs([passing], stack)
                    for n in range(3):
                        for cid in conversations:
                            seq = store(
                                b, cid, f"{cid} through B, {n}"
                            )  # the first waits out A's lease
                            with guard:
                                acknowledged[cid] = seq
                    assert passing.terminate() == 0  # leaves: A is alone again
                    wait_for(lambda: _held(server), "A to take the lease again", 10)
                    done = retrieves[0]
                    wait_for(lambda: retrieves[0] > done + 20, "retrieves in A's new lease", 10)
                finally:
                    stop.set()
                    reader.join(20)
                assert not stale, stale[:5]
                assert acknowledged == {"p": 4, "q": 4}
        finally:
            stop.set()
            holder.kill()
            if passing is not None:
                passing.kill()
