"""Repeated identical warnings and errors, logged once a window with a count.

A full disk refused 1,329 stores and logged 1,329 identical ERROR lines
(issue 28): a flood that buries whatever else happened and can fill the disk
the log is on. The first of a kind is logged at once; the same message again
within ``window`` seconds is counted, not logged; the next one after the
window is logged with how many were left out since. A storm that stops
leaves its count untold until the message comes back: the first line already
said what is wrong.

Two kinds of line are never dropped (outside review of issue 28): a record
logged with ``extra=ALWAYS`` (health transitions: a storage flap within the
window left the last line saying SERVING while health said NOT_SERVING), and
nothing is taken for a repeat unless it is the same logger, level and
message and, for a record with an exception, the same exception type raised
at the same innermost frame (two different failures logged by one
``log.exception("...")`` are two kinds).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["ALWAYS", "RepeatFilter", "REPEAT_WINDOW"]

# Seconds during which the same message is logged once.
REPEAT_WINDOW = 10.0
# Distinct messages remembered; the oldest is forgotten past it.
_REMEMBERED = 256
# ``log.warning(..., extra=ALWAYS)``: a line the filter never drops.
ALWAYS = {"chd_never_repeated": True}


class RepeatFilter(logging.Filter):
    """A handler filter letting one of each WARNING-or-worse message through per ``window`` seconds."""

    def __init__(
        self, window: float = REPEAT_WINDOW, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.window = window
        self.clock = clock
        # (logger, level, message, exception kind) -> [when its window began, how many were left out in it]
        self._seen: OrderedDict[tuple[str, int, str, tuple[str, str, int] | None], list[float]] = (
            OrderedDict()
        )
        # Handler.handle runs filters outside the handler's lock.
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or getattr(record, "chd_never_repeated", False):
            return True
        message = record.getMessage()
        key = (record.name, record.levelno, message, _exception_kind(record))
        now = self.clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[0] < self.window:
                seen[1] += 1
                return False
            self._seen[key] = [now, 0]
            self._seen.move_to_end(key)
            if len(self._seen) > _REMEMBERED:
                self._seen.popitem(last=False)
        if seen is not None and seen[1]:
            record.msg = f"{message} (and {int(seen[1]):,} more like it in the {now - seen[0]:.0f} s before, not logged)"
            record.args = None
        return True


def _exception_kind(record: logging.LogRecord) -> tuple[str, str, int] | None:
    """The exception's type and the innermost frame it was raised at (file, line), if the record has one."""
    info = record.exc_info
    if not info or info[0] is None:
        return None
    kind, _, tb = info
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = (tb.tb_frame.f_code.co_filename, tb.tb_lineno) if tb is not None else ("", 0)
    return (f"{kind.__module__}.{kind.__qualname__}", *where)
