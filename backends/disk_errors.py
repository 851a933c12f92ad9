"""What a diskcache or SQLite failure means, in words a user can act on."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import diskcache

__all__ = ["is_full", "describe_open_error"]


def is_full(exc: BaseException) -> bool:
    """True for SQLITE_FULL ("database or disk is full") and ENOSPC/EDQUOT."""
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or (
            "database or disk is full" in str(exc)
        )
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def describe_open_error(exc: BaseException, path: Path) -> str:
    """Why a data dir could not be opened, for a one-line start-up error."""
    if is_full(exc):
        return "the disk is full"
    if isinstance(exc, diskcache.Timeout):
        return "the database stayed locked by another process"
    message = str(exc)
    if path.exists() and not path.is_dir():
        return "it is a file, not a directory"
    if (path / diskcache.core.DBNAME).is_dir():
        return (
            f"{diskcache.core.DBNAME} in it is a directory, not chd's database file; "
            "move it away (or restore the file from a backup)"
        )
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in message:
        return (
            "cache.db is not a SQLite database (corrupted or not chd's); "
            "restore it from a backup or move it away"
        )
    if isinstance(exc, sqlite3.DatabaseError) and "malformed" in message:
        return (
            "the database is corrupted (SQLite says: database disk image is malformed); "
            "restore it from a backup"
        )
    if isinstance(exc, OSError) and exc.errno:
        cause = os.strerror(exc.errno).lower()
        return cause if path.is_dir() else f"cannot create it: {cause}"
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        return f"not writable ({message})"
    if "readonly" in message or "read-only" in message:
        return f"not writable ({message})"
    return message
