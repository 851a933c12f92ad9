"""The read lease (backends/redis_read_lease.py): a lone replica reads from its cache, and never a stale state."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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


def _commands(server: RedisServer, name: str) -> int:
    """How many ``name`` commands (lower case) Redis has run since it started."""
    with server.client() as client:
        return int(client.info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0))


def _texts(backend: RedisBackend, conversation_id: str) -> list[str]:
    state = backend.read(conversation_id)
    return [u.text for u in (*state.archive, *state.pending, *state.utterances)]


def _write_through_another(
    server: RedisServer, conversation_id: str, text: str, **options: Any
) -> int:
    """Store ``text`` through a second replica that comes, writes and leaves."""
    writer = RedisBackend(server.url, **options)
    try:
        return writer.transact(conversation_id, append_next(text))
    finally:
        writer.close()


def test_a_lone_replica_takes_the_lease_and_answers_reads_without_asking_redis(
    redis_server: RedisServer,
) -> None:
    """Alone, a replica holds 'sole:<id>:<tenure>', and reads of what it stored send no command to Redis."""
    backend = RedisBackend(redis_server.url)
    try:
        assert _lease(redis_server).startswith("sole:")
        backend.transact("c", append_next("one"))
        assert _texts(backend, "c") == ["one"]
        before = _commands(redis_server, "hmget") + _commands(redis_server, "evalsha")
        for _ in range(50):
            assert _texts(backend, "c") == ["one"]
        assert (
            _commands(redis_server, "hmget") + _commands(redis_server, "evalsha") - before <= 2
        )  # heartbeats
    finally:
        backend.close()
    assert _lease(redis_server) == ""  # given back at close


def test_another_replicas_write_waits_out_the_lease_and_the_holder_then_reads_it(
    redis_server: RedisServer,
) -> None:
    """B's store lands only after A stopped trusting its cache: A's next read has it, with no stale answer between."""
    first = RedisBackend(redis_server.url)
    second = None
    try:
        first.transact("c", append_next("one"))
        assert _texts(first, "c") == ["one"]  # cached and confirmed in A's tenure
        holder = _lease(redis_server)
        assert holder.startswith("sole:")
        second = RedisBackend(redis_server.url)  # present, but reading does not end A's lease
        assert _texts(second, "c") == ["one"]
        assert _lease(redis_server) == holder
        second.transact("c", append_next("two"))  # waits until A's lease has run out
        assert _lease(redis_server).startswith("writers:")
        assert _texts(first, "c") == ["one", "two"]
        assert first.transact("c", append_next("three")) == 3
        assert _texts(second, "c") == ["one", "two", "three"]
    finally:
        first.close()
        if second is not None:
            second.close()


def test_a_new_tenure_trusts_nothing_cached_before_it(redis_server: RedisServer) -> None:
    """A's cache from its first lease is not trusted in its second: what B wrote between is read."""
    first = RedisBackend(redis_server.url)
    try:
        first.transact("c", append_next("one"))
        assert _texts(first, "c") == ["one"]
        second = RedisBackend(redis_server.url)
        try:
            second.transact("c", append_next("two"))
            second.transact("d", append_next("elsewhere"))
        finally:
            second.close()  # leaves: A is alone again
        wait_for(
            lambda: _lease(redis_server).startswith("sole:"),
            "the lone replica to take the lease again",
            10,
        )
        assert _texts(first, "c") == ["one", "two"]
        assert _texts(first, "d") == ["elsewhere"]
    finally:
        first.close()


def test_with_a_conversation_ttl_no_lease_is_taken_and_every_read_asks_redis(
    redis_server: RedisServer,
) -> None:
    """Redis expires conversations behind the cache's back, so a ttl replica never answers from it."""
    backend = RedisBackend(redis_server.url, conversation_ttl=60)
    try:
        backend.transact("c", append_next("one"))
        before = _commands(redis_server, "hmget")
        for _ in range(5):
            assert _texts(backend, "c") == ["one"]
        assert _commands(redis_server, "hmget") - before == 5
        assert _lease(redis_server) == ""
    finally:
        backend.close()


def test_a_ttl_replicas_write_still_ends_another_replicas_lease(redis_server: RedisServer) -> None:
    """Every commit on standalone Redis honours the lease, whatever its own settings."""
    holder = RedisBackend(redis_server.url)
    try:
        holder.transact("c", append_next("one"))
        assert _texts(holder, "c") == ["one"]
        _write_through_another(redis_server, "c", "two", conversation_ttl=60)
        assert _texts(holder, "c") == ["one", "two"]
    finally:
        holder.close()
