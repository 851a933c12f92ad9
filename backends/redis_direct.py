"""Each thread's own connection to a standalone Redis, for the commands every read and commit sends.

redis-py's client spends more on a command than loopback Redis does: a pool
checkout and release, its retry wrapper and its observability hooks cost
about 70 us per HMGET here against 34 us for the same command written on a
connection directly (``python bench/bench_redis.py --direct``), and a pipeline
that runs scripts first asks ``SCRIPT EXISTS``, a second round trip per
batch. So the hot commands (the commit id check of a read, the commit and
fetch scripts) go on a connection the calling thread keeps, packed by
hiredis (redis-py's own packer without its Python pass per argument, see
_packed), parsed by redis-py's ``Connection`` (with hiredis) and retried by
the client's retry policy; everything else (leases, the index, health, Redis
Cluster, whose commands need routing) keeps using the client.

A retried command may have run before its connection broke. That is safe
for what goes through here: reads, and commit scripts that recognise their
own commit id when sent again (backends/redis_scripts.py).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

if HIREDIS_AVAILABLE:
    from hiredis import pack_command

__all__ = ["ThreadConnections"]


class ThreadConnections:
    """Connections to the Redis ``client`` points at, one per calling thread, made on first use."""

    def __init__(self, client: redis.Redis, retry: Retry) -> None:
        pool = client.connection_pool
        # The pool's class and settings: TLS, password, db and timeouts as the client has them.
        self._new: Callable[[], Any] = lambda: pool.connection_class(**pool.connection_kwargs)
        self._retry = retry
        self._local = threading.local()
        self._opened: weakref.WeakSet[Any] = weakref.WeakSet()
        self._opened_lock = threading.Lock()

    def run(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """The replies to ``commands``, written at once (one round trip); an error reply comes back
        in its place as the ResponseError, not raised.

        Raises:
            redis.ConnectionError, redis.TimeoutError: Redis did not answer, retries included.
        """
        connection = self._connection()
        return self._retry.call_with_retry(
            lambda: _exchange(connection, commands), lambda _error: connection.disconnect()
        )

    def scripts(
        self, script: Script, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]
    ) -> list[Any]:
        """The replies of ``script`` run once per (keys, args) call, all in one round trip.

        A Redis that lost its script cache (a restart, SCRIPT FLUSH) ran none
        of the calls it answered NOSCRIPT: those are sent again, in order,
        after the script is loaded.
        """
        replies = self.run([_evalsha(script.sha, keys, args) for keys, args in calls])
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            (sha,) = self.run([("SCRIPT", "LOAD", script.script)])
            if isinstance(sha, Exception):
                raise sha
            script.sha = sha.decode() if isinstance(sha, bytes) else sha
            again = self.run([_evalsha(script.sha, *calls[i]) for i in missing])
            for i, reply in zip(missing, again):
                replies[i] = reply
        return replies

    def close(self) -> None:
        with self._opened_lock:
            opened = list(self._opened)
        for connection in opened:
            connection.disconnect()

    def _connection(self) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._new()
            with self._opened_lock:
                self._opened.add(connection)
        return connection


def _evalsha(sha: str, keys: Sequence[Any], args: Sequence[Any]) -> tuple[Any, ...]:
    return ("EVALSHA", sha, len(keys), *keys, *args)


def _packed(connection: Any, commands: Sequence[tuple[Any, ...]]) -> Any:
    """``commands`` in the Redis protocol, as ``send_packed_command`` takes them.

    hiredis's packer is the one redis-py's own serializer ends in, called
    without that serializer's per-argument Python pass around it (26 against
    4 us for a commit script's arguments here); both encode text as strict UTF-8.
    """
    if not HIREDIS_AVAILABLE:
        return connection.pack_commands(commands)
    return [b"".join([pack_command(command) for command in commands])]  # a list: it sends each item


def _exchange(connection: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    try:
        connection.send_packed_command(_packed(connection, commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(connection.read_response())
            except redis.ResponseError as exc:
                replies.append(exc)
        return replies
    except BaseException:
        # Replies left unread would be taken for the next command's.
        connection.disconnect()
        raise
