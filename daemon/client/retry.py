"""When a call is sent again: only a safe one (a read, a keyed store), after UNAVAILABLE, CANCELLED or DEADLINE_EXCEEDED, within its deadline."""

from __future__ import annotations

import time

import grpc

from chd.client.errors import ChdError, DeadlineExceeded, Unavailable

__all__ = ["backoff", "again"]


def backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): 0.1, 0.2, 0.4, ... at most 2."""
    return min(0.1 * 2 ** (attempt - 1), 2.0)


def again(failure: ChdError, safe: bool, attempt: int, retries: int, until: float) -> bool:
    """Whether to send a call again: a safe call, UNAVAILABLE, CANCELLED or DEADLINE_EXCEEDED, with tries and time left.

    UNAVAILABLE is what gRPC answers when no connection could be made or one
    broke mid-call (the daemon restarting, a load balancer between replicas)
    and what chd answers when its storage failed before changing anything;
    DEADLINE_EXCEEDED from the daemon (its own request_timeout, shorter than
    ours) leaves time to ask again. Either way the first send may have been
    carried out, which is why only reads and keyed stores are safe.
    CANCELLED is never the daemon's answer: a daemon stopping (one serving
    process of ``chd serve --processes`` restarted, say) cancels the calls
    it has taken but not finished, and the caller's own cancel is never an
    ``RpcError`` here, so asking again, on another process or after the
    restart, is the same as after UNAVAILABLE. Other statuses are answers,
    and the same question gets the same answer.
    """
    return (
        safe
        and (
            isinstance(failure, (Unavailable, DeadlineExceeded))
            or failure.status == grpc.StatusCode.CANCELLED
        )
        and attempt <= retries
        and time.monotonic() + backoff(attempt) < until
    )
