"""Typed intents: what a query asks the core to do.

An intent is built from up to three sources: fields the parser read from the
query text, ``metadata`` and ``data``. When two sources give a field
different values the request is refused rather than one silently winning:
a caller who says "last 5" in the text and ``last_n: 3`` in data has a bug
worth hearing about.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from datetime import UTC, datetime
from typing import Any

from chd.core.days import check_day, parse_zone
from chd.core.errors import InvalidRequest, quote
from chd.core.language.fields import as_bool, as_int, as_speaker, as_str, describe
from chd.core.memory.eviction import POLICIES
from chd.core.utterance import Speaker

__all__ = [
    "OPERATIONS",
    "EVICTION_POLICIES",
    "StoreIntent",
    "StoreManyIntent",
    "MAX_STORE_MANY",
    "MAX_STORE_MANY_CHARS",
    "RetrieveIntent",
    "WHERE_PLACES",
    "RemoveIntent",
    "SummarizeIntent",
    "ConfigureIntent",
    "MarkIntent",
    "StatsIntent",
    "Intent",
    "build_intent",
    "data_fields",
    "field_sources",
]

MAX_INT = 2**31 - 1
EVICTION_POLICIES: tuple[str, ...] = POLICIES


@dataclass(frozen=True, slots=True)
class StoreIntent:
    """Append one utterance; ``turn_number`` None means: track turns automatically.

    ``timestamp`` (from ``metadata.timestamp``, RFC 3339) is when the
    utterance was said, for imported history (issue 27); None means now.
    ``idempotency_key`` (from ``metadata.idempotency_key``) makes a store sent
    again with the same key answer the utterance it stored (issue 29).
    """

    text: str
    speaker: Speaker = "user"
    turn_number: int | None = None
    timestamp: datetime | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class StoreManyIntent:
    """Append several utterances in one commit, all or none (issue 31's store-many).

    Each item is checked as a single store's fields are; the items are
    stored in order, as that many single stores would be, but the batch is
    one decision and one commit. ``idempotency_key`` is one key for the
    whole batch: every utterance of it carries the key, and a batch sent
    again with it answers the utterances it stored.
    """

    utterances: tuple[StoreIntent, ...]
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class RetrieveIntent:
    """Read utterances and/or the summary. Filters combine with AND.

    Filters (speaker, turns, seqs, time, ``last_n``/``first_n``/``last_turns``
    windows) choose the candidates first; with ``topic`` the candidates are
    then ranked by relevance and at most ``limit`` returned, otherwise they
    come back in conversation order.
    ``archived`` reads the archive of folded utterances instead of the buffer.
    ``where`` narrows a topic search to some of the places a conversation
    keeps what it said (``WHERE_PLACES``); empty means all of them.
    ``context`` asks for the summary plus the newest utterances that fit
    ``token_limit`` tokens, as one text (daemon/core/memory/context.py).
    """

    last_n: int | None = None
    first_n: int | None = None
    last_turns: int | None = None
    first_turns: int | None = None
    topic: str | None = None
    limit: int | None = None
    speaker: Speaker | None = None
    turn_from: int | None = None
    turn_to: int | None = None
    seq: int | None = None
    seqs: tuple[int, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    within_seconds: int | None = None
    older_than_seconds: int | None = None
    day: str | None = None
    timezone: str | None = None
    include_summary: bool = False
    summary_only: bool = False
    archived: bool = False
    context: bool = False
    token_limit: int | None = None
    where: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RemoveIntent:
    """Delete utterances.

    Filters (``speaker``, turn bounds, ``seq``/``seqs``, ``last_turns``)
    combine with AND; ``oldest``/``newest`` then keep the first or last n of
    what the filters chose; ``all`` deletes everything and takes no other
    selector. ``at_most`` refuses the remove if it would delete more: the
    parser sets it to 1 for singular phrasings ("remove the assistant's
    message") so a guess never deletes several utterances.
    """

    oldest: int | None = None
    newest: int | None = None
    before_turn: int | None = None
    after_turn: int | None = None
    turn_from: int | None = None
    turn_to: int | None = None
    last_turns: int | None = None
    first_turns: int | None = None
    seq: int | None = None
    seqs: tuple[int, ...] = ()
    speaker: Speaker | None = None
    all: bool = False
    at_most: int | None = None
    # Issue 25: "Delete every utterance stored more than one hour ago".
    within_seconds: int | None = None
    older_than_seconds: int | None = None

    @property
    def turn_bounds(self) -> tuple[int | None, int | None]:
        """The inclusive turn range the turn selectors leave (None: open)."""
        low, high = self.turn_from, self.turn_to
        if self.after_turn is not None:
            low = max(low or 0, self.after_turn + 1)
        if self.before_turn is not None:
            high = self.before_turn - 1 if high is None else min(high, self.before_turn - 1)
        return low, high


@dataclass(frozen=True, slots=True)
class SummarizeIntent:
    """Summarize the conversation (summary so far plus the buffer), a turn range, or the newest utterances.

    ``last_turns``/``first_turns`` narrow to the newest/oldest k turns present;
    ``last_n`` summarizes only the newest n utterances of the buffer.
    """

    token_limit: int | None = None
    turn_from: int | None = None
    turn_to: int | None = None
    last_n: int | None = None
    last_turns: int | None = None
    first_turns: int | None = None


@dataclass(frozen=True, slots=True)
class ConfigureIntent:
    """Set this conversation's limits; with nothing set, read them back.

    ``reset`` drops the conversation's overrides (the daemon's defaults apply
    again) before any value given with it is set.
    """

    buffer_size: int | None = None
    max_tokens: int | None = None
    summary_token_limit: int | None = None
    eviction_policy: str | None = None
    eviction_batch: int | None = None
    reset: bool = False

    @property
    def changes(self) -> dict[str, Any]:
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "reset" and getattr(self, f.name) is not None
        }


@dataclass(frozen=True, slots=True)
class MarkIntent:
    """Mark (or with ``important=False`` unmark) one utterance as important."""

    seq: int
    important: bool = True


@dataclass(frozen=True, slots=True)
class StatsIntent:
    """Counts, tokens, turns, summary size and queue length of a conversation."""


Intent = (
    StoreIntent
    | StoreManyIntent
    | RetrieveIntent
    | RemoveIntent
    | SummarizeIntent
    | ConfigureIntent
    | MarkIntent
    | StatsIntent
)

_Coerce = Callable[[str, Any], Any]


def _count(name: str, value: Any) -> int:
    return as_int(name, value, minimum=1, maximum=MAX_INT)


def _index(name: str, value: Any) -> int:
    return as_int(name, value, minimum=0, maximum=MAX_INT)


def _text(name: str, value: Any) -> str:
    return as_str(name, value)


def _topic(name: str, value: Any) -> str:
    return as_str(name, value).strip()


def _seqs(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise InvalidRequest(
            f"{name} must be a non-empty list of seq numbers, got {describe(value)}"
        )
    return tuple(sorted({_count(f"{name}[{i}]", v) for i, v in enumerate(value)}))


# Where a topic search may find what a conversation said (issue 27): the
# buffer, the queue waiting for the summary, the archive, the summary's segments.
WHERE_PLACES = ("buffer", "pending", "archive", "summary")


def _where(name: str, value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise InvalidRequest(
            f"{name} must be one of {', '.join(WHERE_PLACES)} or a non-empty list of them, got {describe(value)}"
        )
    places = []
    for i, item in enumerate(items):
        place = as_str(f"{name}[{i}]", item).strip().lower()
        if place not in WHERE_PLACES:
            raise InvalidRequest(
                f"{name}[{i}] must be one of {', '.join(WHERE_PLACES)}, got {describe(item)}"
            )
        places.append(place)
    return tuple(p for p in WHERE_PLACES if p in places)


# How far in the future a stored utterance's time may be: clocks of the
# orchestrator and the daemon differ a little, never by minutes.
MAX_FUTURE_SKEW = 300  # seconds


# Long enough for a UUID, a ULID or a hash in hex; short enough that keeping
# one with every held utterance costs little (docs/protocol.md).
MAX_IDEMPOTENCY_KEY = 128


def _idempotency_key(name: str, value: Any) -> str:
    key = as_str(name, value)
    if len(key) > MAX_IDEMPOTENCY_KEY:
        raise InvalidRequest(
            f"{name} is {len(key)} characters long; the limit is {MAX_IDEMPOTENCY_KEY}"
        )
    if "\x1f" in key:
        # The separator of a store-many's per-utterance keys (daemon/core/memory/batch.py).
        raise InvalidRequest(f"{name} must not contain the control character U+001F")
    return key


# A store-many's limits (docs/protocol.md): enough for a long imported
# history in a few requests, small enough that one request's decision and
# commit stay short for the other callers of the conversation. Over them the
# batch is refused (INVALID_ARGUMENT) before anything is counted.
MAX_STORE_MANY = 1000
MAX_STORE_MANY_CHARS = 4_000_000
_ITEM_FIELDS = ("text", "speaker", "turn_number", "timestamp")


def _utterances(name: str, value: Any) -> tuple[StoreIntent, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise InvalidRequest(
            f"{name} must be a non-empty list of {{text, speaker, turn_number, timestamp}} objects, "
            f"got {describe(value)}"
        )
    if len(value) > MAX_STORE_MANY:
        raise InvalidRequest(
            f"{name} has {len(value)} utterances; the limit is {MAX_STORE_MANY} per request "
            "(send the rest in another store)"
        )
    items = []
    chars = 0
    for i, item in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"{where} must be an object with text, got {describe(item)}")
        unknown = sorted(k for k in item if k not in _ITEM_FIELDS)
        if unknown:
            raise InvalidRequest(
                f"{where}.{unknown[0] if len(unknown[0]) <= 40 else quote(unknown[0], 40)} is not a field of an utterance; "
                f"it accepts {', '.join(_ITEM_FIELDS)}"
            )
        if "text" not in item:
            raise InvalidRequest(f"{where} needs text")
        text = _text(f"{where}.text", item["text"])
        chars += len(text)
        if chars > MAX_STORE_MANY_CHARS:
            raise InvalidRequest(
                f"{name} holds more than {MAX_STORE_MANY_CHARS:,} characters of text by {where}; "
                f"the limit is {MAX_STORE_MANY_CHARS:,} per request (send the rest in another store)"
            )
        items.append(
            StoreIntent(
                text=text,
                speaker=as_speaker(f"{where}.speaker", item["speaker"])
                if "speaker" in item
                else "user",
                turn_number=_index(f"{where}.turn_number", item["turn_number"])
                if "turn_number" in item
                else None,
                timestamp=_said_at(f"{where}.timestamp", item["timestamp"])
                if "timestamp" in item
                else None,
            )
        )
    return tuple(items)


def _said_at(name: str, value: Any) -> datetime:
    moment = _since(name, value)
    if moment.timestamp() > time.time() + MAX_FUTURE_SKEW:
        raise InvalidRequest(
            f"{name} {moment.isoformat()} is in the future (more than {MAX_FUTURE_SKEW} s ahead of the daemon's clock)"
        )
    return moment


def _since(name: str, value: Any) -> datetime:
    if isinstance(value, datetime):
        moment = value
    else:
        text = as_str(name, value).strip()
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise InvalidRequest(
                f"{name} must be an RFC 3339 time like 2026-01-31T14:00:00Z, got {describe(value)}"
            ) from None
    if moment.tzinfo is None:
        raise InvalidRequest(f"{name} needs a time zone (end it with Z for UTC)")
    return moment.astimezone(UTC)


def _day(name: str, value: Any) -> str:
    try:
        return check_day(as_str(name, value))
    except ValueError as error:
        raise InvalidRequest(f"{name}: {error}") from None


def _timezone(name: str, value: Any) -> str:
    text = as_str(name, value).strip()
    if name.startswith("metadata."):
        # A client sets metadata.timezone on every call (docs/search.md); it
        # matters only to a retrieve that reads a day, where it is checked
        # (_check_zone). Refused everywhere, one bad zone failed every read.
        return text
    try:
        parse_zone(text)
    except ValueError as error:
        raise InvalidRequest(f"{name}: {error}") from None
    return text


def _check_zone(intent: RetrieveIntent) -> None:
    """A timezone that only metadata gave is checked once a day needs it."""
    if intent.day is None or intent.timezone is None:
        return
    try:
        parse_zone(intent.timezone)
    except ValueError as error:
        raise InvalidRequest(f"metadata.timezone: {error}") from None


def _policy(name: str, value: Any) -> str:
    text = as_str(name, value).strip().lower()
    if text not in EVICTION_POLICIES:
        raise InvalidRequest(
            f"{name} must be one of {', '.join(EVICTION_POLICIES)}, got {describe(value)}"
        )
    return text


_D = ("data",)
_RETRIEVE_SPEAKER = ("data", "metadata")  # the spec filters retrieves by metadata.speaker

# operation -> field -> (checker, sources it may come from besides the query text)
_FIELDS: dict[str, tuple[type[Intent], dict[str, tuple[_Coerce, tuple[str, ...]]]]] = {
    "store": (
        StoreIntent,
        {
            "text": (_text, _D),
            "speaker": (as_speaker, ("metadata",)),
            "turn_number": (_index, ("metadata",)),
            "timestamp": (_said_at, ("metadata",)),
            "idempotency_key": (_idempotency_key, ("metadata",)),
            "utterances": (_utterances, _D),
        },
    ),
    "retrieve": (
        RetrieveIntent,
        {
            "last_n": (_index, _D),
            "first_n": (_index, _D),
            "last_turns": (_count, _D),
            "first_turns": (_count, _D),
            "topic": (_topic, _D),
            "limit": (_count, _D),
            "speaker": (as_speaker, _RETRIEVE_SPEAKER),
            "turn_from": (_index, _D),
            "turn_to": (_index, _D),
            "seq": (_count, _D),
            "seqs": (_seqs, _D),
            "since": (_since, _D),
            "until": (_since, _D),
            "within_seconds": (_count, _D),
            "older_than_seconds": (_count, _D),
            "day": (_day, _D),
            "timezone": (_timezone, ("data", "metadata")),
            "include_summary": (as_bool, _D),
            "summary_only": (as_bool, _D),
            "archived": (as_bool, _D),
            "context": (as_bool, _D),
            "token_limit": (_count, _D),
            "where": (_where, _D),
        },
    ),
    "remove": (
        RemoveIntent,
        {
            "oldest": (_count, _D),
            "newest": (_count, _D),
            "before_turn": (_index, _D),
            "after_turn": (_index, _D),
            "turn_from": (_index, _D),
            "turn_to": (_index, _D),
            "last_turns": (_count, _D),
            "first_turns": (_count, _D),
            "seq": (_count, _D),
            "seqs": (_seqs, _D),
            "speaker": (as_speaker, _D),
            "all": (as_bool, _D),
            "at_most": (_count, _D),
            "within_seconds": (_count, _D),
            "older_than_seconds": (_count, _D),
        },
    ),
    "summarize": (
        SummarizeIntent,
        {
            "token_limit": (_count, _D),
            "turn_from": (_index, _D),
            "turn_to": (_index, _D),
            "last_n": (_count, _D),
            "last_turns": (_count, _D),
            "first_turns": (_count, _D),
        },
    ),
    "configure": (
        ConfigureIntent,
        {
            "buffer_size": (_count, _D),
            "max_tokens": (_count, _D),
            "summary_token_limit": (_count, _D),
            "eviction_policy": (_policy, _D),
            "eviction_batch": (_count, _D),
            "reset": (as_bool, _D),
        },
    ),
    "mark": (
        MarkIntent,
        {"seq": (_count, _D), "important": (as_bool, _D)},
    ),
    "stats": (StatsIntent, {}),
}

OPERATIONS: tuple[str, ...] = tuple(_FIELDS)

# Keys of ``data`` that are not operation parameters.
_DATA_CONTROL = {"operation"}


def data_fields(operation: str) -> list[str]:
    """The ``data`` keys an operation accepts, for docs and error messages."""
    _, spec = _FIELDS[operation]
    return [name for name, (_, sources) in spec.items() if "data" in sources]


def field_sources(operation: str) -> dict[str, tuple[str, ...]]:
    """Each field of an operation and where besides the query text it may come from."""
    _, spec = _FIELDS[operation]
    return {name: sources for name, (_, sources) in spec.items()}


@functools.cache
def _field_sets(operation: str) -> tuple[frozenset[str], tuple[str, ...]]:
    """The ``data`` keys ``operation`` accepts, and its intent's fields without a default."""
    cls, _ = _FIELDS[operation]
    required = tuple(
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
    )
    return frozenset(data_fields(operation)), required


def build_intent(
    operation: str,
    from_query: Mapping[str, Any],
    metadata: Mapping[str, Any],
    data: Mapping[str, Any],
) -> Intent:
    """Merge the three sources into one checked intent, or raise InvalidRequest."""
    if operation not in _FIELDS:
        raise InvalidRequest(
            f"unknown operation {quote(operation, 40)}; expected one of {', '.join(OPERATIONS)}"
        )
    cls, spec = _FIELDS[operation]
    accepted, required = _field_sets(operation)
    unknown = sorted(set(data) - accepted - _DATA_CONTROL)
    if unknown:
        raise InvalidRequest(
            f"data.{unknown[0] if len(unknown[0]) <= 40 else quote(unknown[0], 40)} is not a parameter of {operation}; "
            f"it accepts {', '.join(sorted(accepted)) or 'none'}"
        )
    values: dict[str, Any] = {}
    for name, (check, sources) in spec.items():
        # Most fields are given nowhere: skip them before building anything
        # (this loop was most of build_intent's 20 us for a retrieve).
        in_query, in_metadata, in_data = name in from_query, name in metadata, name in data
        if not (in_query or in_metadata or in_data):
            continue
        found: list[tuple[str, Any]] = []
        if in_query:
            found.append(("the query", check(name, from_query[name])))
        for source, given, present in (
            ("metadata", metadata, in_metadata),
            ("data", data, in_data),
        ):
            if present and source in sources:
                found.append((f"{source}.{name}", check(f"{source}.{name}", given[name])))
        if not found:
            continue
        first_source, first = found[0]
        for source, other in found[1:]:
            if other != first:
                raise InvalidRequest(
                    f"{name} is given twice with different values: "
                    f"{_shown(first)} in {first_source} and {_shown(other)} in {source}"
                )
        values[name] = first
    if operation == "store" and "utterances" in values:
        return _store_many(values)
    missing = [name for name in required if name not in values]
    if missing:
        hint = {
            "store": " or use 'Add utterance: <text>'",
            "mark": " or say 'Mark utterance 12 as important'",
        }.get(operation, "")
        raise InvalidRequest(f"{operation} needs {missing[0]}: give data.{missing[0]}{hint}")
    intent = cls(**values)
    _check_consistent(intent)
    return intent


def _store_many(values: dict[str, Any]) -> StoreManyIntent:
    # Each item says its own speaker, turn and time: a batch-wide one next to
    # them would leave which one wins to a guess.
    given = [name for name in ("text", *_ITEM_FIELDS[1:]) if name in values]
    if given:
        raise InvalidRequest(
            f"a store of data.utterances takes {given[0]} in each utterance, not beside them; "
            "store one utterance with text, or several with utterances"
        )
    return StoreManyIntent(values["utterances"], values.get("idempotency_key"))


def _shown(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    return quote(value) if isinstance(value, str) else repr(value)


def _check_turn_range(low: int | None, high: int | None, what: str = "turn_from") -> None:
    if low is not None and high is not None and low > high:
        raise InvalidRequest(f"{what} ({low}) is after turn_to ({high})")


def _check_consistent(intent: Intent) -> None:
    if isinstance(intent, RemoveIntent):
        _check_remove(intent)
    elif isinstance(intent, RetrieveIntent):
        _check_context(intent)
        _check_turn_range(intent.turn_from, intent.turn_to)
        if intent.last_n is not None and intent.first_n is not None:
            raise InvalidRequest("retrieve takes last_n or first_n, not both")
        if intent.limit is not None and intent.topic is None:
            raise InvalidRequest(
                "limit caps the hits of a topic search; without a topic use last_n or first_n"
            )
        if intent.summary_only and (intent.topic is not None or intent.include_summary):
            raise InvalidRequest(
                "summary_only returns the summary alone; drop topic/include_summary"
            )
        _check_where(intent)
        _check_zone(intent)
        if intent.since is not None and intent.until is not None and intent.until <= intent.since:
            raise InvalidRequest(
                f"until ({intent.until.isoformat()}) must be after since ({intent.since.isoformat()})"
            )
    elif isinstance(intent, SummarizeIntent):
        _check_turn_range(intent.turn_from, intent.turn_to)
        if intent.last_turns is not None and intent.first_turns is not None:
            raise InvalidRequest("summarize takes last_turns or first_turns, not both")


_REMOVE_SELECTORS = (
    "oldest", "newest", "before_turn", "after_turn", "turn_from", "turn_to",
    "last_turns", "first_turns", "seq", "seqs", "speaker", "all",
    "within_seconds", "older_than_seconds",
)  # fmt: skip


def _given(value: Any) -> bool:
    # Not ``value in (None, False, ())``: 0 == False, and turn 0 is a real selector.
    return value is not None and value is not False and value != ()


def _check_remove(intent: RemoveIntent) -> None:
    chosen = [name for name in _REMOVE_SELECTORS if _given(getattr(intent, name))]
    if not chosen:
        raise InvalidRequest(
            "remove needs to know what to delete: oldest (n), newest (n), before_turn (N), "
            "after_turn (N), turn_from/turn_to, seq (N), speaker, within_seconds, "
            "older_than_seconds, or all (true)"
        )
    others = [name for name in chosen if name != "all"]
    if intent.all and others:
        raise InvalidRequest(
            f"remove all deletes everything and takes no other selector, got {', '.join(others)}"
        )
    if intent.oldest is not None and intent.newest is not None:
        raise InvalidRequest("remove takes oldest or newest, not both")
    low, high = intent.turn_bounds
    if low is not None and high is not None and low > high:
        raise InvalidRequest(f"the turn selectors leave no turns (from {low} to {high})")


# Fields that choose among the buffer's utterances (its window or its seqs).
_BUFFER_SELECTORS = ("last_n", "first_n", "last_turns", "first_turns", "seq", "seqs")


def _check_where(intent: RetrieveIntent) -> None:
    """``where`` narrows a topic search; refuse it where it would be ignored or leave nothing.

    Applied silently before, it answered "where: archive" without a topic
    with the buffer, and "where: buffer" with ``archived`` with nothing
    (outside review of issue 27).
    """
    if not intent.where:
        return
    places = ", ".join(intent.where)
    if intent.topic is None:
        raise InvalidRequest(
            f"where ({places}) narrows a topic search; give a topic, or without one use "
            "archived (true) to read the archive"
        )
    if intent.archived and intent.where != ("archive",):
        raise InvalidRequest(
            f"archived searches the archive alone and where names {places}; drop one of them"
        )
    chosen = [name for name in _BUFFER_SELECTORS if _given(getattr(intent, name))]
    if chosen and not intent.archived and intent.where != ("buffer",):
        raise InvalidRequest(
            f"{chosen[0]} chooses among the buffer's utterances and where names {places}; "
            "drop one of them (where may only be buffer with it)"
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
            if f.name not in ("context", "token_limit") and _given(getattr(intent, f.name))
        ]
        if others:
            raise InvalidRequest(
                f"a context retrieve takes only token_limit, not {', '.join(others)}: it is "
                "the summary plus the newest utterances that fit"
            )
