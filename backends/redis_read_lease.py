"""The read lease: while one replica is the only one writing, it answers reads from its cache.

A replica must never answer from a state another replica has overtaken, so
a read normally asks Redis for the conversation's commit id first, a round
trip that disk answers with a local SQLite read. When a replica is alone,
that round trip only ever confirms what it already knows. So a replica that
finds itself the only one present takes a lease in Redis
(``chd:{!}:readers``, ``sole:<its id>:<tenure>``) and, while it holds it, answers
reads of conversations it has read or written during that lease from its
cache, with no round trip.

Safety rests on the commit script (backends/redis_scripts.py), not on the
lease's holder: a commit of any other replica (or ``chd import``) that finds
another replica's lease replaces it with ``writers:<when>`` and answers
"wait", and no commit lands until ``<when>``, one ``READ_LEASE`` later. The
holder renews only ``sole:<its id>:<its tenure>``, and trusts its cache for
at most ``READ_LEASE`` after it sent its last successful renewal, so by the
time anyone else writes it has stopped trusting its cache. The lease names
its tenure so that a take whose reply was lost, which the next heartbeat
finds in Redis, starts a new tenure there: renewing the old one would trust
states cached before a write that ended it. A state read while nothing was
cached is trusted only if no commit of this replica was counted meanwhile
(``committed``): its newer state may have been cached and evicted since.

The lease in Redis lasts ``_HELD`` (3.5 times as long as the trust), so that
a Redis restarted from an AOF (``appendfsync everysec``) that lost up to
2 s of writes still holds a lease its holder trusts: with renewals at most
3 s apart (every second, up to 2 s late), the last one kept ran at most 5 s
before the crash, so its key outlives the crash by 2 s, and the holder's
trust from any renewal sent before the crash ends within 2 s of it. A lease
*taken* in the lost seconds is lost with them (its holder may trust it for
2 s into a Redis restarted that fast); only ``appendfsync always``, which
"nothing acknowledged is lost" needs anyway, makes that exact.

What this costs: the first write through a second replica waits up to
``READ_LEASE`` (2 s) while the lease runs out, once; replicas that only
read never end it. Not on Redis Cluster; never held by a replica with
``conversation_ttl`` (Redis expires conversations without a commit a cache
could see), though such a replica is present like any other; nor trusted for
a conversation whose keys still expire (written while conversation_ttl was on). The waits are
timed by Redis's clock and the holder's ``CLOCK_BOOTTIME`` (which, unlike
the monotonic clock, runs on while the host is suspended): a Redis host
whose wall clock jumps ahead can shorten one, as it shortens every key's
expiry. Every replica on the Redis must run a chd with the lease: an older
one neither marks itself present nor waits for the lease.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import Any

import redis

from chd.backends.redis_scripts import HEARTBEAT, LEAVE

__all__ = ["ReadLease", "READ_LEASE", "LEASE_KEY"]

# Trust is timed on a clock that counts a suspended host's sleep, as Redis's
# wall clock does: the monotonic clock would wake up still trusting.
_clock = (
    partial(time.clock_gettime, time.CLOCK_BOOTTIME)
    if hasattr(time, "CLOCK_BOOTTIME")
    else time.monotonic
)

log = logging.getLogger(__name__)

LEASE_KEY = "chd:{!}:readers"
REPLICAS_KEY = "chd:{!}:replicas"

# Seconds a holder trusts its cache after a renewal, and a breaking write waits.
READ_LEASE = 2.0
_HELD = READ_LEASE * 3.5  # the lease key's own expiry in Redis (see "AOF" above)
_RENEW = READ_LEASE / 2  # a holder renews this often, so one late renewal costs nothing
_PRESENT = READ_LEASE * 1.5  # a replica that stops renewing is gone after this


class ReadLease:
    """This replica's side of the read lease: a renewing thread and the tenure it is in.

    ``tenure()`` is the number of the lease tenure the replica holds now, or
    None. A cached state may be answered from only if it was confirmed
    (read from Redis, or committed) after the current tenure began: every
    read and commit takes ``current()`` before it goes to Redis and stamps
    what it caches with it.
    """

    def __init__(self, client: redis.Redis, replica: str, may_hold: bool = True) -> None:
        self._replica = replica
        # A replica that may not hold the lease is still present: a lone
        # replica that took it would keep its writes waiting.
        self._may_hold = may_hold
        self._heartbeat = client.register_script(HEARTBEAT)
        self._leave = client.register_script(LEAVE)
        self._lock = threading.Lock()
        self._tenure = 0
        self._until = 0.0  # _clock(): trusted until then
        self._commits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chd-redis-read-lease", daemon=True)

    def start(self) -> None:
        self._beat()  # present before the first write, so nobody takes the lease past it
        self._thread.start()

    def tenure(self) -> int | None:
        """The current tenure's number while the lease is held and trusted, else None."""
        with self._lock:
            return self._tenure if _clock() < self._until else None

    def current(self) -> int:
        """The tenure number to stamp a state confirmed from now on with."""
        with self._lock:
            return self._tenure

    def committed(self) -> None:
        """Count a commit of this replica confirmed (or one whose reply was lost).

        A read that found nothing cached caches what it read only if the cache
        still holds nothing, which is also true once a newer commit of this
        replica was cached and then evicted or forgotten: so such a read's
        state is trusted only if no commit was counted while it was on the wire.
        """
        with self._lock:
            self._commits += 1

    def commits(self) -> int:
        """How many commits ``committed`` has counted."""
        with self._lock:
            return self._commits

    def close(self, leave: bool = True) -> None:
        """Stop renewing and (``leave``) give the lease back, so another replica's writes need not wait it out."""
        self._stop.set()
        with self._lock:
            self._until = 0.0
        if self._thread.is_alive():
            self._thread.join(timeout=5 if leave else 0.1)
        if not leave:
            return
        try:
            self._leave(keys=[LEASE_KEY, REPLICAS_KEY], args=[self._replica])
        except redis.RedisError:
            log.debug("could not leave the read lease; it runs out by itself")

    def _run(self) -> None:
        while not self._stop.wait(_RENEW):
            self._beat()

    def _beat(self) -> None:
        with self._lock:
            holding = self._tenure
        taking = holding + 1  # never used before: no state is stamped with it yet
        sent = _clock()
        try:
            held = int(
                self._heartbeat(
                    keys=[LEASE_KEY, REPLICAS_KEY],
                    args=[
                        self._replica,
                        int(_HELD * 1000),
                        int(_PRESENT * 1000),
                        "1" if self._may_hold and not self._stop.is_set() else "0",
                        holding,
                        taking,
                    ],
                )
            )
        except redis.RedisError as exc:
            # Trust runs out by itself at _until: an unreachable Redis takes no writes either.
            log.debug("read lease renewal failed: %s", exc)
            return
        with self._lock:
            if self._stop.is_set():
                return
            if held == 2:
                self._tenure = taking
            if held:
                self._until = sent + READ_LEASE
            else:
                self._until = 0.0


def stamp(snapshot: Any, tenure: int) -> None:
    """Mark ``snapshot`` confirmed in ``tenure`` (never lowering a later mark)."""
    if tenure > snapshot.tenure:
        snapshot.tenure = tenure
