"""Repeated identical warnings and errors are logged once a window, with a count (issue 28, item 5)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from chd.service.repeats import REPEAT_WINDOW, RepeatFilter
from chd.service.tracelog import configure_logging


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Lines(list):
    """Messages written, and the clock their filter reads."""

    clock: _Clock


@pytest.fixture
def lines() -> Iterator[_Lines]:
    """What a handler with a RepeatFilter on a settable clock writes, one string a record."""
    out = _Lines()
    clock = out.clock = _Clock()

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            out.append(record.getMessage())

    handler = Collect()
    handler.addFilter(RepeatFilter(clock=clock))
    logger = logging.getLogger("chd.test.repeats")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    try:
        yield out
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


class TestRepeatFilter:
    def test_the_same_error_a_thousand_times_is_one_line_then_one_with_the_count(self, lines):
        log = logging.getLogger("chd.test.repeats")
        for _ in range(1_329):
            log.error("data dir %s is full: %s", "/data", "database or disk is full")
        assert lines == ["data dir /data is full: database or disk is full"]
        lines.clock.now += REPEAT_WINDOW + 1
        log.error("data dir %s is full: %s", "/data", "database or disk is full")
        assert lines[1] == (
            "data dir /data is full: database or disk is full (and 1,328 more like it in the 11 s before, not logged)"
        )

    def test_different_errors_and_info_lines_are_each_logged(self, lines):
        log = logging.getLogger("chd.test.repeats")
        for n in range(3):
            log.error("storage error on write in %s", f"/data{n}")
            log.info("a trace line")
            log.info("a trace line")
        assert len(lines) == 3 + 6


def test_the_daemons_logging_rate_limits_repeated_errors() -> None:
    """configure_logging (what chd serve runs) puts the filter on its handler."""
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("info", "json", stream)
        for _ in range(500):
            logging.getLogger("chd.backends.disk").error(
                "data dir %s is full: %s", "/d", "disk full"
            )
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
    written = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["message"] for line in written] == ["data dir /d is full: disk full"]


class TestNeverDropped:
    """What the filter must not take for a repeat (outside review of issue 28)."""

    def test_health_transitions_are_all_logged_however_fast_storage_flaps(
        self, monkeypatch
    ) -> None:
        """Storage down, up, down, up within one window: four lines, the last saying SERVING, in order."""
        import threading
        from types import SimpleNamespace

        from chd.service import server as server_module

        out: list[str] = []

        class Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                out.append(record.getMessage())

        handler = Collect()
        handler.addFilter(
            RepeatFilter(clock=lambda: 1000.0)
        )  # the clock never moves: all in one window
        logger = logging.getLogger("chd.service.server")
        logger.addHandler(handler)
        answers = iter([False, True, False, True, False])
        closing = threading.Event()

        def available() -> bool:
            answer = next(answers, None)
            if answer is None:
                closing.set()
                return False
            return answer

        class Health:
            def set(self, service: str, status: int) -> None:
                pass

        running = SimpleNamespace(_closing=closing, _stopped=threading.Event(), health=Health())
        monkeypatch.setattr(server_module, "_FOLLOW_INTERVAL", 0.0)
        try:
            server_module._follow_backend(running, available)  # type: ignore[arg-type]
        finally:
            logger.removeHandler(handler)
        assert out == [
            "storage does not answer; health is now NOT_SERVING",
            "storage is back; health is now SERVING",
            "storage does not answer; health is now NOT_SERVING",
            "storage is back; health is now SERVING",
            "storage does not answer; health is now NOT_SERVING",
        ]

    def test_one_message_with_different_exceptions_is_logged_for_each(self, lines) -> None:
        """log.exception with the same text but another exception type, or raised elsewhere, is not a repeat."""
        log = logging.getLogger("chd.test.repeats")

        def fail(kind: type[Exception]) -> None:
            raise kind("boom")

        def fail_elsewhere() -> None:
            raise ValueError("boom")

        for _ in range(3):
            for raiser in (lambda: fail(ValueError), lambda: fail(KeyError), fail_elsewhere):
                try:
                    raiser()
                except Exception:
                    log.exception("the handler failed")
        assert lines == ["the handler failed"] * 3

    def test_the_same_exception_at_the_same_place_is_still_counted(self, lines) -> None:
        """The same failure again within the window is a repeat."""
        log = logging.getLogger("chd.test.repeats")
        for _ in range(5):
            try:
                {}["missing"]
            except KeyError:
                log.exception("the handler failed")
        assert lines == ["the handler failed"]
