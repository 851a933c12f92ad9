"""A list whose items are made on first use: a state's archive, decoded only when asked for.

The disk backend reads a conversation's archive blocks with the rest of the
state (so the snapshot stays one version of the records) but decodes them
only when something looks at the archive: most requests read the buffer and
the summary, and a cache miss decoding an archive four times the buffer's
size was most of its cost (issue 17).

It is a ``list`` subclass so every caller keeps treating
``ConversationState.archive`` as the list the protocol promises. Every
method that reads items is overridden to decode first; the C paths that
read a list's items directly (``list + other``, ``json``) would see it empty,
which is why ``__add__``/``__radd__`` are overridden too (Python tries a
subclass's reflected method first) and nothing here is JSON-encoded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["LazyList", "is_unloaded"]

T = TypeVar("T")


class LazyList(list, Generic[T]):  # type: ignore[type-arg]
    """``make()``'s items, made once, on the first read, by whichever thread reads first."""

    __slots__ = ("_make", "_lock")

    def __init__(self, make: Callable[[], list[T]]) -> None:
        super().__init__()
        self._make: Callable[[], list[T]] | None = make
        self._lock = threading.Lock()

    def _fill(self) -> None:
        if self._make is not None:
            with self._lock:
                make = self._make
                if make is not None:
                    list.extend(self, make())
                    # Cleared only once the items are in: a reader that sees
                    # None sees them all.
                    self._make = None

    @property
    def loaded(self) -> bool:
        return self._make is None


def _reading(name: str) -> Callable[..., Any]:
    method = getattr(list, name)

    def read(self: LazyList[Any], *args: Any, **kwargs: Any) -> Any:
        self._fill()
        return method(self, *args, **kwargs)

    read.__name__ = name
    return read


for _name in (
    "__len__",
    "__iter__",
    "__getitem__",
    "__contains__",
    "__reversed__",
    "__repr__",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__add__",
    "__mul__",
    "__rmul__",
    "__iadd__",
    "__imul__",
    "__setitem__",
    "__delitem__",
    "__reduce_ex__",
    "index",
    "count",
    "copy",
    "append",
    "extend",
    "insert",
    "pop",
    "remove",
    "clear",
    "sort",
    "reverse",
):
    setattr(LazyList, _name, _reading(_name))


def _radd(self: LazyList[Any], other: Any) -> Any:
    self._fill()
    return other + list(self) if isinstance(other, list) else NotImplemented


LazyList.__radd__ = _radd  # type: ignore[attr-defined]
LazyList.__hash__ = None


def is_unloaded(items: list[Any]) -> bool:
    """True for a LazyList whose items are not made yet (its length would make them)."""
    return isinstance(items, LazyList) and not items.loaded
