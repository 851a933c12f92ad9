"""Long instructions are read in a child process, so their rules' regex time never holds the daemon's interpreter.

A 2,000-character query costs the rules 15 to 30 ms of CPU, 40 to 60 times
a valid query's, and a regex search holds the GIL for its whole run: every
other call of the daemon waits behind it, whatever the interpreter's switch
interval (issue 28, item 10: one client sending such queries doubled the
other callers' p99). Read in a child, the call waits on a pipe, the GIL is
free, and the other calls run on the other core.

Reading is a pure function of the text (``parser.reading_of``), so the child
holds no state and needs no care: it is started on the first long query
(that query and any until the child is ready are read in the daemon, as
before), serves one query at a time, and exits when its stdin closes, so it
ends with the daemon even when the daemon is SIGKILLed. A child that dies,
answers garbage or takes longer than ``timeout`` is stopped and started
again on the next long query; the query it had is read in the daemon.
Nothing a caller sees changes: the same reading or the same refusal.

    python -m chd.core.language.reading_process   # the child: framed pickles on stdin/stdout
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

__all__ = ["ReadingProcess", "serve_readings"]

log = logging.getLogger(__name__)

# A frame is a 4-byte big-endian length and a pickle of that many bytes.
_LENGTH = struct.Struct(">I")
# Queries this long or longer go to the child: every instruction a caller
# writes by hand is shorter, and under this a query costs the rules < 3 ms.
MIN_CHARS = 256
# Seconds between tries to start a child that failed to start.
RETRY_AFTER = 30.0


class ReadingProcess:
    """Reads queries of ``min_chars`` or more in one child process (module docstring)."""

    def __init__(
        self,
        read_here: Callable[[str], Any],
        min_chars: int = MIN_CHARS,
        timeout: float = 10.0,
        command: tuple[str, ...] | None = None,
    ) -> None:
        self.read_here = read_here
        self.min_chars = min_chars
        self.timeout = timeout
        self.read_in_child = 0  # queries the child answered
        self._command = command or (sys.executable, "-m", "chd.core.language.reading_process")
        self._lock = threading.Lock()  # one query at a time on the pipe
        self._child: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._started = threading.Event()  # set once a child has said it is ready
        self._starting = False
        self._retry_at = 0.0  # after a failed start, no other before this (monotonic)
        self._closed = False

    def __call__(self, query: str) -> Any:
        """The reading of ``query`` or its refusal, as ``read_here`` would give it."""
        if len(query) < self.min_chars or not self._usable():
            return self.read_here(query)
        with self._lock:
            child = self._child
            if child is None or not self._ready:
                return self.read_here(query)
            try:
                outcome = self._ask(child, query)
            except (OSError, EOFError, pickle.UnpicklingError, TimeoutError, ValueError) as why:
                log.warning("the query reader process failed (%s); restarting it", why)
                self._stop_child()
                return self.read_here(query)
        self.read_in_child += 1
        return outcome

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._stop_child()

    def _usable(self) -> bool:
        """Whether a ready child is there; starts one in the background if none is."""
        if self._ready:
            return True
        with self._lock:
            if not (self._starting or self._closed or self._ready) and (
                time.monotonic() >= self._retry_at
            ):
                self._starting = True
                threading.Thread(target=self._start, name="chd-reader-start", daemon=True).start()
        return False

    def _start(self) -> None:
        child = None
        try:
            child = subprocess.Popen(
                self._command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            assert child.stdout is not None
            # The child says it has imported the rules; until then queries are read here.
            greeting = _read_frame(child.stdout, self.timeout * 3)
            if greeting != "ready":
                raise ValueError(f"the reader process said {greeting!r}")
        except Exception as why:
            log.warning(
                "could not start the query reader process (%s); long queries are read in the "
                "daemon, and a start is tried again in %.0f s",
                why,
                RETRY_AFTER,
            )
            if child is not None:
                _end(child)
            with self._lock:
                self._starting = False
                self._retry_at = time.monotonic() + RETRY_AFTER
            self._started.set()
            return
        with self._lock:
            self._starting = False
            if not self._closed:
                self._child, self._ready = child, True
        if self._closed:
            _end(child)
        self._started.set()

    def start(self, timeout: float) -> bool:
        """Start the child now rather than at the first long query; whether it is ready in ``timeout`` s."""
        if self._ready:
            return True
        self._started.clear()
        self._usable()
        return self._started.wait(timeout) and self._ready

    def _ask(self, child: subprocess.Popen[bytes], query: str) -> Any:
        assert child.stdin is not None and child.stdout is not None
        _write_frame(child.stdin, query)
        kind, value = _read_frame(child.stdout, self.timeout)
        if kind != "reading":
            raise ValueError(f"the reader process answered {kind!r}")
        return value

    def _stop_child(self) -> None:
        child, self._child, self._ready = self._child, None, False
        if child is not None:
            _end(child)


def _end(child: subprocess.Popen[bytes]) -> None:
    child.kill()
    child.wait(5)
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:  # a write the dead child never read
                pass


def _write_frame(pipe: IO[bytes], value: object) -> None:
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    frame = memoryview(_LENGTH.pack(len(body)) + body)
    fd = pipe.fileno()  # unbuffered, as the reads are: nothing is left in a buffer
    while frame:
        frame = frame[os.write(fd, frame) :]


def _read_frame(pipe: IO[bytes], timeout: float | None) -> Any:
    head = _read_exactly(pipe, _LENGTH.size, timeout)
    return pickle.loads(_read_exactly(pipe, _LENGTH.unpack(head)[0], timeout))


def _read_exactly(pipe: IO[bytes], size: int, timeout: float | None) -> bytes:
    """``size`` bytes from ``pipe``; EOFError if it closes first, TimeoutError past ``timeout``."""
    fd = pipe.fileno()
    until = None if timeout is None else time.monotonic() + timeout
    chunks: list[bytes] = []
    left = size
    while left:
        if until is not None:
            wait = until - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError(f"no answer within {timeout} s")
        chunk = os.read(fd, left)
        if not chunk:
            raise EOFError("the pipe closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def serve_readings(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The child's loop: a query in, its reading (or refusal, as a value) out, until stdin closes."""
    from chd.core.language.parser import reading_of

    _write_frame(stdout, "ready")
    while True:
        try:
            query = _read_frame(stdin, None)
        except EOFError:
            return
        _write_frame(stdout, ("reading", reading_of(query)))


if __name__ == "__main__":
    import signal

    # Ctrl-C reaches the daemon's whole process group; the daemon decides when this ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Below the daemon's priority: when the cores are short, the daemon's
    # calls (and the callers beside it on the machine) run first, and long
    # queries, the costly ones, take what is left.
    os.nice(10)
    # Frames go to the daemon on the original stdout; anything printed by mistake goes to stderr.
    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve_readings(sys.stdin.buffer, frames)
