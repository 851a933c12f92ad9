"""A base for Backends that wrap another to watch or refuse its transactions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chd.backends.base import Backend, Change, ConversationState, T

__all__ = ["WrappedBackend"]


class WrappedBackend:
    """Delegates everything to ``inner``; subclasses override ``transact``.

    Attributes the protocol does not name (a backend's ``name``, an export
    method) pass through, so wrapping never hides a backend's extras.
    """

    def __init__(self, inner: Backend) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet: no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.inner, name)

    def read(self, conversation_id: str) -> ConversationState:
        return self.inner.read(conversation_id)

    def transact(
        self, conversation_id: str, decide: Callable[[ConversationState], tuple[Change, T]]
    ) -> T:
        return self.inner.transact(conversation_id, decide)

    def conversations(self) -> list[str]:
        return self.inner.conversations()

    def close(self) -> None:
        self.inner.close()
