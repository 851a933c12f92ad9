"""What a failed call raises: one exception per status a caller acts on.

    ChdError                 any status not named below (INTERNAL, ...)
     ├── NotUnderstood       INVALID_ARGUMENT   the query or a field; the message says what to write
     ├── NotFound            NOT_FOUND          a seq that is not in the buffer
     ├── TooLarge            RESOURCE_EXHAUSTED over a size or count limit, or the disk is full
     ├── DeadlineExceeded    DEADLINE_EXCEEDED  no answer within the deadline
     ├── Unauthenticated     UNAUTHENTICATED    a token is configured and this one is missing or wrong
     └── Unavailable         UNAVAILABLE        no daemon answers, or its storage failed

Each carries the gRPC ``status`` and the daemon's ``message`` (``str(error)``
is the message alone, so it can be shown to a person or a model as is).
"""

from __future__ import annotations

import grpc

__all__ = [
    "ChdError",
    "NotUnderstood",
    "NotFound",
    "TooLarge",
    "DeadlineExceeded",
    "Unauthenticated",
    "Unavailable",
    "error_for",
]


class ChdError(Exception):
    """A call the daemon (or the channel to it) refused; ``status`` says which way."""

    status: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, status: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class NotUnderstood(ChdError):
    """The query was not understood, or a field has the wrong type, range or source."""

    status = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(ChdError):
    """The query names an utterance that is not in the buffer."""

    status = grpc.StatusCode.NOT_FOUND


class TooLarge(ChdError):
    """Over a configured size or count limit (or the daemon's disk is full)."""

    status = grpc.StatusCode.RESOURCE_EXHAUSTED


class DeadlineExceeded(ChdError):
    """No answer within the deadline; a store may or may not have been applied."""

    status = grpc.StatusCode.DEADLINE_EXCEEDED


class Unauthenticated(ChdError):
    """The daemon wants ``authorization: Bearer <token>`` and did not get the right one."""

    status = grpc.StatusCode.UNAUTHENTICATED


class Unavailable(ChdError):
    """No daemon answers at the target, or its storage backend failed."""

    status = grpc.StatusCode.UNAVAILABLE


_BY_STATUS: dict[grpc.StatusCode, type[ChdError]] = {
    cls.status: cls
    for cls in (NotUnderstood, NotFound, TooLarge, DeadlineExceeded, Unauthenticated, Unavailable)
}


def error_for(status: grpc.StatusCode, message: str) -> ChdError:
    """The exception for ``status``; statuses without a class of their own are a plain ChdError."""
    cls = _BY_STATUS.get(status, ChdError)
    return cls(message, status)
