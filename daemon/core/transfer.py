"""Moving conversations between backends as JSON Lines (``chd export`` / ``chd import``).

One conversation is a header line followed by its utterances: the buffer,
then the summary queue, then the archive of folded ones, each in seq order::

    {"record": "conversation", "format": 1, "conversation_id": "c1", "next_seq": 31,
     "last_turn": 30, "settings": {}, "summary": {"segments": [...], "through_seq": 10, "tokens": 33}}
    {"record": "utterance", "in": "buffer", "seq": 11, "speaker": "user", "text": "...", ...}
    {"record": "utterance", "in": "pending", "seq": 9, ...}
    {"record": "utterance", "in": "archive", "seq": 3, ...}

Everything a query result depends on is kept as it was (seqs, turns,
timestamps, token counts, the summary and its segments, the next seq), so
the same queries give the same answers after an import. An import checks
the whole input before it writes anything, and writes each conversation in
one ``transact``.

Both directions stream (issue 17): ``iter_states`` yields one checked
conversation at a time, ``import_stream`` writes them a batch of
conversations per storage transaction, and ``export_lines`` reads one
conversation at a time, so memory does not grow with the file. The check
before any write is a first pass over the input (``check_lines``); the
CLI reads a file twice (and a pipe from a spooled copy).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator

from chd.backends.base import Backend, Change, ConversationState, transact_many
from chd.core.memory.configure import effective_settings
from chd.core.errors import InvalidRequest
from chd.core.language.fields import as_bool, as_int, as_speaker, as_str
from chd.core.settings import Settings
from chd.core.utterance import SPEAKERS, Summary, Utterance

__all__ = [
    "EXPORT_FORMAT",
    "ImportCounts",
    "export_lines",
    "iter_states",
    "check_lines",
    "parse_lines",
    "import_states",
    "import_stream",
    "check_existing",
]

EXPORT_FORMAT = 1
_WHERE = ("buffer", "pending", "archive")


def export_lines(backend: Backend, conversation_ids: Iterable[str]) -> Iterator[str]:
    """JSON Lines for each conversation, read as one snapshot per conversation."""
    for conversation_id in conversation_ids:
        state = backend.read(conversation_id)
        yield _dump(
            {
                "record": "conversation",
                "format": EXPORT_FORMAT,
                "conversation_id": conversation_id,
                "next_seq": state.next_seq,
                "last_turn": state.last_turn,
                "settings": state.settings,
                "summary": state.summary.to_record(),
            }
        )
        for where, utterances in zip(_WHERE, (state.utterances, state.pending, state.archive)):
            # The same text as dumping {"record", "in", **record}, without
            # building that dict for every utterance.
            prefix = f'{{"record":"utterance","in":"{where}",'
            for utterance in utterances:
                yield prefix + _dump(utterance.to_record())[1:]


# One encoder for every line: json.dumps with options builds a new encoder
# on each call, a third of the cost of a short line.
_dump = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

# Lines decoded per json.loads call: one call for a chunk of lines (as one
# JSON array) costs a fraction of a call per line.
_CHUNK = 512


def _records(lines: Iterable[str]) -> Iterator[tuple[int, Any]]:
    """``(line number, decoded record)`` of each non-blank line.

    Raises:
        InvalidRequest: naming the first line that is not JSON.
    """
    chunk: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            chunk.append((number, line))
            if len(chunk) >= _CHUNK:
                yield from _decoded(chunk)
                chunk = []
    if chunk:
        yield from _decoded(chunk)


def _decoded(chunk: list[tuple[int, str]]) -> list[tuple[int, Any]]:
    try:
        records = json.loads("[" + ",".join(line for _, line in chunk) + "]")
    except json.JSONDecodeError:
        records = None
    # A line holding two values ("1, 2") joins into a longer array: decode
    # such a chunk line by line, which also names the line that is wrong.
    if records is not None and len(records) == len(chunk):
        return [(number, record) for (number, _), record in zip(chunk, records)]
    out = []
    for number, line in chunk:
        try:
            out.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise InvalidRequest(f"line {number}: not JSON ({exc.msg})") from None
    return out


@dataclass
class _Draft:
    line: int
    header: dict[str, Any]
    lists: dict[str, list[Utterance]] = field(default_factory=lambda: {where: [] for where in _WHERE})


def iter_states(lines: Iterable[str]) -> Iterator[ConversationState]:
    """The conversations in an export, one at a time, each checked completely.

    Only the conversation being read is held, and the ids seen (to refuse
    one that appears twice).

    Raises:
        InvalidRequest: naming the line and what is wrong with it.
    """
    draft: _Draft | None = None
    seen: set[str] = set()
    for number, record in _records(lines):
        try:
            started = _take(record, draft, number)
        except InvalidRequest as exc:
            raise InvalidRequest(f"line {number}: {exc}") from None
        if started is not None:
            if draft is not None:
                yield _finished(draft, seen)
            draft = started
    if draft is not None:
        yield _finished(draft, seen)


def check_lines(lines: Iterable[str]) -> list[str]:
    """The ids of the conversations in an export, after checking all of it (nothing else is kept)."""
    return [state.conversation_id for state in iter_states(lines)]


def parse_lines(lines: Iterable[str]) -> list[ConversationState]:
    """The conversations in an export, checked completely (all held in memory).

    Raises:
        InvalidRequest: naming the line and what is wrong with it.
    """
    return list(iter_states(lines))


def _finished(draft: _Draft, seen: set[str]) -> ConversationState:
    try:
        state = _state(draft)
    except InvalidRequest as exc:
        raise InvalidRequest(f"conversation starting at line {draft.line}: {exc}") from None
    if state.conversation_id in seen:
        raise InvalidRequest(f"line {draft.line}: conversation {state.conversation_id!r} appears twice")
    seen.add(state.conversation_id)
    return state


def _take(record: Any, draft: _Draft | None, number: int) -> _Draft | None:
    """Add ``record`` to ``draft``; a conversation line starts a new draft, returned."""
    if type(record) is not dict:
        raise InvalidRequest("each line must be a JSON object")
    kind = record.get("record")
    if kind == "utterance":
        if draft is None:
            raise InvalidRequest("an utterance before any conversation line")
        where = record.get("in")
        if where not in _WHERE:
            raise InvalidRequest(f"'in' must be one of {', '.join(_WHERE)}, got {where!r}")
        utterance = _utterance(record)
        if utterance.conversation_id != draft.header.get("conversation_id"):
            raise InvalidRequest(
                f"utterance of conversation {utterance.conversation_id!r} inside "
                f"conversation {draft.header.get('conversation_id')!r}"
            )
        draft.lists[where].append(utterance)
        return None
    if kind == "conversation":
        version = as_int("format", record.get("format"), minimum=1)
        if version > EXPORT_FORMAT:
            raise InvalidRequest(
                f"written by a newer chd (export format {version}; this chd reads {EXPORT_FORMAT})"
            )
        return _Draft(number, record)
    raise InvalidRequest(f"'record' must be conversation or utterance, got {kind!r}")


_SPEAKERS = frozenset(SPEAKERS)
_MAX_INT = 2**53


def _utterance(record: dict[str, Any]) -> Utterance:
    # The usual record, checked field by field without a call each (an
    # import checks every utterance, twice); anything unusual takes the
    # checking path below, which names what is wrong.
    get = record.get
    cid, seq, speaker, text = get("conversation_id"), get("seq"), get("speaker"), get("text")
    turn, timestamp, tokens, important = get("turn_number"), get("timestamp"), get("tokens"), get("important", False)
    if (
        type(cid) is str and cid.strip()
        and type(seq) is int and 1 <= seq <= _MAX_INT
        and speaker in _SPEAKERS
        and type(text) is str
        and type(turn) is int and 0 <= turn <= _MAX_INT
        and type(timestamp) is str and timestamp.strip()
        and type(tokens) is int and 0 <= tokens <= _MAX_INT
        and type(important) is bool
    ):
        return Utterance(cid, seq, speaker, text, turn, timestamp, tokens, important)
    return Utterance(
        conversation_id=as_str("conversation_id", record.get("conversation_id")),
        seq=as_int("seq", record.get("seq"), minimum=1),
        speaker=as_speaker("speaker", record.get("speaker")),
        text=as_str("text", record.get("text"), allow_empty=True),
        turn_number=as_int("turn_number", record.get("turn_number")),
        timestamp=as_str("timestamp", record.get("timestamp")),
        tokens=as_int("tokens", record.get("tokens")),
        important=as_bool("important", record.get("important", False)),
    )


_SEGMENT_NUMBERS = ("tokens", "seq_from", "seq_to", "turn_from", "turn_to")
_SEGMENT_TEXTS = ("text", "made_by", "error")


def _summary(record: Any) -> Summary:
    """The summary, each field checked first so a bad one is named, not a KeyError."""
    if not isinstance(record, dict) or not isinstance(record.get("segments"), list):
        raise InvalidRequest("summary must be an object with a list of segments")
    for i, segment in enumerate(record["segments"]):
        if not isinstance(segment, dict):
            raise InvalidRequest(f"summary segment {i} must be an object")
        for name in _SEGMENT_NUMBERS:
            as_int(f"summary segment {i} {name}", segment.get(name))
        for name in _SEGMENT_TEXTS:
            if name in segment or name == "text":
                as_str(f"summary segment {i} {name}", segment.get(name), allow_empty=True)
        keys = segment.get("keys", [])
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise InvalidRequest(f"summary segment {i} keys must be a list of strings")
    as_int("summary through_seq", record.get("through_seq"))
    as_int("summary tokens", record.get("tokens"))
    held = record.get("held", [])
    if not isinstance(held, list) or not all(isinstance(u, dict) for u in held):
        raise InvalidRequest("summary held must be a list of utterance objects")
    for name in ("held_dropped", "held_dropped_through"):
        as_int(f"summary {name}", record.get(name, 0))
    # The originals kept for a Claude rewrite (issue 13), checked like any utterance.
    return replace(Summary.from_record({**record, "held": []}), held=tuple(_utterance(u) for u in held))


def _settings(record: Any) -> dict[str, Any]:
    """A conversation's overrides, checked as the daemon will apply them.

    An override the daemon cannot apply would fail every later store,
    stats and summary of the conversation, so it is refused here, before
    anything is written.
    """
    if not isinstance(record, dict):
        raise InvalidRequest("settings must be an object")
    # Other keys are the storage's to keep (the daemon ignores them).
    try:
        effective_settings(Settings(), record)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"settings: {exc}") from None
    return record


def _state(draft: _Draft) -> ConversationState:
    header = draft.header
    settings = _settings(header.get("settings", {}))
    state = ConversationState(
        conversation_id=as_str("conversation_id", header.get("conversation_id")),
        next_seq=as_int("next_seq", header.get("next_seq"), minimum=1),
        last_turn=as_int("last_turn", header.get("last_turn")),
        utterances=draft.lists["buffer"],
        pending=draft.lists["pending"],
        summary=_summary(header["summary"]) if "summary" in header else Summary(),
        settings=settings,
        archive=draft.lists["archive"],
    )
    seen: set[int] = set()
    for where, utterances in draft.lists.items():
        seqs = [u.seq for u in utterances]
        if seqs != sorted(set(seqs)):
            raise InvalidRequest(f"the {where} utterances must have ascending, distinct seqs")
        twice = seen & set(seqs)
        if twice:
            raise InvalidRequest(f"seq {min(twice)} appears in more than one of buffer, pending and archive")
        seen |= set(seqs)
    highest = max(seen, default=0)
    if state.next_seq <= highest:
        raise InvalidRequest(f"next_seq {state.next_seq} must be above the highest seq {highest}")
    return state


def import_states(
    backend: Backend, states: Iterable[ConversationState], replace: bool = False
) -> list[ConversationState]:
    """Write each conversation in one transaction; the states as imported.

    Raises:
        InvalidRequest: A conversation already holds data and ``replace`` is
            False; checked for all of them before the first write, and again
            inside each transaction in case a writer got in meanwhile.
    """
    states = list(states)
    if not replace:
        check_existing(backend, states)
    import_stream(backend, states, replace)
    return states


@dataclass
class ImportCounts:
    """What ``import_stream`` has written so far."""

    conversations: int = 0
    utterances: int = 0


# A batch ends at whichever comes first: one transaction holds the storage's
# write lock while it runs, so a daemon serving the same data dir waits at
# most one batch (a few ms) for its next store.
BATCH_CONVERSATIONS = 200
BATCH_UTTERANCES = 5_000


def import_stream(
    backend: Backend,
    states: Iterable[ConversationState],
    replace: bool = False,
    on_batch: Callable[[list[ConversationState], ImportCounts], None] | None = None,
) -> ImportCounts:
    """Write each conversation as it comes, a batch of them per storage transaction.

    ``states`` is consumed once; only the current batch is held. Each
    conversation is written whole or not at all; a conversation that holds
    data when ``replace`` is False stops the import there, with the batches
    before it written (check them first with ``check_existing``).

    Raises:
        InvalidRequest: A conversation already holds data and ``replace`` is False.
    """
    counts = ImportCounts()
    batch: list[ConversationState] = []
    size = 0

    def flush() -> None:
        outcomes = transact_many(backend, [(s.conversation_id, _replacing(s, replace)) for s in batch])
        for outcome in outcomes:
            if outcome.error is not None:
                raise outcome.error
        counts.conversations += len(batch)
        counts.utterances += size
        if on_batch is not None:
            on_batch(batch, counts)

    for state in states:
        batch.append(state)
        size += len(state.utterances) + len(state.pending) + len(state.archive)
        if len(batch) >= BATCH_CONVERSATIONS or size >= BATCH_UTTERANCES:
            flush()
            batch, size = [], 0
    if batch:
        flush()
    return counts


def check_existing(backend: Backend, states: Iterable[ConversationState]) -> None:
    """Refuse, before anything is written, to import over a conversation that holds data."""
    for state in states:
        _replacing(state, False)(backend.read(state.conversation_id))


def _replacing(imported: ConversationState, replace: bool):
    def decide(current: ConversationState) -> tuple[Change, None]:
        if not current.is_empty and not replace:
            raise InvalidRequest(
                f"conversation {current.conversation_id!r} already holds data; "
                "use --replace to overwrite it"
            )
        return (
            Change(
                remove={u.seq for u in current.utterances},
                pending_remove={u.seq for u in current.pending},
                append=list(imported.utterances),
                pending_add=list(imported.pending),
                archive_remove={u.seq for u in current.archive},
                archive_add=list(imported.archive),
                summary=imported.summary,
                next_seq=imported.next_seq,
                last_turn=imported.last_turn,
                settings=dict(imported.settings),
            ),
            None,
        )

    return decide
