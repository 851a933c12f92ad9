"""The read lease under races (backends/redis_read_lease.py): lost and late replies, evictions, restarts, ttls.

Most tests hold a thread or drive the heartbeat by hand at the point where a
stale answer could slip in; one runs replicas at once and checks every read.
The promise checked: no read answers a state older than a write
acknowledged before it began.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
import redis

from chd.backends import redis_read_lease
from chd.backends.redis_backend import RedisBackend, conversation_key
from tests.backends.backend_kinds import append_next
from tests.backends.test_redis_read_lease import (  # noqa: F401 (redis_server: a fixture)
    _lease,
    _texts,
    _write_through_another,
    redis_server,
)
from tests.redis_support import RedisServer, wait_for


def test_a_lease_taken_with_its_reply_lost_is_a_new_tenure_when_the_next_heartbeat_finds_it(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A take whose reply was lost (then found by a renewal) never revives the cache of the tenure B's write ended."""
    monkeypatch.setattr(redis_read_lease, "_RENEW", 3600.0)  # the test beats by hand
    first = RedisBackend(redis_server.url)
    try:
        lease = first._read_lease
        assert lease is not None
        first.transact("c", append_next("one"))
        assert _texts(first, "c") == ["one"]  # cached in the first tenure
        _write_through_another(
            redis_server, "c", "two"
        )  # ends the lease, waits it out, acknowledged
        wait_for(lambda: _lease(redis_server) == "", "the writers' mark to expire", 10)
        real = lease._heartbeat

        def reply_lost(*args: Any, **kwargs: Any) -> Any:
            real(*args, **kwargs)  # Redis ran it: the lease is taken
            raise redis.TimeoutError("Timeout reading from socket")

        lease._heartbeat = reply_lost
        lease._beat()
        assert _lease(redis_server).startswith("sole:")
        lease._heartbeat = real
        lease._beat()  # finds the lease it took
        assert lease.tenure() is not None
        assert _texts(first, "c") == ["one", "two"]
    finally:
        first.close()


def test_a_read_that_saw_a_state_before_an_acknowledged_commit_is_never_trusted_after_an_eviction(
    redis_server: RedisServer,
) -> None:
    """A read's older state, cached after this replica's newer commit was evicted, is asked for again."""
    backend = RedisBackend(redis_server.url, cached_utterances=2)
    reader: threading.Thread | None = None
    try:
        backend.transact("c", append_next("one"))
        backend._forget(["c"])  # the reader finds nothing cached
        replied, resume = threading.Event(), threading.Event()
        real = backend._refreshed

        def held(*args: Any) -> Any:
            snapshot = real(*args)  # read whole from Redis
            if threading.current_thread() is reader:
                replied.set()
                resume.wait(10)
            return snapshot

        backend._refreshed = held  # type: ignore[method-assign]
        seen: list[list[str]] = []
        reader = threading.Thread(target=lambda: seen.append(_texts(backend, "c")))
        reader.start()
        assert replied.wait(10)
        assert (
            backend.transact("c", append_next("two")) == 2
        )  # acknowledged while the read is on the wire
        backend.transact("d", append_next("elsewhere"))  # pushes "c" out of the cache
        assert backend._cached_snapshot("c") is None
        resume.set()
        reader.join(10)
        assert seen == [["one"]]  # it began before the commit: the older state is a right answer
        assert backend._read_lease is not None and backend._read_lease.tenure() is not None
        assert _texts(backend, "c") == ["one", "two"]
    finally:
        resume.set()
        backend.close()


def test_reads_through_the_holder_see_every_write_acknowledged_before_them_while_replicas_come_and_go(
    redis_server: RedisServer,
) -> None:
    """Linearizability under churn: what A or a passing replica B acknowledged, A's later reads have."""
    # Room for two or three of the conversations (about 30 utterances each): commits and reads evict each other.
    holder = RedisBackend(redis_server.url, cached_utterances=60)
    asked, answered = itertools.count(), itertools.count()  # reads that went to Redis, all reads
    real = holder._refreshed
    readers: set[threading.Thread] = set()

    def counted(*args: Any) -> Any:
        if threading.current_thread() in readers:
            next(asked)
        return real(*args)

    holder._refreshed = counted  # type: ignore[method-assign]
    conversations = [f"c{i}" for i in range(6)]
    acknowledged = {
        cid: 0 for cid in conversations
    }  # the highest seq acknowledged, by conversation
    guard = threading.Lock()
    stop = threading.Event()
    stale: list[str] = []
    failures: list[BaseException] = []

    def acknowledge(cid: str, seq: int) -> None:
        with guard:
            acknowledged[cid] = max(acknowledged[cid], seq)

    def guarded(work: Any) -> Any:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # the test's to report
                failures.append(exc)
                stop.set()

        return run

    def write_through_holder() -> None:
        for n in itertools.count():
            if stop.is_set():
                return
            cid = conversations[n % len(conversations)]
            acknowledge(cid, holder.transact(cid, append_next(f"a{n}")))
            stop.wait(0.005)  # paced, so conversations stay small enough to be cached

    def come_write_and_go() -> None:
        for round_ in range(2):
            wait_for(
                lambda: _lease(redis_server).startswith("sole:") or stop.is_set(),
                "A to hold the lease",
                10,
            )
            passing = RedisBackend(redis_server.url)
            try:
                for n, cid in enumerate(conversations):
                    acknowledge(cid, passing.transact(cid, append_next(f"b{round_}.{n}")))
            finally:
                passing.close()
        # On a loaded machine the paced holder may have written little by now: let it catch up.
        wait_for(
            lambda: stop.is_set() or all(seq > len(conversations) for seq in acknowledged.values()),
            "the holder to write every conversation",
            30,
        )
        stop.set()

    def read_through_holder() -> None:
        readers.add(threading.current_thread())
        while not stop.is_set():
            with guard:
                before = dict(acknowledged)
            for cid, seq in before.items():
                state = holder.read(cid)
                next(answered)
                if state.next_seq <= seq:
                    stale.append(
                        f"{cid}: read next_seq {state.next_seq} after seq {seq} was acknowledged"
                    )

    threads = [
        threading.Thread(target=guarded(work))
        for work in (
            write_through_holder,
            come_write_and_go,
            read_through_holder,
            read_through_holder,
        )
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        stop.set()
        holder.close()
    assert not failures
    assert not stale, stale[:5]
    assert all(
        seq > len(conversations) for seq in acknowledged.values()
    )  # both replicas wrote each
    assert next(asked) < next(answered) / 2  # most reads were the lease's, from the cache


def test_a_conversation_written_with_a_ttl_is_never_answered_from_the_lease_after_redis_expired_it(
    redis_server: RedisServer,
) -> None:
    """conversation_ttl turned off: keys written with it still expire, so the lease never trusts them."""
    earlier = RedisBackend(redis_server.url, conversation_ttl=0.5)
    try:
        earlier.transact("c", append_next("one"))
    finally:
        earlier.close()
    backend = RedisBackend(redis_server.url)  # alone, without a ttl: it holds the lease
    try:
        assert _lease(redis_server).startswith("sole:")
        assert _texts(backend, "c") == ["one"]
        assert _texts(backend, "c") == ["one"]
        with redis_server.client() as client:
            wait_for(
                lambda: not client.exists(conversation_key("c", "m")),
                "Redis to expire the conversation",
                10,
            )
        assert _texts(backend, "c") == []
    finally:
        backend.close()


def test_a_redis_killed_and_restarted_from_its_aof_still_makes_the_next_writer_wait_out_the_lease(
    redis_server: RedisServer,
) -> None:
    """The lease is in the AOF: B's first write after the restart waits until A trusts nothing from before."""
    holder = RedisBackend(redis_server.url)
    try:
        holder.transact("c", append_next("one"))
        assert _texts(holder, "c") == ["one"]
        taken = _lease(redis_server)
        assert taken.startswith("sole:")
        redis_server.kill()
        redis_server.start()  # same port, same AOF; well within the holder's trust
        assert _lease(redis_server) == taken
        _write_through_another(redis_server, "c", "two")
        assert _texts(holder, "c") == ["one", "two"]
    finally:
        holder.close()


def test_a_renewal_whose_reply_is_handled_late_trusts_nothing_past_when_it_was_sent(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A heartbeat thread starved after its renewal ran: B's write in between is in A's next read."""
    monkeypatch.setattr(redis_read_lease, "_RENEW", 3600.0)  # the test beats by hand
    first = RedisBackend(redis_server.url)
    beating: threading.Thread | None = None
    replied, resume = threading.Event(), threading.Event()
    try:
        lease = first._read_lease
        assert lease is not None
        first.transact("c", append_next("one"))
        assert _texts(first, "c") == ["one"]
        real = lease._heartbeat

        def starved(*args: Any, **kwargs: Any) -> Any:
            reply = real(*args, **kwargs)  # renewed in Redis
            replied.set()
            resume.wait(10)  # the thread gets the GIL back only now
            return reply

        lease._heartbeat = starved
        beating = threading.Thread(target=lease._beat)
        beating.start()
        assert replied.wait(10)
        _write_through_another(redis_server, "c", "two")  # ends the renewed lease, waits it out
        resume.set()
        beating.join(10)
        assert _texts(first, "c") == ["one", "two"]
    finally:
        resume.set()
        if beating is not None:
            beating.join(10)
        first.close()
