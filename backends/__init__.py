"""Storage backends for chd and the registry that picks one by name.

``open_backend("memory")``, ``open_backend("disk", data_dir=..., durability=...)``,
``open_backend("redis", redis_url=...)`` or ``open_backend("package.module:Class", **options)`` for a custom backend:
any class satisfying ``backends.base.Backend`` (see docs/backends.md). The
spec's names ``in-memory`` and ``durable`` are accepted as aliases.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from chd.backends.base import Backend, Change, ConversationState, apply_change
from chd.core.errors import InvalidRequest

__all__ = [
    "Backend",
    "Change",
    "ConversationState",
    "apply_change",
    "ALIASES",
    "BACKENDS",
    "backend_factory",
    "open_backend",
]


def _memory(**options: Any) -> Backend:
    from chd.backends.memory import MemoryBackend

    if options.get("data_dir") is not None:
        # Accepting it silently would let a user believe their data is on disk.
        raise InvalidRequest(
            "the memory backend keeps nothing on disk; use --backend disk with --data-dir"
        )
    return MemoryBackend()


def _disk(data_dir: Any = None, durability: str | None = None, **options: Any) -> Backend:
    from chd.backends.disk import DiskBackend

    if data_dir is None:
        raise InvalidRequest("the disk backend needs a directory: --data-dir DIR (or CHD_DATA_DIR)")
    return DiskBackend(data_dir, durability=durability, **options)


def _redis(
    redis_url: Any = None, data_dir: Any = None, durability: Any = None, **options: Any
) -> Backend:
    from chd.backends.redis_backend import RedisBackend

    if redis_url is None:
        raise InvalidRequest(
            "the redis backend needs a server: --redis-url redis://HOST:PORT/DB (or CHD_REDIS_URL)"
        )
    if data_dir is not None or durability is not None:
        # Accepting them silently would let a user believe Redis writes there.
        raise InvalidRequest(
            "the redis backend keeps nothing in --data-dir and has no --durability; "
            "Redis's own persistence (appendonly, appendfsync) decides what survives"
        )
    return RedisBackend(redis_url, **options)


BACKENDS: dict[str, Callable[..., Backend]] = {"memory": _memory, "disk": _disk, "redis": _redis}
ALIASES = {"in-memory": "memory", "durable": "disk"}


def backend_factory(name: str) -> Callable[..., Backend]:
    """What builds the backend ``name`` (a registered name, alias or ``module:Class``).

    Raises:
        InvalidRequest: Unknown name, or a class that cannot be loaded.
    """
    name = ALIASES.get(name, name)
    factory = BACKENDS.get(name)
    if factory is not None:
        return factory
    if ":" not in name:
        raise InvalidRequest(
            f"unknown backend {name!r}; use one of {', '.join(sorted(BACKENDS))} "
            "or module:Class for a custom one"
        )
    module_name, _, class_name = name.partition(":")
    try:
        # Whatever the user named is trusted to build a Backend; the daemon's first use says if not.
        loaded: Callable[..., Backend] = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise InvalidRequest(f"cannot load backend {name!r}: {exc}") from None
    return loaded


def open_backend(name: str, **options: Any) -> Backend:
    """A backend by registered name, alias or ``module:Class`` path.

    Options that are None are left out, so a custom class only receives the
    options the user actually gave.

    Raises:
        InvalidRequest: Unknown name, a class that cannot be loaded or does not
            implement the protocol, or options the backend cannot use.
        StorageError: The backend could not open its storage.
    """
    name = ALIASES.get(name, name)
    options = {key: value for key, value in options.items() if value is not None}
    factory = backend_factory(name)
    try:
        backend = factory(**options)
    except TypeError as exc:
        raise InvalidRequest(f"backend {name!r} does not take these options: {exc}") from None
    if not isinstance(backend, Backend):
        raise InvalidRequest(f"backend {name!r} does not implement backends.base.Backend")
    return backend
