"""A stand-in for the Anthropic Messages API on 127.0.0.1, for tests and benchmarks.

It answers ``POST /v1/messages`` with the JSON the real API sends (a
``message`` object whose content is a text block or a ``tool_use`` call,
or an ``error`` object with the real status code and error type), so the
real ``anthropic`` SDK runs unchanged against it: its parsing, its retries
and its timeouts are what the tests exercise.

    with FakeAnthropic() as api:
        api.script(Status(529), Reply("The user booked a train."))
        api.script(ToolUse("stats", {"confidence": 0.9}))
        ... ANTHROPIC_BASE_URL=api.base_url ...
        api.requests[0].prompt   # the user message the daemon sent
"""

from __future__ import annotations

import itertools
import json
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "FakeAnthropic",
    "Reply",
    "ToolUse",
    "Status",
    "Stall",
    "Held",
    "Recorded",
    "refused_url",
]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class Reply:
    """A 200 with a text block; ``stop_reason`` "max_tokens" for a cut-off reply."""

    text: str
    stop_reason: str = "end_turn"


@dataclass(frozen=True)
class ToolUse:
    """A 200 whose content calls one tool, with ``stop_reason`` "tool_use".

    With ``tool_choice`` "any" or "tool" the real API sends the tool_use block
    alone; with "auto" the model may write a text block before it, which
    ``preamble`` adds.
    """

    name: str
    input: dict[str, Any]
    preamble: str | None = None


@dataclass(frozen=True)
class Status:
    """An error response with the API's error body."""

    code: int
    message: str = "fake failure"
    retry_after_ms: int | None = None


@dataclass(frozen=True)
class Stall:
    """Hold the request for ``seconds`` before answering (to trip client timeouts)."""

    seconds: float
    then: Reply | ToolUse | Status | None = None


@dataclass(frozen=True)
class Held:
    """Hold the request until ``gate`` is set (or the fake stops), then answer ``then``.

    A slow model whose reply the test lets go when it chooses: a caller's
    patience runs out for certain, without racing a clock.
    """

    gate: threading.Event
    then: Reply | ToolUse | Status | None = None


Behaviour = Reply | ToolUse | Status | Stall | Held


@dataclass
class Recorded:
    """One request the fake received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        """The text of the last user message."""
        content = self.body["messages"][-1]["content"]
        if isinstance(content, str):
            return content
        return "".join(block.get("text", "") for block in content)


class _QuietServer(ThreadingHTTPServer):
    """A client that hung up (its timeout, a daemon shutting down) is not an error of the fake."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class FakeAnthropic:
    """A threaded HTTP server speaking the Messages API wire format.

    Args:
        reply: the default answer for a request when nothing is scripted: the
            reply's text, or any answer (e.g. a Status to fail unscripted calls).
        delay: seconds every request waits before its answer (a slow model).
    """

    def __init__(
        self,
        reply: Callable[[dict[str, Any]], str | Reply | ToolUse | Status] | None = None,
        delay: float = 0.0,
    ) -> None:
        self.reply = reply or (lambda body: "The user and the assistant talked.")
        self.delay = delay
        self.requests: list[Recorded] = []
        self._script: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._ids = itertools.count(1)
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        # A short poll interval so stop() returns at once instead of in 0.5 s.
        self._thread = threading.Thread(
            target=lambda: self._server.serve_forever(poll_interval=0.02), daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def script(self, *behaviours: Behaviour) -> None:
        """Answer the next requests with these, in order, then with ``reply`` again."""
        with self._lock:
            self._script.extend(behaviours)

    def start(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # --- serving ------------------------------------------------------------------

    def _next(self) -> Behaviour | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 10  # idle keep-alive connections end instead of holding a thread

            def log_message(self, *_args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else {}
                recorded = Recorded(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                with fake._lock:
                    fake.requests.append(recorded)
                if self.path.split("?")[0] != "/v1/messages":
                    self._send(404, _error(404, "not_found_error", f"no route {self.path}"))
                    return
                behaviour = fake._next()
                if fake.delay and fake._closing.wait(fake.delay):
                    return
                while isinstance(behaviour, (Stall, Held)):
                    if isinstance(behaviour, Held):
                        while not behaviour.gate.wait(0.02):
                            if fake._closing.is_set():
                                return
                    elif fake._closing.wait(behaviour.seconds):
                        return
                    behaviour = behaviour.then
                if behaviour is None:
                    behaviour = fake.reply(body)
                if isinstance(behaviour, str):
                    behaviour = Reply(behaviour)
                if isinstance(behaviour, Status):
                    headers = {}
                    if behaviour.retry_after_ms is not None:
                        headers["retry-after-ms"] = str(behaviour.retry_after_ms)
                    kind = _ERROR_TYPES.get(behaviour.code, "api_error")
                    self._send(
                        behaviour.code, _error(behaviour.code, kind, behaviour.message), headers
                    )
                    return
                self._send(200, _message(next(fake._ids), body, behaviour))

            def _send(
                self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.send_header("request-id", f"req_fake{id(payload):x}")
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing to answer

        return Handler


def _message(number: int, request: dict[str, Any], answer: Reply | ToolUse) -> dict[str, Any]:
    prompt_words = len(json.dumps(request.get("messages", [])).split())
    if isinstance(answer, Reply):
        content = [{"type": "text", "text": answer.text}]
        stop_reason, output_words = answer.stop_reason, len(answer.text.split())
    else:
        content = [{"type": "text", "text": answer.preamble}] if answer.preamble else []
        call = {
            "type": "tool_use",
            "id": f"toolu_fake{number:020d}",
            "name": answer.name,
            "input": answer.input,
        }
        content.append(call)
        stop_reason, output_words = "tool_use", len(json.dumps(content).split())
    return {
        "id": f"msg_fake{number:020d}",
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "claude-haiku-4-5"),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt_words, "output_tokens": output_words},
    }


def _error(code: int, kind: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": f"req_fake{code}",
    }


_REFUSING: list[socket.socket] = []


def refused_url() -> str:
    """A base URL on 127.0.0.1 where connections are refused.

    The port stays bound (never listening) for the rest of the process, so
    no other test or process can start listening on it meanwhile.
    """
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    _REFUSING.append(probe)
    return f"http://127.0.0.1:{probe.getsockname()[1]}"
