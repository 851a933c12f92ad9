"""Backends under test: every shipped one plus a custom ``module:Class`` one.

Not a conftest.py: other tests import ``conftest`` by that name, and a second
one here would shadow tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from chd.backends import Backend, open_backend
from chd.backends.base import Change, ConversationState
from chd.core.utterance import Utterance
from tests.conftest import BACKEND_KINDS, open_test_backend

CUSTOM_BACKEND = "tests.backends.optimistic_backend:OptimisticBackend"
# redis-cluster: the redis backend on three masters of a loopback Redis Cluster.
CONTRACT_KINDS = (*BACKEND_KINDS, "redis-cluster", "custom")


def open_contract_backend(kind: str, directory: Path) -> Backend:
    if kind == "custom":
        return open_backend(CUSTOM_BACKEND)
    if kind == "redis-cluster":
        from tests.redis_support import shared_cluster_url

        return open_backend("redis", redis_url=shared_cluster_url(directory), redis_cluster=True)
    return open_test_backend(kind, directory)


def utterance(
    seq: int,
    text: str | None = None,
    conversation_id: str = "c",
    turn: int | None = None,
    speaker: str = "user",
    important: bool = False,
) -> Utterance:
    return Utterance(
        conversation_id=conversation_id,
        seq=seq,
        speaker=speaker,  # type: ignore[arg-type]
        text=f"utterance {seq}" if text is None else text,
        turn_number=seq if turn is None else turn,
        timestamp=f"2026-01-01T00:00:{seq % 60:02d}.000000Z",
        tokens=3,
        important=important,
    )


def append_next(text: str = "x") -> Callable[[ConversationState], tuple[Change, int]]:
    """A decide that appends one utterance with the next seq, like a store."""

    def decide(state: ConversationState) -> tuple[Change, int]:
        seq = state.next_seq
        new = utterance(seq, text, state.conversation_id, turn=state.last_turn + 1)
        return Change(append=[new], next_seq=seq + 1, last_turn=state.last_turn + 1), seq

    return decide
