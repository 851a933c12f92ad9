"""Each typed method as one ``Call``: the request to send, whether a retry is safe, how to read the answer.

Shared by ``Client`` and ``AsyncClient``, so the two differ only in how
they wait. Every typed method goes through ``data.operation``: the daemon
skips the language parser and checks the fields exactly as it checks a
query's (a misspelt field is refused, never ignored).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from chd.client import results
from chd.client.results import Answer

__all__ = ["Call", "DEFAULT_CONVERSATION", "READ_OPERATIONS", "IDEMPOTENCY_KEY", "new_key"]

T = TypeVar("T")

DEFAULT_CONVERSATION = "default"
# Operations that change nothing a second send could change twice: a retry
# after a lost reply is safe. (Reads of the summary fold the queue first;
# folding twice is folding once.) A store is retried too, with the
# idempotency key it was first sent with: the daemon answers a key it holds
# with the utterance it stored (issue 29). remove, configure and mark are
# not retried.
READ_OPERATIONS = frozenset({"retrieve", "summarize", "stats"})


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    text: str
    metadata: dict[str, Any]
    data: dict[str, Any]
    retry: bool
    read: Callable[[Answer], T]


def _given(**fields: Any) -> dict[str, Any]:
    """The fields a caller set: None means "not given", as the protocol has no nulls."""
    return {
        name: value for name, value in fields.items() if value is not None and value is not False
    }


def _op(
    operation: str,
    conversation: str,
    read: Callable[[Answer], T],
    metadata: Mapping[str, Any] | None = None,
    **fields: Any,
) -> Call[T]:
    return Call(
        "",
        {"conversation_id": conversation, **(metadata or {})},
        {"operation": operation, **_given(**fields)},
        operation in READ_OPERATIONS,
        read,
    )


def query(
    text: str, conversation: str, metadata: Mapping[str, Any] | None, data: Mapping[str, Any]
) -> Call[Answer]:
    merged = {"conversation_id": conversation, **(metadata or {})}
    operation = data.get("operation")
    if operation == "store":
        # A store named by data.operation (the MCP server's remember) gets a
        # key of its own unless the caller chose one, and is then retried.
        merged.setdefault(IDEMPOTENCY_KEY, new_key())
    # Free text may say anything, a remove too: retried only when data names a read or a store.
    return Call(
        text,
        merged,
        dict(data),
        operation in READ_OPERATIONS or operation == "store",
        lambda answer: answer,
    )


def seconds(timeout: float) -> float:
    """``timeout`` if it is a positive number of seconds; 0 or less would send every call with a 1 ms deadline."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def merged_data(data: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` and the keyword fields as one mapping; a field given in both with different values is
    refused, as the protocol refuses a field given twice (which one was meant is a guess)."""
    merged = dict(data or {})
    for name, value in fields.items():
        if name in merged and merged[name] != value:
            raise ValueError(
                f"data field {name!r} is given twice with different values: "
                f"{merged[name]!r} in data and {value!r} as a keyword"
            )
        merged[name] = value
    return merged


def store(text: str, speaker: str, turn: int | None, conversation: str) -> Call[results.Stored]:
    metadata: dict[str, Any] = {"speaker": speaker, IDEMPOTENCY_KEY: new_key()}
    if turn is not None:
        metadata["turn_number"] = turn
    call = _op("store", conversation, results.stored_of, metadata, text=text)
    return Call(call.text, call.metadata, call.data, True, call.read)


def store_many(
    utterances: Sequence[Mapping[str, Any]], conversation: str
) -> Call[results.StoredMany]:
    # One key for the batch, kept across its retries: a batch whose reply
    # was lost is stored once (docs/protocol.md, "Idempotent stores").
    items = [_item(i, u) for i, u in enumerate(utterances)]
    call = _op(
        "store",
        conversation,
        results.stored_many_of,
        {IDEMPOTENCY_KEY: new_key()},
        utterances=items,
    )
    return Call(call.text, call.metadata, call.data, True, call.read)


def _item(i: int, utterance: Any) -> dict[str, Any]:
    """One item of ``store_many`` as the wire takes it, or a TypeError/ValueError naming it.

    ``turn`` is taken for ``turn_number`` (``Client.store``'s name for it),
    and a timezone-aware ``datetime`` for its RFC 3339 text: the Struct
    would otherwise refuse them with protobuf's own words, naming no item.
    """
    where = f"utterances[{i}]"
    if not isinstance(utterance, Mapping):
        raise TypeError(
            f"{where} must be a mapping such as {{'text': ..., 'speaker': 'user'}}, "
            f"got {type(utterance).__name__} {utterance!r:.60}"
        )
    item = dict(utterance)
    if "turn" in item:
        if "turn_number" in item:
            raise ValueError(f"{where} has both turn and turn_number; give one")
        item["turn_number"] = item.pop("turn")
    stamp = item.get("timestamp")
    if isinstance(stamp, datetime):
        if stamp.tzinfo is None or stamp.utcoffset() is None:
            raise ValueError(
                f"{where}.timestamp is a datetime without a timezone; give it one "
                "(datetime.now(timezone.utc), say) or an RFC 3339 string"
            )
        item["timestamp"] = stamp.isoformat()
    return item


# The metadata key of docs/protocol.md: a store sent again with it is applied once.
IDEMPOTENCY_KEY = "idempotency_key"


def new_key() -> str:
    """A fresh idempotency key: a random UUID, made once per store and kept across its retries."""
    return uuid.uuid4().hex


def last(n: int, speaker: str | None, conversation: str) -> Call[list[results.Utterance]]:
    return _op("retrieve", conversation, results.utterances_of, last_n=n, speaker=speaker)


def search(
    topic: str, limit: int | None, speaker: str | None, conversation: str
) -> Call[list[results.SearchHit]]:
    return _op("retrieve", conversation, results.hits_of, topic=topic, limit=limit, speaker=speaker)


def turns(first: int, last: int | None, conversation: str) -> Call[list[results.Utterance]]:
    return _op(
        "retrieve",
        conversation,
        results.utterances_of,
        turn_from=first,
        turn_to=first if last is None else last,
    )


def summary(conversation: str) -> Call[results.Summary]:
    return _op("retrieve", conversation, results.summary_of, summary_only=True)


def summarize(token_limit: int | None, conversation: str) -> Call[results.Summary]:
    return _op("summarize", conversation, results.summary_of, token_limit=token_limit)


def context(token_limit: int | None, conversation: str) -> Call[results.Context]:
    return _op("retrieve", conversation, results.context_of, context=True, token_limit=token_limit)


def remove(conversation: str, **selectors: Any) -> Call[results.Removed]:
    return _op("remove", conversation, results.removed_of, **selectors)


def configure(conversation: str, **settings: Any) -> Call[dict[str, Any]]:
    return _op("configure", conversation, results.result_of, **settings)


def mark(seq: int, important: bool, conversation: str) -> Call[dict[str, Any]]:
    call = _op("mark", conversation, results.result_of, seq=seq)
    call.data["important"] = important  # False is a value here, not "not given"
    return call


def stats(conversation: str) -> Call[dict[str, Any]]:
    return _op("stats", conversation, results.result_of)
