"""Bearer-token authentication for every RPC except health checks.

Health stays open so load balancers and orchestrators can probe without the
secret; everything else (the Daemon service and reflection, which would
otherwise describe the API to anyone) needs ``authorization: Bearer <token>``
metadata. The comparison is constant-time so the answer's timing tells an
attacker nothing about how much of a guess was right.
"""

from __future__ import annotations

import hmac

import grpc

from chd.service.admission import note_refusal
from chd.service.handlers import HEALTH_PREFIX, is_daemon_method, refusing

__all__ = ["BearerAuthInterceptor", "bearer_metadata"]

_HEADER = "authorization"
_SCHEME = "bearer "


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata a client sends to authenticate with ``token``."""
    return ((_HEADER, f"Bearer {token}"),)


class BearerAuthInterceptor(grpc.ServerInterceptor):
    """Refuses calls without the configured token with UNAUTHENTICATED."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("an empty auth token would accept anyone")
        self._token = token.encode("utf-8")

    def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(HEALTH_PREFIX):
            return handler
        problem = self._problem(handler_call_details.invocation_metadata or ())
        if problem is None:
            return handler
        if is_daemon_method(handler_call_details.method):
            # Refused inside the Daemon handler's guards, so the trace and
            # the metrics see the refusal like any other outcome.
            note_refusal(grpc.StatusCode.UNAUTHENTICATED, problem)
            return handler
        return refusing(handler, grpc.StatusCode.UNAUTHENTICATED, problem)

    def _problem(self, metadata: tuple[tuple[str, str | bytes], ...]) -> str | None:
        """Why the call is refused, or None when its token is right."""
        values = [value for key, value in metadata if key.lower() == _HEADER]
        if not values:
            return "this daemon requires authorization: Bearer <token> metadata"
        value = values[0]
        raw = value.encode("utf-8") if isinstance(value, str) else value
        if not raw[: len(_SCHEME)].lower() == _SCHEME.encode():
            return "the authorization metadata must use the Bearer scheme"
        # compare_digest may reveal the token's length through timing, never its content.
        if not hmac.compare_digest(raw[len(_SCHEME) :].strip(), self._token):
            return "the bearer token is not valid"
        return None
