"""Who answers the MCP tools: the core in this process, or a running chd over gRPC.

Both take the Daemon Interface's ``query(text, metadata, data)`` and nothing
else, so every tool is a query and the rules of the language (what a remove
must say, which fields go together) are the core's own code, whichever way
the query travels. Both are blocking; the MCP server calls them on worker
threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

from chd.client import Answer, ChdError, Client
from chd.core.errors import DaemonError
from chd.core.history import ConversationHistory
from chd.service.server import status_for

__all__ = ["Answerer", "Refused", "LocalAnswerer", "RemoteAnswerer"]

log = logging.getLogger(__name__)


class Refused(Exception):
    """chd answered with an error: ``status`` (a gRPC status name) and its message for the caller."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Answerer(Protocol):
    """The Daemon Interface as the MCP tools use it."""

    def query(self, text: str, metadata: Mapping[str, Any], data: Mapping[str, Any]) -> Answer:
        """The answer, whole numbers as ints; raises Refused with chd's message."""

    def instructions(self) -> str:
        """GetInstructions: every query form."""

    def close(self) -> None:
        """Release storage or the channel."""


class LocalAnswerer:
    """The core in this process, over storage this process opened (``chd mcp`` alone)."""

    def __init__(self, history: ConversationHistory, request_timeout: float | None = None) -> None:
        self.history = history
        self.request_timeout = request_timeout

    def query(self, text: str, metadata: Mapping[str, Any], data: Mapping[str, Any]) -> Answer:
        # The same bound a gRPC call without a deadline of its own gets.
        deadline = None if self.request_timeout is None else time.monotonic() + self.request_timeout
        try:
            outcome = self.history.query(text, metadata, data, deadline=deadline)
        except DaemonError as error:
            raise Refused(status_for(error).name, str(error)) from None
        return Answer(outcome.operation, _ints(outcome.result), _ints(outcome.metadata))

    def instructions(self) -> str:
        return self.history.get_instructions()

    def close(self) -> None:
        self.history.close()


class RemoteAnswerer:
    """A running chd daemon over gRPC (``chd mcp --target HOST:PORT``)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def query(self, text: str, metadata: Mapping[str, Any], data: Mapping[str, Any]) -> Answer:
        try:
            return self.client.query(text, metadata=metadata, data=data)
        except ChdError as error:
            raise Refused(error.status.name, error.message) from None

    def instructions(self) -> str:
        try:
            return self.client.instructions()
        except ChdError as error:
            raise Refused(error.status.name, error.message) from None

    def close(self) -> None:
        self.client.close()


def _ints(value: Any) -> Any:
    """Whole floats as ints, as a Struct reader would give them: local and remote answers look alike."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_ints(v) for v in value]
    return value
