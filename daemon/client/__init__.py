"""``chd.client``: a typed Python client for a running chd daemon, sync and asyncio.

    from chd.client import Client

    with Client("127.0.0.1:50051") as chd:
        chd.store("Book the 9:15 train", conversation="trip")
        for u in chd.last(5, conversation="trip"):
            print(u.seq, u.turn, u.speaker, u.text)

See docs/client.md. Imports grpc and the generated stubs, nothing of the
daemon's service or core.
"""

from __future__ import annotations

from chd.client.aio import AsyncClient
from chd.client.calls import DEFAULT_CONVERSATION
from chd.client.channel import TLS
from chd.client.errors import (
    ChdError,
    DeadlineExceeded,
    NotFound,
    NotUnderstood,
    TooLarge,
    Unauthenticated,
    Unavailable,
)
from chd.client.results import (
    Answer,
    Context,
    Removed,
    SearchHit,
    Stored,
    StoredMany,
    Summary,
    Utterance,
)
from chd.client.sync import DEFAULT_TARGET, DEFAULT_TIMEOUT, Client

__all__ = [
    "Client",
    "AsyncClient",
    "TLS",
    "DEFAULT_TARGET",
    "DEFAULT_TIMEOUT",
    "DEFAULT_CONVERSATION",
    "Answer",
    "Utterance",
    "SearchHit",
    "Stored",
    "StoredMany",
    "Removed",
    "Summary",
    "Context",
    "ChdError",
    "NotUnderstood",
    "NotFound",
    "TooLarge",
    "DeadlineExceeded",
    "Unauthenticated",
    "Unavailable",
]
