"""The daemon's exceptions; the gRPC adapter maps each to one status code.

    DaemonError
     ├── InvalidRequest       INVALID_ARGUMENT  bad field, unparseable query
     ├── NotFound             NOT_FOUND         a seq that is not in the buffer
     ├── TooLarge             RESOURCE_EXHAUSTED  over a size or count limit
     ├── DeadlineExceeded     DEADLINE_EXCEEDED the caller's deadline passed first
     └── StorageError         UNAVAILABLE       the backend failed
          ├── StorageFull     RESOURCE_EXHAUSTED  the backend has no room
          └── EmptiedDatabase UNAVAILABLE       a data dir that held data lost its database

The core raises these before it changes anything, so a failed query leaves
the conversation as it was.
"""

from __future__ import annotations

__all__ = [
    "DaemonError",
    "InvalidRequest",
    "NotFound",
    "TooLarge",
    "DeadlineExceeded",
    "StorageError",
    "StorageFull",
    "EmptiedDatabase",
    "quote",
]


class DaemonError(Exception):
    """Base of every error the daemon reports to a caller.

    ``operation`` is what the failed query tried to do (``store``...,
    ``unknown`` when that could not be told), set by
    ``ConversationHistory.query`` so the trace and the metrics label a failure
    without reading the query a second time.
    """

    operation: str | None = None


class InvalidRequest(DaemonError):
    """The query, metadata or data is malformed or not understood."""


class NotFound(DaemonError):
    """The query names something that does not exist."""


class TooLarge(DaemonError):
    """The request is over a configured size or count limit."""


class DeadlineExceeded(DaemonError):
    """The caller's deadline passed at a checkpoint, before anything was changed."""


class StorageError(DaemonError):
    """The storage backend could not complete the operation."""


class StorageFull(StorageError):
    """The storage backend is out of space; reads still work."""


class EmptiedDatabase(StorageError):
    """A data dir that held a store has a missing or empty database; ``what`` says so without the advice."""

    def __init__(self, message: str, what: str) -> None:
        super().__init__(message)
        self.what = what


def quote(text: str, limit: int = 80) -> str:
    """``text`` quoted for an error message, cut to about ``limit`` characters.

    A message echoing a caller's whole string can be megabytes long: gRPC
    carries it in a header (16 kB by default), and a longer one reaches the
    caller as the transport's RESOURCE_EXHAUSTED instead of the daemon's
    answer. The cut says how long the whole string was.
    """
    if len(text) <= limit:
        return repr(text)
    return f"{text[: max(limit - 3, 1)]!r}... ({len(text)} characters)"
