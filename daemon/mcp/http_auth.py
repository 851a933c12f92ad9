"""The bearer token of ``auth_token`` on MCP's Streamable HTTP, as chd.service.auth checks it on gRPC.

A plain ASGI wrapper rather than the SDK's OAuth resource-server support:
chd has one shared secret, not an authorization server, and the SDK's
``AuthSettings`` needs an issuer URL. Wrapping the whole app refuses a
request before the MCP session manager sees it; lifespan events pass
through untouched so the session manager still starts and stops.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["BearerTokenApp"]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_SCHEME = b"bearer "


class BearerTokenApp:
    """Answers 401 to any HTTP request without ``Authorization: Bearer <token>``; passes the rest to ``app``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise ValueError("an empty auth token would accept anyone")
        self.app = app
        self._token = token.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = self.problem(scope.get("headers", ()))
            if problem is not None:
                await _refuse(send, problem)
                return
        await self.app(scope, receive, send)

    def problem(self, headers: Any) -> str | None:
        """Why the request is refused, or None when its token is right."""
        values = [value for key, value in headers if key.lower() == b"authorization"]
        if not values:
            return "this chd requires an Authorization: Bearer <token> header"
        raw = values[0]
        if raw[: len(_SCHEME)].lower() != _SCHEME:
            return "the Authorization header must use the Bearer scheme"
        # compare_digest may reveal the token's length through timing, never its content.
        if not hmac.compare_digest(raw[len(_SCHEME) :].strip(), self._token):
            return "the bearer token is not valid"
        return None


async def _refuse(send: Send, problem: str) -> None:
    body = json.dumps({"error": "unauthorized", "error_description": problem}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode("ascii")),
                (b"www-authenticate", b'Bearer realm="chd"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
