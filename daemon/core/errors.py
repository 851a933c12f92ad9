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
