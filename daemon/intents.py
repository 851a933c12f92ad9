"""Typed intents: what a query asks the core to do.

An intent is built from up to three sources: fields the parser read from the
query text, ``metadata`` and ``data``. When two sources give a field
different values the request is refused rather than one silently winning:
a caller who says "last 5" in the text and ``last_n: 3`` in data has a bug
worth hearing about.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping, Union

from daemon.errors import InvalidRequest
from daemon.fields import as_bool, as_int, as_speaker, as_str
from daemon.utterance import Speaker

__all__ = [
    "OPERATIONS",
    "StoreIntent",
    "RetrieveIntent",
    "RemoveIntent",
    "SummarizeIntent",
    "Intent",
    "build_intent",
    "data_fields",
]

MAX_INT = 2**31 - 1


@dataclass(frozen=True, slots=True)
class StoreIntent:
    """Append one utterance; ``turn_number`` None means: track turns automatically."""

    text: str
    speaker: Speaker = "user"
    turn_number: int | None = None


@dataclass(frozen=True, slots=True)
class RetrieveIntent:
    """Read utterances and/or the summary. Filters combine with AND.

    With ``topic`` the hits are ranked by relevance; otherwise they are in
    conversation order. ``last_n`` keeps the newest n after filtering.
    ``archived`` reads the archive of folded utterances instead of the buffer.
    ``context`` asks for the summary plus the newest utterances that fit
    ``token_limit`` tokens, as one text (daemon/context.py).
    """

    last_n: int | None = None
    topic: str | None = None
    speaker: Speaker | None = None
    turn_from: int | None = None
    turn_to: int | None = None
    seq: int | None = None
    include_summary: bool = False
    summary_only: bool = False
    archived: bool = False
    context: bool = False
    token_limit: int | None = None


@dataclass(frozen=True, slots=True)
class RemoveIntent:
    """Delete utterances; exactly one selector is set."""

    oldest: int | None = None
    before_turn: int | None = None
    seq: int | None = None
    all: bool = False


@dataclass(frozen=True, slots=True)
class SummarizeIntent:
    """Summarize the whole conversation (summary so far plus the buffer)."""

    token_limit: int | None = None


Intent = Union[StoreIntent, RetrieveIntent, RemoveIntent, SummarizeIntent]

_Coerce = Callable[[str, Any], Any]


def _count(name: str, value: Any) -> int:
    return as_int(name, value, minimum=1, maximum=MAX_INT)


def _index(name: str, value: Any) -> int:
    return as_int(name, value, minimum=0, maximum=MAX_INT)


def _text(name: str, value: Any) -> str:
    return as_str(name, value)


def _topic(name: str, value: Any) -> str:
    return as_str(name, value).strip()


# operation -> field -> (checker, sources it may come from besides the query text)
_FIELDS: dict[str, tuple[type, dict[str, tuple[_Coerce, tuple[str, ...]]]]] = {
    "store": (
        StoreIntent,
        {
            "text": (_text, ("data",)),
            "speaker": (as_speaker, ("metadata",)),
            "turn_number": (_index, ("metadata",)),
        },
    ),
    "retrieve": (
        RetrieveIntent,
        {
            "last_n": (_index, ("data",)),
            "topic": (_topic, ("data",)),
            "speaker": (as_speaker, ("data", "metadata")),
            "turn_from": (_index, ("data",)),
            "turn_to": (_index, ("data",)),
            "seq": (_count, ("data",)),
            "include_summary": (as_bool, ("data",)),
            "summary_only": (as_bool, ("data",)),
            "archived": (as_bool, ("data",)),
            "context": (as_bool, ("data",)),
            "token_limit": (_count, ("data",)),
        },
    ),
    "remove": (
        RemoveIntent,
        {
            "oldest": (_count, ("data",)),
            "before_turn": (_index, ("data",)),
            "seq": (_count, ("data",)),
            "all": (as_bool, ("data",)),
        },
    ),
    "summarize": (
        SummarizeIntent,
        {"token_limit": (_count, ("data",))},
    ),
}

OPERATIONS: tuple[str, ...] = tuple(_FIELDS)

# Keys of ``data`` that are not operation parameters.
_DATA_CONTROL = {"operation"}


def data_fields(operation: str) -> list[str]:
    """The ``data`` keys an operation accepts, for docs and error messages."""
    _, spec = _FIELDS[operation]
    return [name for name, (_, sources) in spec.items() if "data" in sources]


def build_intent(
    operation: str,
    from_query: Mapping[str, Any],
    metadata: Mapping[str, Any],
    data: Mapping[str, Any],
) -> Intent:
    """Merge the three sources into one checked intent, or raise InvalidRequest."""
    if operation not in _FIELDS:
        raise InvalidRequest(
            f"unknown operation {operation!r}; expected one of {', '.join(OPERATIONS)}"
        )
    cls, spec = _FIELDS[operation]
    accepted = set(data_fields(operation))
    unknown = sorted(set(data) - accepted - _DATA_CONTROL)
    if unknown:
        raise InvalidRequest(
            f"data.{unknown[0]} is not a parameter of {operation}; "
            f"it accepts {', '.join(sorted(accepted)) or 'none'}"
        )
    values: dict[str, Any] = {}
    for name, (check, sources) in spec.items():
        found: list[tuple[str, Any]] = []
        if name in from_query:
            found.append(("the query", check(name, from_query[name])))
        for source, given in (("metadata", metadata), ("data", data)):
            if source in sources and name in given:
                found.append((f"{source}.{name}", check(f"{source}.{name}", given[name])))
        if not found:
            continue
        first_source, first = found[0]
        for source, other in found[1:]:
            if other != first:
                raise InvalidRequest(
                    f"{name} is given twice with different values: "
                    f"{first!r} in {first_source} and {other!r} in {source}"
                )
        values[name] = first
    intent = cls(**values)
    _check_consistent(intent)
    return intent


def _check_consistent(intent: Intent) -> None:
    if isinstance(intent, RemoveIntent):
        chosen = [
            f.name
            for f in fields(intent)
            if getattr(intent, f.name) not in (None, False)
        ]
        if not chosen:
            raise InvalidRequest(
                "remove needs to know what to delete: oldest (n), before_turn (N), "
                "seq (N) or all (true)"
            )
        if len(chosen) > 1:
            raise InvalidRequest(
                f"remove takes one selector, got {' and '.join(chosen)}; "
                "send one remove per selector"
            )
    elif isinstance(intent, RetrieveIntent):
        _check_context(intent)
        if (
            intent.turn_from is not None
            and intent.turn_to is not None
            and intent.turn_from > intent.turn_to
        ):
            raise InvalidRequest(
                f"turn_from ({intent.turn_from}) is after turn_to ({intent.turn_to})"
            )


def _check_context(intent: RetrieveIntent) -> None:
    if intent.token_limit is not None and not intent.context:
        raise InvalidRequest(
            "token_limit applies to a context retrieve ('Get context within 2000 tokens') "
            "or to summarize"
        )
    if intent.context:
        others = [
            f.name
            for f in fields(intent)
            if f.name not in ("context", "token_limit")
            and getattr(intent, f.name) not in (None, False)
        ]
        if others:
            raise InvalidRequest(
                f"a context retrieve takes only token_limit, not {', '.join(others)}: it is "
                "the summary plus the newest utterances that fit"
            )
