"""``chd serve --processes N`` (issue 31): N serving processes on one port over a shared backend."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from chd.client import Client
from chd.service.group import CRASH_LIMIT, _Child, _stop_all, _supervise
from chd.v1 import daemon_pb2_grpc
from tests.conftest import DaemonProcess, chd_env, query, run_chd


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid``, from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait(condition, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    until = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < until, what
        time.sleep(0.05)


def test_the_memory_backend_is_refused_in_one_line() -> None:
    done = run_chd("serve", "--port", "0", "--processes", "2")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "'processes'" in done.stderr and "memory" in done.stderr


@pytest.mark.parametrize("reuse_port", [False, True], ids=["plain", "so_reuseport"])
def test_a_port_held_by_another_process_is_refused(tmp_path: Path, reuse_port: bool) -> None:
    """A foreign listener, with SO_REUSEPORT or without, makes the group refuse to start."""
    with socket.socket() as foreign:
        if reuse_port:
            foreign.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        foreign.bind(("127.0.0.1", 0))
        foreign.listen(1)
        port = foreign.getsockname()[1]
        done = run_chd(
            "serve",
            "--port",
            str(port),
            "--processes",
            "2",
            "--backend",
            "disk",
            "--data-dir",
            str(tmp_path / "data"),
        )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "in use" in done.stderr


def test_two_processes_serve_every_store_and_stop_together(tmp_path: Path) -> None:
    """Several clients store through a group of 2 on disk: every acknowledged store reads back
    with its exact text and a unique seq, also after a child is SIGKILLed (and restarted);
    SIGTERM stops the parent and every child."""
    group = DaemonProcess(
        "--processes",
        "2",
        "--backend",
        "disk",
        "--data-dir",
        str(tmp_path / "data"),
        "--buffer-size",
        "100",  # every store stays in the buffer, where last() reads it
        "--metrics-port",
        "0",
    )
    try:
        assert group.proc.stdout is not None
        metrics = re.search(r"(http://\S+/metrics)", group.proc.stdout.readline())
        assert metrics, "no metrics line"
        children = _children(group.proc.pid)
        assert len(children) == 2
        acknowledged: dict[str, dict[int, str]] = {f"c{i}": {} for i in range(3)}
        # The kernel spreads connections, not calls, over the processes: each
        # client has a connection of its own (grpc shares one between the
        # channels of a process by default).
        lock = threading.Lock()
        failures: list[BaseException] = []

        def client(number: int) -> None:
            try:
                with grpc.insecure_channel(
                    group.target, options=[("grpc.use_local_subchannel_pool", 1)]
                ) as channel:
                    stub = daemon_pb2_grpc.DaemonStub(channel)
                    for i in range(15):
                        cid = f"c{(number + i) % 3}"
                        text = f"client {number} store {i} \u2713 "
                        answer = query(
                            stub, "", {"conversation_id": cid}, {"operation": "store", "text": text}
                        )
                        seq = int(answer.result["utterance"]["seq"])
                        with lock:
                            assert seq not in acknowledged[cid]
                            acknowledged[cid][seq] = text
            except BaseException as exc:  # reported below, not lost in the thread
                failures.append(exc)

        threads = [threading.Thread(target=client, args=(n,)) for n in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        # Both processes served (all 12 connections on one: odds of 1 in 2,048).
        with urllib.request.urlopen(metrics.group(1), timeout=10) as page:
            text = page.read().decode()
        served = set(re.findall(r'chd_requests_total\{[^}]*process="(\d)"[^}]*\} [1-9]', text))
        assert served == {"0", "1"}, text[:2000]
        # The storage's gauges once for the group, not once per process (a
        # sum over process would count the 3 conversations twice).
        assert re.findall(r"^chd_conversations(\S*) (\S+)$", text, re.M) == [("", "3.0")], text
        assert len(re.findall(r"^chd_buffer_utterances", text, re.M)) == 1

        os.kill(children[0], signal.SIGKILL)
        _wait(
            lambda: (
                len([p for p in _children(group.proc.pid) if _alive(p)]) == 2
                and "restarted as pid" in group.log
            ),
            "the killed serving process was not restarted",
        )
        with Client(group.target, timeout=60) as chd:
            for cid, stored in acknowledged.items():
                held = {u.seq: u.text for u in chd.last(1000, conversation=cid)}
                assert held == stored  # nothing lost, nothing twice, texts exact
        assert sum(len(s) for s in acknowledged.values()) == 180
        everyone = _children(group.proc.pid)
    finally:
        code = group.terminate()
    assert code == 0
    _wait(lambda: not any(_alive(p) for p in everyone), "a serving process outlived SIGTERM")


def _fake_child(index: int, code: int) -> _Child:
    """A real process that says it listens, then exits with ``code`` on SIGTERM (0: a clean stop)."""
    script = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *_: sys.exit({code}))\n"
        "print('chd listening on 127.0.0.1:1', flush=True)\n"
        "time.sleep(120)\n"
    )
    return _Child(index, [sys.executable, "-c", script])


@pytest.mark.parametrize("code", [0, 3], ids=["clean", "crash"])
def test_clean_exits_are_restarted_without_counting_as_crashes(code: int) -> None:
    """More than CRASH_LIMIT SIGTERMs of a child within the window: clean exits (an operator's rolling
    restart) keep the group serving, crashes stop it (outside review of issue 31, finding 4); every
    restart starts a child again (spawned without preexec_fn, finding 8)."""
    child = _fake_child(0, code)
    done = threading.Event()
    result: list[int] = []
    child.spawn()
    supervisor = threading.Thread(target=lambda: result.append(_supervise([child], done)))
    supervisor.start()
    try:
        for _ in range(CRASH_LIMIT + 1):
            _wait(child.ready.is_set, "the child did not start")
            pid = child.pid
            os.kill(pid, signal.SIGTERM)
            _wait(lambda: child.pid != pid or result, "the child was not restarted")
            if result:
                break
        if code == 0:
            _wait(child.ready.is_set, "the child did not start")
            assert not result and supervisor.is_alive()
        else:
            _wait(lambda: bool(result), "crashes did not stop the group")
            assert result == [1]
    finally:
        done.set()
        supervisor.join()
        _stop_all([child], 10.0)


def test_a_serving_process_dies_with_its_parent(tmp_path: Path) -> None:
    """check_parent sets PR_SET_PDEATHSIG in the child itself (no preexec_fn): a parent killed with
    SIGKILL takes the child with it."""
    pid_file = tmp_path / "child"
    parent_script = (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import os, sys, time; from chd.service.group import check_parent; "
        'check_parent(os.getppid()); open(sys.argv[1], "w").write(str(os.getpid())); time.sleep(120)\', '
        f"{str(pid_file)!r}])\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_script])
    try:
        _wait(lambda: pid_file.exists() and pid_file.read_text() != "", "the child did not start")
        child = int(pid_file.read_text())
        assert _alive(child)
    finally:
        parent.kill()
        parent.wait()
    try:
        _wait(lambda: not _alive(child), "the child outlived its parent's SIGKILL")
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_chd_mcp_refuses_processes_in_one_line(tmp_path: Path) -> None:
    """chd mcp serves from one process: --processes is refused, not accepted and ignored (outside
    review of issue 31, finding 5), and its help does not offer it."""
    done = run_chd(
        "mcp", "--processes", "2", "--backend", "disk", "--data-dir", str(tmp_path / "data")
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "--processes is for chd serve" in done.stderr
    assert "--processes" not in run_chd("mcp", "--help").stdout


def test_chd_mcp_refuses_processes_from_the_environment_too(tmp_path: Path) -> None:
    """CHD_PROCESSES=2 started chd mcp on one process without a word (newcomer recheck N4)."""
    done = run_chd(
        "mcp",
        "--backend",
        "disk",
        "--data-dir",
        str(tmp_path / "data"),
        env={**chd_env(), "CHD_PROCESSES": "2"},
    )
    assert done.returncode == 2
    assert "--processes is for chd serve" in done.stderr
