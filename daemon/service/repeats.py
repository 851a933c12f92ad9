"""Repeated identical warnings and errors, logged once a window with a count.

A full disk refused 1,329 stores and logged 1,329 identical ERROR lines
(issue 28): a flood that buries whatever else happened and can fill the disk
the log is on. The first of a kind is logged at once; the same message again
within ``window`` seconds is counted, not logged; the next one after the
window is logged with how many were left out since. A storm that stops
leaves its count untold until the message comes back: the first line already
said what is wrong.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Callable

__all__ = ["RepeatFilter", "REPEAT_WINDOW"]

# Seconds during which the same message is logged once.
REPEAT_WINDOW = 10.0
# Distinct messages remembered; the oldest is forgotten past it.
_REMEMBERED = 256


class RepeatFilter(logging.Filter):
    """A handler filter letting one of each WARNING-or-worse message through per ``window`` seconds."""

    def __init__(self, window: float = REPEAT_WINDOW, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window = window
        self.clock = clock
        # (logger, level, message) -> [when its window began, how many were left out in it]
        self._seen: OrderedDict[tuple[str, int, str], list[float]] = OrderedDict()
        # Handler.handle runs filters outside the handler's lock.
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        message = record.getMessage()
        key = (record.name, record.levelno, message)
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
