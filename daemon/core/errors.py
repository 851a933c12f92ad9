"""The daemon's exceptions; the gRPC adapter maps each to one status code.

    DaemonError
     ├── InvalidRequest       INVALID_ARGUMENT  bad field, unparseable query
     ├── NotFound             NOT_FOUND         a seq that is not in the buffer
     ├── TooLarge             RESOURCE_EXHAUSTED  over a size or count limit
     └── StorageError         UNAVAILABLE       the backend failed
          └── StorageFull     RESOURCE_EXHAUSTED  the backend has no room

The core raises these before it changes anything, so a failed query leaves
the conversation as it was.
"""

from __future__ import annotations

__all__ = [
    "DaemonError",
    "InvalidRequest",
    "NotFound",
    "TooLarge",
    "StorageError",
    "StorageFull",
    "quote",
]



class DaemonError(Exception):
    """Base of every error the daemon reports to a caller."""


class InvalidRequest(DaemonError):
    """The query, metadata or data is malformed or not understood."""


class NotFound(DaemonError):
    """The query names something that does not exist."""


class TooLarge(DaemonError):
    """The request is over a configured size or count limit."""


class StorageError(DaemonError):
    """The storage backend could not complete the operation."""


class StorageFull(StorageError):
    """The storage backend is out of space; reads still work."""


# gRPC carries an error's message in a header, and headers are limited to
# 16 KiB: a message echoing a 20 kB field made the transport answer
# RESOURCE_EXHAUSTED instead of ours (issue 14). Messages quote a prefix.
QUOTE_LIMIT = 60


def quote(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` as a short repr for an error message: whitespace collapsed, cut at ``limit``."""
    head = text[: limit * 4]
    shown = " ".join(head.split())
    if len(shown) > limit or len(head) < len(text):
        shown = shown[: limit - 3] + "..."
    return repr(shown)
