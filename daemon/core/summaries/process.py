"""The offline summarizer in a child process, so folding never holds the daemon's GIL.

The extractive summarizer is pure Python: a fold of five utterances takes
about 0.3-0.5 ms of the interpreter lock that request handling needs too.
In ``bench/bench_backends.py``'s default scenario (every fifth store
evicts) that made stores 9 points slower against the ceiling than with a
summarizer that costs nothing. A child process runs it on another core and
the daemon's threads only send a batch and wait, without the lock.

The child is a fresh ``python -m chd.core.summaries.process`` (forking a
process that runs gRPC threads is unsafe, and multiprocessing's ``spawn``
re-imports the parent's main script, which breaks an embedder's script
without a ``__main__`` guard), started on the first fold, so a daemon that
never folds never has one. The two talk over a socket pair with
``multiprocessing.connection`` framing. If the child dies or hangs, the call
fails with ``SummarizerError``, the ``SummaryWriter`` folds in the daemon
with its fallback, and the next call starts a new child. The child ignores
SIGINT (a Ctrl-C reaches the whole process group; the daemon decides when
it stops) and exits when the daemon closes the socket or dies.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from chd.core.summaries.extractive import ExtractiveSummarizer
from chd.core.summaries.summarizer import (
    Summarizer,
    SummarizerError,
    SummaryContext,
    summarize_with,
)
from chd.core.tokens import default_counter
from chd.core.utterance import Utterance

__all__ = ["NICE", "ProcessSummarizer", "offline_summarizer"]

log = logging.getLogger(__name__)

# How much lower the child's CPU priority is than the daemon's. Folds are
# background work: at equal priority the child took a core's share from the
# threads answering requests whenever stores came faster than folds (every
# store to a full buffer queues one; issue 17), and the store median rose
# with it. Under Linux's scheduler a child at +10 still gets an idle core
# whole, and about a tenth of a busy one, so folds lag under a sustained
# overload instead of slowing requests; the queue's limit
# (max_utterances_per_conversation) stays the back-pressure.
NICE = 10


def offline_summarizer() -> Summarizer:
    """The extractive summarizer over the daemon's token table (what the child runs)."""
    return ExtractiveSummarizer(default_counter())


# Utterances cross the socket as tuples of their fields: pickling the
# dataclasses ran their Python ``__getstate__`` per utterance, 0.1 ms of the
# daemon's interpreter lock per fold (issue 17), against 0.01 ms for tuples.
_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(Utterance)))
# An utterance's fields in declaration order (what Utterance(*row) takes back).
_Row = tuple[Any, ...]
# previous summary, utterances, token limit, and the context's (summary, buffered, parts).
_Message = tuple[
    str,
    tuple[_Row, ...],
    int,
    tuple[str, tuple[_Row, ...], tuple[tuple[int, int, str], ...]] | None,
]


def _flat(utterances: Sequence[Utterance]) -> tuple[_Row, ...]:
    return tuple(map(_FIELDS, utterances))


def _built(rows: Sequence[_Row]) -> tuple[Utterance, ...]:
    return tuple(Utterance(*row) for row in rows)


def _message(
    previous: str, utterances: Sequence[Utterance], limit: int, context: SummaryContext | None
) -> _Message:
    """What the daemon sends for one summary (``_call`` reads it back in the child)."""
    flat_context = (
        None if context is None else (context.summary, _flat(context.buffered), context.parts)
    )
    return previous, _flat(utterances), limit, flat_context


def _call(summarizer: Summarizer, message: _Message) -> str:
    previous, rows, limit, flat_context = message
    context = None
    if flat_context is not None:  # for a summarizer that reads one (conversation-wide weights)
        summary, buffered, parts = flat_context
        context = SummaryContext(summary=summary, buffered=_built(buffered), parts=parts)
    return summarize_with(summarizer, previous, _built(rows), limit, context)


def _counts(text: str) -> tuple[str, tuple[int, ...]] | None:
    """The child's token counts of ``text`` as the daemon checks it (stripped), with their encoding's name.

    The summarizer counted its text to fit the budget, so these are
    remembered lookups here; the daemon learns them (``TiktokenCounter.learn``)
    instead of encoding the text again (issue 17). None if they cannot be
    had: they only save work, and must not fail a summary that was written.
    """
    try:
        counter = default_counter()
        return counter.encoding_name, counter.part_counts(text.strip())
    except Exception:
        return None


def _serve(connection: Connection) -> None:
    """The child's loop: the factory first, then one ``_message`` in, one ``(ok, text or error, counts)`` out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(NICE)
    try:
        make = connection.recv()
    except (EOFError, OSError):
        return
    summarizer = make()
    if not _sent(connection, (True, "")):  # ready: the daemon may stop folding by itself
        return
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):  # the daemon is gone
            return
        if message is None:
            return
        try:
            text = _call(summarizer, message)
            reply: tuple[bool, str, tuple[str, tuple[int, ...]] | None] = (
                True,
                text,
                _counts(text),
            )
        except Exception as exc:  # the daemon's to report; the child goes on
            reply = (False, f"{type(exc).__name__}: {exc}", None)
        if not _sent(connection, reply):
            return


def _sent(connection: Connection, message: object) -> bool:
    """Send ``message``; False when the daemon is gone (stopped or killed meanwhile): the child just ends,
    without the BrokenPipeError trace a daemon stopping right after a start or a fold printed."""
    try:
        connection.send(message)
    except (EOFError, OSError):
        return False
    return True


class ProcessSummarizer:
    """A ``Summarizer`` that runs ``make()``'s summarizer in a child process.

    The child takes a moment to start and load its token table; until it
    says it is ready, summaries are written by ``local`` (the same
    summarizer in the daemon) rather than waited for.

    Args:
        make: builds the summarizer in the child; must be picklable (a
            module-level function).
        local: writes the summaries while the child starts; None to wait.
        name: the summarizer's name in responses (that of what ``make`` builds).
        timeout: seconds one summary may take before the child is killed.
        start_timeout: seconds the child may take to say it is ready.
        counter: the daemon's counter, taught the child's counts of each
            text it returns when both use the same encoding (``TiktokenCounter.learn``).
    """

    def __init__(
        self,
        make: Callable[[], Summarizer] = offline_summarizer,
        local: Summarizer | None = None,
        name: str = ExtractiveSummarizer.name,
        timeout: float = 30.0,
        start_timeout: float = 60.0,
        counter: object | None = None,
    ) -> None:
        self.name = name
        self._make = make
        self._local = local
        self._counter = counter
        self._timeout = timeout
        self._start_timeout = start_timeout
        self._lock = threading.Lock()  # one summary at a time through the pipe
        self._process: subprocess.Popen[bytes] | None = None
        self._connection: Connection | None = None
        self._started = 0.0
        self._ready = False
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The child's process id, or None while there is none."""
        return None if self._process is None else self._process.pid

    reads_context = True

    def summarize(
        self,
        previous: str,
        utterances: Sequence[Utterance],
        token_limit: int,
        context: SummaryContext | None = None,
    ) -> str:
        with self._lock:
            if self._closed:
                raise SummarizerError("the summarizer process is closed", retryable=False)
            try:
                connection = self._connection or self._start()
                if not self._ready and not self._wait_ready(connection):
                    assert self._local is not None
                    return summarize_with(self._local, previous, utterances, token_limit, context)
                connection.send(_message(previous, utterances, token_limit, context))
                if not connection.poll(self._timeout):
                    raise TimeoutError("no answer in time")
                ok, value, counts = connection.recv()
            except (OSError, EOFError, TimeoutError) as exc:
                # Dead, hung or never started: the next call starts a new one.
                self._stop(kill=True)
                raise SummarizerError(
                    f"the summarizer process failed ({type(exc).__name__}: {exc})"
                ) from None
        if not ok:
            raise SummarizerError(value)
        text = str(value)
        if isinstance(counts, tuple) and len(counts) == 2:
            self._learn(text, *counts)
        return text

    def _learn(self, text: str, encoding: str, counts: tuple[int, ...]) -> None:
        learn = getattr(self._counter, "learn", None)
        if learn is not None and getattr(self._counter, "encoding_name", None) == encoding:
            try:
                learn(text.strip(), counts)
            except (
                TypeError,
                ValueError,
            ):  # not counts after all: the text is counted here instead
                pass

    def _wait_ready(self, connection: Connection) -> bool:
        """True once the child said it is ready; with a ``local`` summarizer, do not wait for it."""
        left = self._start_timeout - (time.monotonic() - self._started)
        if left <= 0:
            raise TimeoutError(f"not ready after {self._start_timeout:g} s")
        if connection.poll(0 if self._local is not None else left):
            connection.recv()  # the ready message (EOFError if the child died starting)
            self._ready = True
        elif self._local is None:
            raise TimeoutError(f"not ready after {self._start_timeout:g} s")
        return self._ready

    def close(self, grace: float = 0.5) -> None:
        """Stop the child; later calls fail (the writer's fallback takes them).

        A summary in progress is not waited for past ``grace`` seconds: the
        child is terminated, that call fails, and shutdown stays bounded.
        """
        self._closed = True
        if self._lock.acquire(timeout=grace):
            try:
                self._stop(kill=False)
            finally:
                self._lock.release()
            return
        process = self._process
        if process is not None:
            process.terminate()  # the call in progress sees EOF and cleans up
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                process.kill()

    def _start(self) -> Connection:
        ours, theirs = socket.socketpair()
        # The child imports what the daemon can (this package, installed or
        # not, and the module of ``make``), as multiprocessing's spawn does.
        root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, *filter(None, sys.path)]))
        try:
            process = subprocess.Popen(
                [sys.executable, "-P", "-m", __name__, str(theirs.fileno())],  # -P: not the cwd
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
            )
        finally:
            theirs.close()
        connection = Connection(ours.detach())
        self._process, self._connection = process, connection
        self._started, self._ready = time.monotonic(), False
        connection.send(self._make)
        log.info("summarizer process started (pid %s)", process.pid)
        return connection

    def _stop(self, kill: bool) -> None:
        process, connection = self._process, self._connection
        self._process = self._connection = None
        if connection is not None:
            if not kill:
                try:
                    connection.send(None)
                except OSError:
                    pass
            connection.close()
        if process is not None:
            if kill:
                process.kill()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
