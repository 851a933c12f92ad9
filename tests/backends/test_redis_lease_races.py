"""The read lease under races (backends/redis_read_lease.py): lost replies, evictions, waits mid-batch.

Each test holds a thread or drives the heartbeat by hand at the point where
a stale answer could slip in, then checks the promise: no read answers a
state older than a write acknowledged before it began.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis

from chd.backends import redis_read_lease
from chd.backends.redis_backend import RedisBackend
from chd.backends.redis_read_lease import LEASE_KEY
from tests.backends.backend_kinds import append_next
from tests.redis_support import RedisServer, running_redis, wait_for


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always")


def _lease(server: RedisServer) -> str:
    with server.client() as client:
        value = client.get(LEASE_KEY)
    return value.decode() if value is not None else ""


def _texts(backend: RedisBackend, conversation_id: str) -> list[str]:
    state = backend.read(conversation_id)
    return [u.text for u in (*state.archive, *state.pending, *state.utterances)]


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
        second = RedisBackend(redis_server.url)
        try:
            second.transact("c", append_next("two"))  # ends the lease, waits it out, acknowledged
        finally:
            second.close()
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
        assert backend.transact("c", append_next("two")) == 2  # acknowledged while the read is on the wire
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
