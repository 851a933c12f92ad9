"""Driving ``chd mcp`` with the MCP SDK's own client: over stdio (a real subprocess) and over HTTP."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult

from tests.conftest import ROOT, chd_command, chd_env

T = TypeVar("T")


def run(coroutine: Awaitable[T]) -> T:
    """One asyncio loop per test: the SDK's client and its subprocess live and die inside it."""
    return asyncio.run(coroutine)  # type: ignore[arg-type]


def stdio_params(*args: str) -> StdioServerParameters:
    """``chd mcp ARGS`` as an MCP host would start it, in the test's scrubbed environment."""
    command = chd_command()
    return StdioServerParameters(
        command=command[0], args=[*command[1:], "mcp", *args], env=chd_env(), cwd=str(ROOT)
    )


async def with_stdio(
    args: tuple[str, ...], errlog: Path, body: Callable[[Client], Awaitable[T]]
) -> T:
    """``body(client)`` on a session with a fresh ``chd mcp ARGS`` subprocess; its stderr goes to ``errlog``."""
    with errlog.open("a") as log:
        async with Client(stdio_client(stdio_params(*args), errlog=log)) as client:
            return await body(client)


def answer(result: CallToolResult) -> dict[str, Any]:
    """A successful tool result's structured answer, checked against its JSON text."""
    assert not result.is_error, result.content
    structured = result.structured_content
    assert structured is not None
    assert json.loads(result.content[0].text) == structured  # type: ignore[union-attr]
    return structured


def refusal(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text  # type: ignore[union-attr]


class HttpMcp:
    """A ``chd mcp --http 127.0.0.1:0`` subprocess; ``url`` is its endpoint. Stopped with SIGTERM."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [*chd_command(), "mcp", "--http", "127.0.0.1:0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=chd_env(),
            cwd=ROOT,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        line = self.proc.stdout.readline()
        match = re.search(r"listening on (https?://\S+)", line)
        if not match:
            self.proc.kill()
            raise RuntimeError(f"chd mcp did not start: {line!r} {self.proc.stderr.read()}")
        self.url = match.group(1)
        self.stderr_lines: list[str] = []
        self._drain = threading.Thread(
            target=self.stderr_lines.extend, args=(self.proc.stderr,), daemon=True
        )
        self._drain.start()

    def stop(self, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)
        finally:
            self._drain.join(timeout=5)
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream:
                    stream.close()

    @property
    def log(self) -> str:
        return "".join(self.stderr_lines)
