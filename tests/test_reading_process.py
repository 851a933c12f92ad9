"""Long queries are read in a child process (issue 28, item 10): the same answers, and a child that fails costs nothing."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import grpc
import pytest

from chd.core.errors import InvalidRequest
from chd.core.language import parser
from chd.core.language.parser import NotUnderstood, read_queries_with, reading_of
from chd.core.language.reading_process import MIN_CHARS, ReadingProcess, reading_deadline
from tests.conftest import DaemonProcess
from tests.ops_support import ask
from tests.parser_shapes import SHAPES, build

CHILD_MODULE = "chd.core.language.reading_process"


def _same(here: object, there: object) -> bool:
    """The same reading, or a refusal of the same kind saying the same, for the same operation."""
    if isinstance(here, InvalidRequest):
        return (
            type(there) is type(here)
            and str(there) == str(here)
            and getattr(there, "operation", None) == here.operation
            and getattr(there, "did_you_mean", None) == getattr(here, "did_you_mean", None)
            and getattr(there, "confidence", None) == getattr(here, "confidence", None)
        )
    return there == here


@pytest.fixture
def reader() -> ReadingProcess:
    # A long timeout: on a machine at a load average of 20 a nice-5 child may take
    # seconds for a 2,000-character query, and a late answer would be read here.
    process = ReadingProcess(reading_of, timeout=60)
    assert process.start(60), "the reader process did not start"
    yield process
    process.close()


def test_every_parser_shape_reads_the_same_in_the_child(reader: ReadingProcess) -> None:
    """Readings and refusals (with their suggestions) come back from the child as the daemon reads them."""
    queries = [build(name, size) for name in SHAPES for size in (MIN_CHARS, 2000)]
    queries.append("Get the last 5 utterances " + "please " * 40)  # a reading, not a refusal
    for query in queries:
        assert _same(reading_of(query), reader(query)), query[:80]
    assert reader.read_in_child == sum(len(q) >= MIN_CHARS for q in queries) > len(SHAPES)
    assert any(not isinstance(reading_of(q), InvalidRequest) for q in queries)


def test_short_queries_never_go_to_the_child(reader: ReadingProcess) -> None:
    reader("Get the last 5 utterances")
    assert reader.read_in_child == 0


def test_a_killed_child_is_replaced_and_its_query_read_in_the_daemon(
    reader: ReadingProcess,
) -> None:
    query = build("hashes", 2000)
    assert reader._child is not None
    reader._child.kill()
    reader._child.wait(5)
    # The query the dead child had is read here, with the same answer.
    assert _same(reading_of(query), reader(query))
    assert reader.read_in_child == 0
    assert reader.start(30)
    assert _same(reading_of(query), reader(query))
    assert reader.read_in_child == 1


def test_a_child_that_never_answers_is_given_up_after_its_timeout() -> None:
    silent = (sys.executable, "-c", "import sys, time; time.sleep(60)")
    process = ReadingProcess(reading_of, timeout=0.5, command=silent)
    try:
        assert not process.start(5)  # it never says it is ready
        query = build("turn_ranges", 2000)
        assert _same(reading_of(query), process(query))
        assert process.read_in_child == 0
    finally:
        process.close()


def _fake_child(tmp_path: Path, files: dict[str, int], then: str) -> tuple[str, ...]:
    """A child that says it is ready with ``files`` as its code, runs ``then``, and sleeps."""
    script = tmp_path / "fake_child.py"
    script.write_text(
        "import os, pickle, struct, sys, time\n"
        f"body = pickle.dumps(('ready', {files!r}))\n"
        "os.write(1, struct.pack('>I', len(body)) + body)\n"
        f"{then}time.sleep(60)\n"
    )
    return (sys.executable, str(script))


def test_a_child_that_answers_garbage_is_stopped(tmp_path: Path) -> None:
    """Ready, then bytes that are no frame: the query is read here and the child is ended."""
    liar = _fake_child(
        tmp_path, {}, "sys.stdin.buffer.read(1)\nos.write(1, struct.pack('>I', 5) + b'xxxxx')\n"
    )
    process = ReadingProcess(reading_of, timeout=5, command=liar)
    try:
        assert process.start(30)
        child = process._child
        query = build("hashes", 2000)
        assert _same(reading_of(query), process(query))
        assert process.read_in_child == 0
        assert child is not None and child.poll() is not None  # ended, not left running
    finally:
        process.close()


def test_a_child_of_other_code_is_never_used(tmp_path: Path) -> None:
    """A child whose chd.core files are not the daemon's (installed since it started) is ended for good."""
    upgraded = _fake_child(tmp_path, {"chd.core.language.parser": 1}, "")
    process = ReadingProcess(reading_of, command=upgraded)
    try:
        assert not process.start(30)
        query = build("hashes", 2000)
        assert _same(reading_of(query), process(query))
        assert not process.start(1)  # not tried again
        assert process.read_in_child == 0
    finally:
        process.close()


def test_a_call_waits_on_the_child_only_half_its_time_left(reader: ReadingProcess) -> None:
    """A stopped child: the call is read in the daemon, the child is kept, and its late answer is dropped."""
    child = reader._child
    assert child is not None
    first, second = build("hashes", 2000), build("turn_ranges", 2000)
    os.kill(child.pid, signal.SIGSTOP)
    try:
        with reading_deadline(time.monotonic() + 0.4):
            assert _same(reading_of(first), reader(first))
        assert child.poll() is None and reader._child is child  # kept: only this call ran out
    finally:
        os.kill(child.pid, signal.SIGCONT)
    # The late answer to ``first`` is not taken for ``second``'s.
    assert _same(reading_of(second), reader(second))
    assert reader.read_in_child == 1


def test_a_long_query_with_a_store_verb_is_read_in_the_child_too(reader: ReadingProcess) -> None:
    """The other-operation reading of an unclear store went around the child (review of issue 28)."""
    query = ("Save " + build("call_unclosed_strings", 1000))[:1000]
    read_queries_with(reader)
    try:
        with pytest.raises(InvalidRequest) as here:
            parser.parse(query + " ")  # not cached: a store's refusal never is
    finally:
        read_queries_with(reading_of)
    assert reader.read_in_child >= 1
    read_queries_with(reading_of)
    with pytest.raises(InvalidRequest) as there:
        parser.parse(query + "  ")
    assert str(here.value) == str(there.value)


def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (the reader is started from a thread of its own)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:  # the thread ended
            pass
    return found


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _gone(pid: int, within: float) -> bool:
    until = time.monotonic() + within
    while time.monotonic() < until:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if _zombie(pid):  # ended; whoever adopted it has not reaped it yet
            return True
        time.sleep(0.05)
    return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_daemon_reads_long_queries_in_a_child_that_ends_with_it() -> None:
    """Through gRPC: a 2,000-character query is refused as in-process; SIGKILL of the daemon ends the child."""
    daemon = DaemonProcess()
    try:
        query = build("turn_ranges", 2000)
        with grpc.insecure_channel(daemon.target) as channel:
            with pytest.raises(grpc.RpcError):  # starts the child; read in the daemon
                ask(channel, query[:-1] + "x", metadata={"conversation_id": "long"})
            until = time.monotonic() + 60
            while time.monotonic() < until:
                child = [c for c in _children(daemon.proc.pid) if CHILD_MODULE in _command_line(c)]
                if child:
                    break
                time.sleep(0.1)
            assert len(child) == 1, "no reader process beside the daemon"
            with pytest.raises(grpc.RpcError) as refused:
                ask(channel, query, metadata={"conversation_id": "long"})
        expected = reading_of(query)
        assert isinstance(expected, NotUnderstood)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details().startswith(str(expected)[:60])
        os.kill(child[0], signal.SIGSTOP)  # a stopped child reads no EOF: the kernel ends it
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait(10)
        assert _gone(child[0], 10), "the reader process outlived the daemon"
    finally:
        daemon.kill()
