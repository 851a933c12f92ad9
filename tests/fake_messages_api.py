"""A fake Anthropic Messages API on 127.0.0.1 for the query classifier's tests.

It answers ``POST /v1/messages`` with the real wire format — a ``message``
object whose ``content`` holds ``tool_use`` blocks, ``stop_reason:
"tool_use"``, ``usage`` — or with the API's error envelope and status code,
so the real ``anthropic`` SDK is exercised end to end (headers, retries,
parsing). Tests queue the replies and read back the requests it received.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeMessagesAPI", "Reply"]

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Reply:
    """One queued answer: a status and JSON body, after an optional delay."""

    status: int
    body: dict[str, Any]
    delay: float = 0.0


def tool_use_message(name: str, tool_input: dict[str, Any], model: str = "claude-haiku-4-5") -> dict[str, Any]:
    n = next(_ids)
    return {
        "id": f"msg_fake{n:06d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [
            {"type": "text", "text": "I'll route this request."},
            {"type": "tool_use", "id": f"toolu_fake{n:06d}", "name": name, "input": tool_input},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 412, "output_tokens": 37},
    }


def text_message(text: str) -> dict[str, Any]:
    n = next(_ids)
    return {
        "id": f"msg_fake{n:06d}",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 400, "output_tokens": 12},
    }


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


class FakeMessagesAPI:
    """The server; use as a context manager. ``base_url`` goes to the SDK."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                reply = api._take(self.path, body, dict(self.headers))
                if reply.delay:
                    time.sleep(reply.delay)
                data = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("request-id", f"req_fake{next(_ids):06d}")
                    # Let the SDK retry at once instead of backing off for seconds.
                    self.send_header("retry-after-ms", "10")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeMessagesAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # --- scripting -------------------------------------------------------------------

    def reply_tool(self, name: str, tool_input: dict[str, Any], delay: float = 0.0) -> None:
        self._queue(Reply(200, tool_use_message(name, tool_input), delay))

    def reply_text(self, text: str) -> None:
        self._queue(Reply(200, text_message(text)))

    def reply_error(self, status: int, kind: str, message: str) -> None:
        self._queue(Reply(status, error_body(kind, message)))

    def _queue(self, reply: Reply) -> None:
        with self._lock:
            self._replies.append(reply)

    def _take(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.headers.append({k.lower(): v for k, v in headers.items()})
            if path.rstrip("/") != "/v1/messages":
                return Reply(404, error_body("not_found_error", f"no route {path}"))
            if not self._replies:
                return Reply(500, error_body("api_error", "the test queued no reply"))
            return self._replies.popleft()
