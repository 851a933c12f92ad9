"""When a call is sent again: only a safe one (a read), only after UNAVAILABLE, within its deadline."""

from __future__ import annotations

import time

from chd.client.errors import ChdError, Unavailable

__all__ = ["backoff", "again"]


def backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): 0.1, 0.2, 0.4, ... at most 2."""
    return min(0.1 * 2 ** (attempt - 1), 2.0)


def again(failure: ChdError, safe: bool, attempt: int, retries: int, until: float) -> bool:
    """Whether to send a call again: a safe call, refused as UNAVAILABLE, with tries and time left.

    UNAVAILABLE is what gRPC answers when no connection could be made (the
    daemon restarting, a load balancer between replicas) and what chd answers
    when its storage failed before changing anything; other statuses are
    answers, and sending the same question again gets the same answer.
    """
    return (safe and isinstance(failure, Unavailable) and attempt <= retries
            and time.monotonic() + backoff(attempt) < until)
