"""Long instructions are read in a child process, so their rules' regex time never holds the daemon's interpreter.

A 2,000-character query costs the rules 15 to 30 ms of CPU, 40 to 60 times
a valid query's, and a regex search holds the GIL for its whole run: every
other call of the daemon waits behind it, whatever the interpreter's switch
interval (issue 28, item 10: one client sending such queries doubled the
other callers' p99). Read in a child, the call waits on a pipe, the GIL is
free, and the other calls run on the other core.

Reading is a pure function of the text (``parser.reading_of``), so the child
holds no state: it is started on the first long query (that query and any
until the child is ready are read in the daemon, as before) and serves one
query at a time. What a caller sees does not change (the same reading or
refusal), and a call never waits on the child past half of its time left
(``reading_deadline``), nor past ``timeout``: then its query is read in the
daemon. A child that dies, answers anything but a frame of its own, stays
late past ``timeout``, or runs other code than the daemon (an upgrade
installed under a running daemon: the modules' modification times differ)
is stopped; the query it had is read in the daemon, and the next long query
starts another (not for ``RETRY_AFTER`` seconds after a failed start; never
again after a mismatch). The child ends with the daemon on any exit: the
kernel kills it when its parent dies (Linux ``PR_SET_PDEATHSIG``), and it
exits when its stdin closes.

    python -P -m chd.core.language.reading_process PARENT_PID   # framed pickles on stdin/stdout
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Any

__all__ = ["ReadingProcess", "reading_deadline", "serve_readings", "fingerprint"]

log = logging.getLogger(__name__)

# A frame is a 4-byte big-endian length and a pickle of that many bytes.
_LENGTH = struct.Struct(">I")
# Queries this long or longer go to the child: every instruction a caller
# writes by hand is shorter, and under this a query costs the rules < 3 ms.
MIN_CHARS = 256
# Seconds between tries to start a child that failed to start.
RETRY_AFTER = 30.0
# The child's nice value: the daemon's own calls come first when the cores are
# short, without starving the child behind every other process (at 10 it got a
# tenth of a core beside busy processes and long queries took 5 times longer).
NICENESS = 5

# Reads a query: (query, with did_you_mean rewrites) -> reading or refusal, returned.
Reader = Callable[[str, bool], Any]

_DEADLINE: ContextVar[float | None] = ContextVar("chd_reading_deadline", default=None)


@contextmanager
def reading_deadline(deadline: float | None) -> Iterator[None]:
    """Queries read in this block wait on the child at most half of the time left to ``deadline`` (monotonic)."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def fingerprint() -> dict[str, int]:
    """The modification time of each chd.core module this process has loaded, by name."""
    found: dict[str, int] = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name.startswith("chd.core") and path:
            try:
                found[name] = os.stat(path).st_mtime_ns
            except OSError:
                found[name] = -1
    return found


class ReadingProcess:
    """Reads queries of ``min_chars`` or more in one child process (module docstring)."""

    def __init__(
        self,
        read_here: Reader,
        min_chars: int = MIN_CHARS,
        timeout: float = 10.0,
        command: tuple[str, ...] | None = None,
    ) -> None:
        self.read_here = read_here
        self.min_chars = min_chars
        self.timeout = timeout
        self.read_in_child = 0  # queries the child answered
        module = "chd.core.language.reading_process"
        # -P: the daemon's working directory is not put on the child's path.
        self._command = command or (sys.executable, "-P", "-m", module, str(os.getpid()))
        self._code = fingerprint()
        self._lock = threading.Lock()  # one query at a time on the pipe
        self._child: subprocess.Popen[bytes] | None = None  # set once it said it is ready
        self._started = threading.Event()  # set once a start has ended, well or not
        self._starting = False
        self._retry_at = 0.0  # after a failed start, no other before this (monotonic)
        self._closed = False
        self._owed = 0  # queries sent whose answers nobody waited for: read and dropped first
        self._owed_since = 0.0

    def __call__(self, query: str, rewrites: bool = True) -> Any:
        """The reading of ``query`` or its refusal, as ``read_here`` would give it."""
        if len(query) < self.min_chars or not self._usable():
            return self.read_here(query, rewrites)
        until = time.monotonic() + self._budget()
        if not self._lock.acquire(timeout=max(0.0, until - time.monotonic())):
            return self.read_here(query, rewrites)  # the child is busy past what this call can wait
        try:
            child = self._child
            if child is None:
                return self.read_here(query, rewrites)
            try:
                outcome = self._ask(child, query, rewrites, until)
            except TimeoutError:
                if time.monotonic() - self._owed_since >= self.timeout:
                    log.warning(
                        "the query reader process gave no answer in %.0f s; restarting it",
                        self.timeout,
                    )
                    self._stop_child()
                # Else only this call's time ran out; its answer is dropped when it comes.
                return self.read_here(query, rewrites)
            except Exception as why:  # dead, lying, or of another version: the daemon reads it
                log.warning("the query reader process failed (%s); restarting it", _reason(why))
                self._stop_child()
                return self.read_here(query, rewrites)
        finally:
            self._lock.release()
        self.read_in_child += 1
        return outcome

    def start(self, timeout: float) -> bool:
        """Start the child now rather than at the first long query; whether it is ready in ``timeout`` s."""
        if self._child is not None:
            return True
        self._started.clear()
        self._usable()
        return self._started.wait(timeout) and self._child is not None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._stop_child()

    def _budget(self) -> float:
        deadline = _DEADLINE.get()
        if deadline is None:
            return self.timeout
        return min(self.timeout, (deadline - time.monotonic()) / 2)

    def _usable(self) -> bool:
        """Whether a ready child is there; starts one in the background if none is."""
        if self._child is not None:
            return True
        with self._lock:
            if not (self._starting or self._closed or self._child is not None) and (
                time.monotonic() >= self._retry_at
            ):
                self._starting = True
                threading.Thread(target=self._run, name="chd-reader", daemon=True).start()
        return False

    def _run(self) -> None:
        """Start a child and stay until it ends: the kernel's parent-death signal follows this thread."""
        child = self._start()
        with self._lock:
            self._starting = False
            if child is not None and not self._closed:
                self._child, self._owed = child, 0
        self._started.set()
        if child is None:
            return
        if self._closed:
            _end(child)
            return
        log.info("query reader process started (pid %d)", child.pid)
        assert child.stderr is not None
        for line in child.stderr:  # until it ends; a line it writes is one line of the log
            log.warning("query reader process: %s", line.decode("utf-8", "replace").strip()[:300])
        child.wait()

    def _start(self) -> subprocess.Popen[bytes] | None:
        child = None
        try:
            child = subprocess.Popen(
                self._command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert child.stdout is not None
            # The child says it has imported the rules, and which files; until then
            # queries are read here.
            greeting = _read_frame(child.stdout, self.timeout * 3)
            if not (isinstance(greeting, tuple) and greeting[:1] == ("ready",)):
                raise ValueError(f"it said {greeting!r:.200}")
            theirs: dict[str, int] = greeting[1]
            if any(self._code.get(name, stamp) != stamp for name, stamp in theirs.items()):
                self._closed = True  # its code is not the daemon's: never start one again
                log.warning(
                    "the query reader process runs other chd code than this daemon (installed "
                    "since it started?); long queries are read in the daemon until it restarts"
                )
                _end(child)
                return None
            return child
        except Exception as why:
            said = _stderr_of(child) if child is not None else ""
            log.warning(
                "could not start the query reader process (%s%s); long queries are read in the "
                "daemon, and a start is tried again in %.0f s",
                _reason(why),
                f": {said}" if said else "",
                RETRY_AFTER,
            )
            if child is not None:
                _end(child)
            with self._lock:
                self._retry_at = time.monotonic() + RETRY_AFTER
            return None

    def _ask(self, child: subprocess.Popen[bytes], query: str, rewrites: bool, until: float) -> Any:
        assert child.stdin is not None and child.stdout is not None
        while self._owed:  # answers to calls that stopped waiting come first
            _read_frame(child.stdout, until - time.monotonic())
            self._owed -= 1
        _write_frame(child.stdin, (query, rewrites))
        self._owed, self._owed_since = 1, time.monotonic()
        kind, value = _read_frame(child.stdout, until - time.monotonic())
        if kind != "reading":
            raise ValueError(f"it answered {kind!r:.100}")
        self._owed = 0
        return value

    def _stop_child(self) -> None:
        child, self._child, self._owed = self._child, None, 0
        if child is not None:
            _end(child)


def _reason(why: BaseException) -> str:
    return f"{type(why).__name__}: {why}"[:300]


def _stderr_of(child: subprocess.Popen[bytes]) -> str:
    """The last line the child wrote to stderr, once it has ended (one line for the daemon's log)."""
    child.kill()
    try:
        _, err = child.communicate(timeout=5)
    except (subprocess.TimeoutExpired, OSError, ValueError):
        return ""
    lines = (err or b"").decode("utf-8", "replace").strip().splitlines()
    return lines[-1][:300] if lines else ""


def _end(child: subprocess.Popen[bytes]) -> None:
    child.kill()
    try:
        child.wait(5)
    except subprocess.TimeoutExpired:
        pass
    for pipe in (child.stdin, child.stdout, child.stderr):
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
                raise TimeoutError(f"no answer within {timeout:.1f} s")
        chunk = os.read(fd, left)
        if not chunk:
            raise EOFError("the pipe closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def serve_readings(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The child's loop: a query in, its reading (or refusal, as a value) out, until stdin closes."""
    from chd.core.language.parser import reading_of

    _write_frame(stdout, ("ready", fingerprint()))
    while True:
        try:
            query, rewrites = _read_frame(stdin, None)
        except EOFError:
            return
        _write_frame(stdout, ("reading", reading_of(query, rewrites)))


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when ``parent`` (the thread that started it) ends."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: stdin's end still ends it
        pass
    if os.getppid() != parent:  # it died before the signal was asked for
        os._exit(0)


def _main(argv: list[str]) -> int:
    # Ctrl-C reaches the daemon's whole process group; the daemon decides when this ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if argv:
        _die_with(int(argv[0]))
    os.nice(NICENESS)
    # Frames go to the daemon on the original stdout; anything printed by mistake goes to stderr.
    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    try:
        serve_readings(sys.stdin.buffer, frames)
    except (BrokenPipeError, EOFError):  # the daemon is gone
        return 0
    except Exception as why:  # one line: the daemon logs it as the reason
        print(f"chd query reader: {_reason(why)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
