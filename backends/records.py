"""The disk backend's stored records: JSON text, each with a schema version.

Records are JSON rather than pickles: a data dir can be read with the
``sqlite3`` shell or another language, and loading one never runs code.
Every record names the schema it was written with, so a chd that meets a
record from a newer version refuses it instead of misreading it.

Keys (all text, so they sort by code point in SQLite):

    b:<conversation>#<n>  block n: the utterances with seqs n*8+1 .. n*8+8
                        (those still stored, in the buffer, the summary
                        queue or the archive), once the conversation's seqs
                        have moved past the block
    chd:counts          how many conversations hold state (schema 3), kept
                        in the transaction that creates or empties one
    chd:schema          the data dir's schema record, written at creation
    m:<conversation>    meta: counters, which seqs are in the buffer, the
                        summary queue and the archive (as SeqRuns),
                        per-conversation settings, and the open block: the
                        utterances of the block the next seq falls in
    q:<conversation>    present while the conversation's summary queue is
                        not empty (schema 3): the index start-up recovery reads
    s:<conversation>    the running summary (written only when it changes)
    u:<conversation>#<seq>  one utterance on its own: a text longer than
                        LONG_TEXT characters, or one stored by schema 1
                        (seqs below the meta's ``own_below``)

An utterance keeps its place (block or own record) while it moves from the
buffer to the summary queue to the archive; only the meta record's seq runs
change. A store of a short utterance therefore writes one record, the meta,
and every eighth store also the block it closes: one diskcache ``set`` and
a row UPDATE instead of two ``set`` calls and an INSERT, which halved the
SQLite work of a store and the pages it adds to the WAL (issue 3).

Schema 1 kept every utterance under ``u:``; a schema-1 meta record reads as
``own_below = next_seq`` (everything stored so far is on its own), so old
data dirs are read as they are and only new utterances go into blocks.

Schema 3 added ``chd:counts`` and the ``q:`` index (issue 17), so start-up
and the ``max_conversations`` check need not read every conversation. The
first open of an older data dir builds both, once, from the meta records.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from chd.backends.seq_runs import SeqRuns
from chd.core.errors import StorageError
from chd.core.utterance import Summary, Utterance

__all__ = [
    "SCHEMA_VERSION",
    "SCHEMA_KEY",
    "COUNTS_KEY",
    "META_PREFIX",
    "QUEUED_PREFIX",
    "queued_key",
    "QUEUED_RECORD",
    "encode_counts",
    "decode_counts",
    "Meta",
    "NewerSchema",
    "meta_key",
    "summary_key",
    "utterance_key",
    "block_key",
    "block_of",
    "has_own_record",
    "BLOCK_SIZE",
    "LONG_TEXT",
    "encode_meta",
    "decode_meta",
    "encode_utterance",
    "decode_utterance",
    "encode_in_block",
    "encode_block",
    "decode_block",
    "encode_own",
    "split_block",
    "encode_summary",
    "decode_summary",
    "encode_schema",
    "decode_schema",
]

# Bump when a record's layout changes, and teach decode_* to read the old one.
SCHEMA_VERSION = 3
SCHEMA_KEY = "chd:schema"
COUNTS_KEY = "chd:counts"
T = TypeVar("T")
META_PREFIX = "m:"
QUEUED_PREFIX = "q:"
# Seqs per block. The open block rides in the meta record, which every store
# rewrites: 8 short utterances keep it well inside one 4 KiB SQLite page.
BLOCK_SIZE = 8
# Utterances with longer texts get their own record, so one pasted document
# does not make every store rewrite it with the meta record.
LONG_TEXT = 500


class NewerSchema(StorageError):
    """A record was written by a newer chd with a schema this one cannot read."""


def meta_key(conversation_id: str) -> str:
    return META_PREFIX + conversation_id


def queued_key(conversation_id: str) -> str:
    return QUEUED_PREFIX + conversation_id


def summary_key(conversation_id: str) -> str:
    return "s:" + conversation_id


def utterance_key(conversation_id: str, seq: int) -> str:
    # The seq after the last "#" is digits only, so distinct (id, seq) pairs
    # never make the same key whatever characters the id holds.
    return f"u:{conversation_id}#{seq}"


def block_key(conversation_id: str, block: int) -> str:
    return f"b:{conversation_id}#{block}"


def block_of(seq: int) -> int:
    """The block holding ``seq`` (seqs start at 1; block 0 is 1 .. BLOCK_SIZE)."""
    return (seq - 1) // BLOCK_SIZE


def has_own_record(utterance: Utterance, own_below: int) -> bool:
    """True if ``utterance`` is stored under its own ``u:`` key rather than in a block."""
    return utterance.seq < own_below or len(utterance.text) > LONG_TEXT


@dataclass(slots=True)
class Meta:
    """The small per-conversation record every operation reads first.

    Never changed once made (not ``frozen``: a frozen dataclass's __init__
    costs 3 us against 1 us, and every store makes one).

    ``token`` changes with every commit (letters, digits and dots only, so it
    needs no JSON escaping); a state cached in memory is current exactly when
    its token matches the stored one. ``open`` holds the
    block-stored utterances of the block ``next_seq`` falls in; seqs below
    ``own_below`` have their own records (see the module docstring).
    """

    token: str
    next_seq: int = 1
    last_turn: int = 0
    buffer: SeqRuns = field(default_factory=SeqRuns)
    pending: SeqRuns = field(default_factory=SeqRuns)
    archive: SeqRuns = field(default_factory=SeqRuns)
    settings: dict[str, Any] = field(default_factory=dict)
    has_summary: bool = False
    own_below: int = 1
    open: tuple[Utterance, ...] = ()


# One encoder for every record: json.dumps with options builds a new
# JSONEncoder on every call, a third of the cost of encoding a small record.
_dump = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _load(text: Any, what: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise StorageError(f"{what} is not a chd record (found {type(text).__name__})")
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StorageError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(record, dict):
        raise StorageError(f"{what} is not a JSON object")
    schema = record.get("schema")
    if not isinstance(schema, int):
        raise StorageError(f"{what} has no schema version")
    if schema > SCHEMA_VERSION:
        raise NewerSchema(
            f"{what} was written by a newer chd (storage schema {schema}); "
            f"this chd reads schema {SCHEMA_VERSION}: upgrade chd"
        )
    return record


def encode_schema(created_by: str) -> str:
    return _dump({"schema": SCHEMA_VERSION, "created_by": created_by})


def decode_schema(text: Any) -> int:
    return int(_load(text, "the data dir's schema record")["schema"])


# The value of a q: key: the key is the information.
QUEUED_RECORD = f'{{"schema":{SCHEMA_VERSION}}}'


def encode_counts(conversations: int) -> str:
    return _dump({"schema": SCHEMA_VERSION, "conversations": conversations})


def decode_counts(text: Any) -> int:
    return _parse(text, "the data dir's counts record", lambda record: int(record["conversations"]))


def encode_meta(meta: Meta, open_records: Iterable[str]) -> str:
    """The meta record; ``open_records`` are ``meta.open`` already encoded with encode_in_block.

    Every store writes this record, so it is formatted by hand (the JSON a
    dict of the same fields would give, in 3 us rather than 8), and the open
    block's utterances come as the text the previous commit encoded, so a
    store encodes only the utterance it adds.
    """
    settings = _dump(meta.settings) if meta.settings else "{}"
    own_below = f',"own_below":{meta.own_below}' if meta.own_below > 1 else ""
    return (
        f'{{"schema":{SCHEMA_VERSION},"token":"{meta.token}","next_seq":{meta.next_seq:d},'
        f'"last_turn":{meta.last_turn:d},"buffer":{meta.buffer.to_json()},'
        f'"pending":{meta.pending.to_json()},"archive":{meta.archive.to_json()},'
        f'"settings":{settings},"has_summary":{"true" if meta.has_summary else "false"}{own_below},'
        f'"open":[{",".join(open_records)}]}}'
    )


def decode_meta(text: Any, conversation_id: str) -> Meta:
    return _parse(text, f"the meta record of conversation {conversation_id!r}", _meta)


def _meta(record: dict[str, Any]) -> Meta:
    next_seq = int(record["next_seq"])
    opened: tuple[Utterance, ...]
    if record["schema"] == 1:
        # Schema 1 stored every utterance under its own key.
        own_below, opened = next_seq, ()
    else:
        own_below = int(record.get("own_below", 1))
        opened = tuple(Utterance.from_record(r) for r in record["open"])
    return Meta(
        token=str(record["token"]),
        next_seq=next_seq,
        last_turn=int(record["last_turn"]),
        buffer=SeqRuns(tuple(r) for r in record["buffer"]),
        pending=SeqRuns(tuple(r) for r in record["pending"]),
        archive=SeqRuns(tuple(r) for r in record["archive"]),
        settings=dict(record["settings"]),
        has_summary=bool(record["has_summary"]),
        own_below=own_below,
        open=opened,
    )


def encode_utterance(utterance: Utterance) -> str:
    return _dump({"schema": SCHEMA_VERSION, **utterance.to_record()})


def decode_utterance(text: Any, conversation_id: str, seq: int) -> Utterance:
    return _parse(
        text, f"utterance {seq} of conversation {conversation_id!r}", Utterance.from_record
    )


def encode_in_block(utterance: Utterance) -> str:
    """One utterance inside a block or the meta's open block (the container names the schema)."""
    return _dump(utterance.to_record())


def encode_block(records: Iterable[str]) -> str:
    """A block record from utterances encoded with encode_in_block."""
    return '{"schema":' + str(SCHEMA_VERSION) + ',"utterances":[' + ",".join(records) + "]}"


def encode_own(record: str) -> str:
    """``encode_utterance`` of an utterance given as the JSON object of its ``to_record()``."""
    return '{"schema":' + str(SCHEMA_VERSION) + "," + record[1:]


def decode_block(text: Any, conversation_id: str, block: int) -> dict[int, Utterance]:
    """The utterances of a block record by seq."""
    return _parse(
        text,
        f"block {block} of conversation {conversation_id!r}",
        lambda record: {u.seq: u for u in map(Utterance.from_record, record["utterances"])},
    )


# A block as encode_block writes it: then each utterance's text is cut out
# of the record as it is (split_block), not decoded and encoded again.
_BLOCK_HEAD = re.compile(r'\{"schema":(\d+),"utterances":\[')
# Where each utterance of a block starts. Every utterance record chd writes
# starts with its seq and holds no object or list (to_record's fields, or an
# import line checked to be so), and a JSON string cannot hold a bare '"':
# so in a block this matches exactly at the start of each utterance.
_RECORD_START = '{"seq":'
_RECORD_KEYS = frozenset(
    ("seq", "speaker", "text", "turn_number", "timestamp", "tokens", "conversation_id", "important")
)
# A record stored with an idempotency key (issue 29) has it last, as a ninth key.
_KEYED_RECORD_KEYS = _RECORD_KEYS | {"idempotency_key"}
_scan = json.JSONDecoder().raw_decode


def split_block(text: Any, conversation_id: str, block: int) -> dict[int, tuple[int, bool, str]]:
    """The utterances of a block record by seq, as (seq, text longer than LONG_TEXT, its JSON object).

    Each object is cut out of the record as it is, by where each seq starts
    (one str.split, no JSON decoding: that was most of an export's time). A
    block that does not split into ascending seqs of this block is read with
    the JSON decoder instead.
    """
    head = _BLOCK_HEAD.match(text) if isinstance(text, str) else None
    if head is None or int(head.group(1)) > SCHEMA_VERSION or not text.endswith("]}"):
        return _split_decoded(text, conversation_id, block)
    body = text[head.end() : -2]
    if not body:
        return {}
    high = (block + 1) * BLOCK_SIZE
    previous = block * BLOCK_SIZE
    out: dict[int, tuple[int, bool, str]] = {}
    if body.startswith(_RECORD_START):
        for piece in body[len(_RECORD_START) :].split("," + _RECORD_START):
            digits = piece[: piece.find(",")]
            if not (digits.isascii() and digits.isdigit()) or not previous < int(digits) <= high:
                break
            previous = int(digits)
            out[previous] = (previous, False, _RECORD_START + piece)
        else:
            return out
    return _split_scanned(text, conversation_id, block, head.end())


def _split_scanned(
    text: str, conversation_id: str, block: int, i: int
) -> dict[int, tuple[int, bool, str]]:
    """split_block's objects found by the JSON decoder, each cut out as it is when it is a plain record."""
    out: dict[int, tuple[int, bool, str]] = {}
    try:
        if text[i] == "]":
            return out if text[i + 1 :] == "}" else _split_decoded(text, conversation_id, block)
        while True:
            record, end = _scan(text, i)
            if not (
                type(record) is dict
                and (record.keys() == _RECORD_KEYS or record.keys() == _KEYED_RECORD_KEYS)
                and type(record["seq"]) is int
                and type(record["text"]) is str
            ):
                return _split_decoded(text, conversation_id, block)
            out[record["seq"]] = (record["seq"], len(record["text"]) > LONG_TEXT, text[i:end])
            if text[end] == "]":
                break
            if text[end] != ",":
                return _split_decoded(text, conversation_id, block)
            i = end + 1
    except (ValueError, IndexError):  # JSONDecodeError is a ValueError
        return _split_decoded(text, conversation_id, block)
    return out if text[end + 1 :] == "}" else _split_decoded(text, conversation_id, block)


def _split_decoded(text: Any, conversation_id: str, block: int) -> dict[int, tuple[int, bool, str]]:
    return {
        seq: (seq, len(u.text) > LONG_TEXT, _dump(u.to_record()))
        for seq, u in decode_block(text, conversation_id, block).items()
    }


def encode_summary(summary: Summary) -> str:
    return _dump({"schema": SCHEMA_VERSION, **summary.to_record()})


def decode_summary(text: Any, conversation_id: str) -> Summary:
    return _parse(text, f"the summary of conversation {conversation_id!r}", Summary.from_record)


def _parse(text: Any, what: str, build: Callable[[dict[str, Any]], T]) -> T:
    record = _load(text, what)
    try:
        return build(record)
    except (KeyError, TypeError, ValueError) as exc:
        raise StorageError(f"{what} is malformed: {exc!r}") from None
