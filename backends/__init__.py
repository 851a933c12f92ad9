"""Storage backends for chd and the registry that picks one by name.

``open_backend("memory")`` or ``open_backend("package.module:Class", **options)``
for a custom backend: any class satisfying ``backends.base.Backend``.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from backends.base import Backend, Change, ConversationState, apply_change
from daemon.errors import InvalidRequest

__all__ = [
    "Backend",
    "Change",
    "ConversationState",
    "apply_change",
    "BACKENDS",
    "open_backend",
]


def _memory(**_options: Any) -> Backend:
    from backends.memory import MemoryBackend

    return MemoryBackend()


BACKENDS: dict[str, Callable[..., Backend]] = {"memory": _memory}


def open_backend(name: str, **options: Any) -> Backend:
    """A backend by registered name or ``module:Class`` path."""
    factory = BACKENDS.get(name)
    if factory is None:
        if ":" not in name:
            raise InvalidRequest(
                f"unknown backend {name!r}; use one of {', '.join(sorted(BACKENDS))} "
                "or module:Class for a custom one"
            )
        module_name, _, class_name = name.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as exc:
            raise InvalidRequest(f"cannot load backend {name!r}: {exc}") from None
    backend = factory(**options)
    if not isinstance(backend, Backend):
        raise InvalidRequest(f"backend {name!r} does not implement backends.base.Backend")
    return backend
