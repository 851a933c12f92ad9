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

Both directions stream (issue 17): ``read_export`` yields one checked
conversation at a time, ``import_encoded`` writes them a batch of
conversations per storage transaction, and ``export_lines`` reads one
conversation at a time, so memory does not grow with the file.

Both directions move each utterance as the JSON text of its record
(chd.backends.encoded): an export line is the stored record with
``"record"`` and ``"in"`` put in front, and a checked import line is stored
as that record again, neither decoded into an ``Utterance`` nor encoded
anew. That is what reaches 100,000 utterances a second (issue 17); every
line is still checked field by field, once.

Reading an export, a file is read in blocks of whole chunks of lines, and
the utterance lines of one conversation and one list that chd export wrote
are checked and taken apart a run at a time (_RUN, _run): a few calls per
run, not a dozen per line. Any other line is read on its own as before, and
a run that does not belong where it is is read again line by line, so each
error names the same line it did.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, TextIO

from chd.backends.base import Backend, Change, ConversationState, transact_many
from chd.backends.encoded import (
    EncodedConversation,
    EncodedUtterance,
    encode_record,
    replacing_change,
)
from chd.backends.records import LONG_TEXT
from chd.core.errors import InvalidRequest
from chd.core.language.fields import as_bool, as_int, as_speaker, as_str
from chd.core.memory.configure import effective_settings
from chd.core.settings import Settings
from chd.core.utterance import SPEAKERS, Summary, Utterance

__all__ = [
    "EXPORT_FORMAT",
    "ImportCounts",
    "export_lines",
    "export_text",
    "read_export",
    "iter_states",
    "check_lines",
    "parse_lines",
    "import_states",
    "import_stream",
    "import_encoded",
    "check_existing",
]

EXPORT_FORMAT = 1
_WHERE = ("buffer", "pending", "archive")
# What an utterance line starts with, by where it is: the stored record follows.
_PREFIXES = {where: f'{{"record":"utterance","in":"{where}",' for where in _WHERE}


def read_encoded(backend: Backend, conversation_id: str) -> EncodedConversation:
    """The conversation as JSON texts: the backend's own reader if it has one (chd.backends.encoded)."""
    own = getattr(type(backend), "read_encoded", None)
    if own is not None:
        return own(backend, conversation_id)  # type: ignore[no-any-return]
    return EncodedConversation.from_state(backend.read(conversation_id))


def _conversation_lines(conversation: EncodedConversation) -> Iterator[str]:
    yield _dump(
        {
            "record": "conversation",
            "format": EXPORT_FORMAT,
            "conversation_id": conversation.conversation_id,
            "next_seq": conversation.next_seq,
            "last_turn": conversation.last_turn,
            "settings": conversation.settings,
            "summary": conversation.summary.to_record(),
        }
    )
    for where, items in zip(
        _WHERE, (conversation.buffer, conversation.pending, conversation.archive)
    ):
        prefix = _PREFIXES[where]
        for item in items:
            yield prefix + item[2][1:]


def export_lines(backend: Backend, conversation_ids: Iterable[str]) -> Iterator[str]:
    """JSON Lines for each conversation, read as one snapshot per conversation."""
    for conversation_id in conversation_ids:
        yield from _conversation_lines(read_encoded(backend, conversation_id))


def export_text(backend: Backend, conversation_ids: Iterable[str]) -> Iterator[tuple[str, int]]:
    """Per conversation, its lines as one text (each ending in a newline) and how many utterances it holds."""
    for conversation_id in conversation_ids:
        conversation = read_encoded(backend, conversation_id)
        yield "\n".join(_conversation_lines(conversation)) + "\n", conversation.size


# One encoder for every line: json.dumps with options builds a new encoder
# on each call, a third of the cost of a short line.
_dump = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

# Lines per chunk: a chunk's utterance lines are matched a run at a time
# (_RUN) and its other lines decoded with one json.loads (_json), before
# any of its lines is checked further (so a file or its lines, read either
# way, report the same first error).
_CHUNK = 512
# Characters a file is read by: whole chunks of lines come out of these
# blocks as one text each, with no string made per line.
_READ = 1 << 20
# A list's chunk of longer lines is taken a line at a time, not joined into one text.
_CHUNK_CHARS = 1 << 22


def _chunks(lines: Iterable[str]) -> Iterator[list[tuple[int, str, Any]]]:
    """``(line number, line, what it holds)`` of the non-blank lines, a chunk at a time.

    What a line holds is a _Run (the line and the lines after it that _RUN
    took; its line is then "", not needed), else a match of _EXPORTED (an
    utterance line as chd export writes it), else its decoded JSON. A file
    (anything with ``read``) is read in blocks, not line by line.

    Raises:
        InvalidRequest: naming the first line that is not JSON, or that
            holds a string that is not valid Unicode.
    """
    first = 1
    if hasattr(lines, "read"):
        for text in _file_chunks(lines):  # type: ignore[arg-type]
            if not text.isascii():
                _refuse_undecoded(text, first)
            entries, count = _text_entries(text, first)
            yield entries
            first += count
        return
    source = iter(lines)
    while True:
        chunk = list(itertools.islice(source, _CHUNK))
        if not chunk:
            return
        text = "".join(chunk)
        # The text's lines are the chunk's if each ends in its one newline
        # (as a file's lines do; a list's may not).
        if (
            len(text) <= _CHUNK_CHARS
            and text.count("\n") == len(chunk)
            and all(map(str.endswith, chunk, itertools.repeat("\n")))
        ):
            yield _text_entries(text, first)[0]
        else:
            yield _line_entries(chunk, first)
        first += len(chunk)


# What a byte that is not UTF-8 becomes in a file opened with
# errors="surrogateescape" (chd import's): no UTF-8 text decodes to these.
_UNDECODED = re.compile("[\udc80-\udcff]")


def _refuse_undecoded(text: str, first: int) -> None:
    """Refuse ``text`` (lines from line ``first`` on) if it holds a byte that was not UTF-8.

    Raises:
        InvalidRequest: naming the line, rather than a UnicodeDecodeError
            from deep in the read, with no line, ending the import.
    """
    bad = _UNDECODED.search(text)
    if bad is not None:
        line = first + text.count("\n", 0, bad.start())
        byte = ord(bad.group()) - 0xDC00
        raise InvalidRequest(
            f"line {line}: not UTF-8 text (byte 0x{byte:02x}); export files are UTF-8"
        )


@functools.cache
def _lines_of(count: int) -> re.Pattern[str]:
    """A pattern matching ``count`` whole lines, each through its newline (possessive: linear)."""
    return re.compile(rf"(?:[^\n]*+\n){{{count}}}")


def _file_chunks(source: TextIO) -> Iterator[str]:
    """The text of ``source``, _CHUNK lines at a time (the last chunk may end without a newline).

    Read in blocks of _READ characters: a file's lines one by one cost a
    string each, then joined again. Linear: each block is searched once and
    each chunk joined once, however long its lines.
    """
    pieces: list[str] = []  # the current chunk's text read so far
    lines = 0  # the newlines in pieces
    while True:
        block = source.read(_READ)
        if not block:
            if pieces:
                yield "".join(pieces)
            return
        taken = 0  # where in block the current chunk's text starts
        # The end of the chunk's last line, found in C: a step per chunk, not per line.
        while (found := _lines_of(_CHUNK - lines).match(block, taken)) is not None:
            pieces.append(found.group())
            yield "".join(pieces)
            pieces, lines, taken = [], 0, found.end()
        if taken < len(block):
            pieces.append(block[taken:])
            lines += block.count("\n", taken)


def _text_entries(text: str, first: int) -> tuple[list[tuple[int, str, Any]], int]:
    """_chunks' entries of the lines of ``text``, the first being line ``first``, and how many lines it holds."""
    entries: list[tuple[int, str, Any]] = []
    run, find, pos, number, end = _RUN.match, text.find, 0, first, len(text)
    while pos < end:
        if text[pos] == "\n":  # an empty line holds nothing
            number += 1
            pos += 1
            continue
        found = run(text, pos)
        if found is not None:
            taken = _run(found)
            entries.append((number, "", taken))
            number += len(taken.items)
            pos = found.end()
        else:
            stop = find("\n", pos) + 1 or end
            entries.append((number, text[pos:stop], None))
            number += 1
            pos = stop
    return _singles(entries), number - first


def _line_entries(lines: list[str], first: int) -> list[tuple[int, str, Any]]:
    """_chunks' entries of ``lines``, the first being line ``first``, each line on its own (no _Run)."""
    return _singles([(first + index, line, None) for index, line in enumerate(lines)])


def _singles(entries: list[tuple[int, str, Any]]) -> list[tuple[int, str, Any]]:
    """``entries`` with what each line not in a run holds filled in, and blank lines left out."""
    match = _EXPORTED.fullmatch
    rest, blank = [], []
    for i, (number, line, held) in enumerate(entries):
        if held is None:
            found = match(line)
            if found is not None:
                entries[i] = (number, line, found)
            elif line.strip():
                rest.append(i)
            else:
                blank.append(i)
    if rest:
        for i, record in zip(rest, _json([entries[i][:2] for i in rest])):
            entries[i] = (entries[i][0], entries[i][1], record)
    if blank:  # a blank line holds nothing
        skip = set(blank)
        entries = [entry for i, entry in enumerate(entries) if i not in skip]
    return entries


# Not anchored with ^ in MULTILINE mode: the engine would try every
# position; the literal start is searched for instead (4x less).
_SEQS = re.compile(r'\{"seq":([0-9]++)').findall


class _Run:
    """Consecutive utterance lines of one conversation and one list, as chd export writes them (_RUN)."""

    __slots__ = ("where", "conversation_id", "items", "found")

    def __init__(
        self, where: str, conversation_id: str, items: list[EncodedUtterance], found: re.Match[str]
    ) -> None:
        self.where = where
        self.conversation_id = conversation_id
        self.items = items
        self.found = found  # the lines, for reading them one at a time after all

    def lines(self) -> list[str]:
        return [line + "\n" for line in self.found.group()[:-1].split("\n")]


def _run(found: re.Match[str]) -> _Run:
    """The utterances of the lines ``found`` took, each its line without ``"record"`` and ``"in"``.

    A few calls for the whole run, not a dozen per line.
    """
    where = found["where"]
    start, end = found.span()
    # Each record is its line with "{" for the prefix, which is nowhere
    # else (it holds '"', which no string here does); the last newline ends the text.
    text = found.string[start : end - 1].replace(_PREFIXES[where], "{")
    records = text.split("\n")
    # A record starts with {"seq": and its digits, and nothing else in it can
    # ({"seq": holds a bare '"', which no string here does): one findall for
    # the run, paired in C.
    seqs = _SEQS(text)
    if len(seqs) == len(records):
        items = list(zip(map(int, seqs), itertools.repeat(False), records))
    else:  # never, by the pattern: the digits of each record, a call each
        items = [(int(record[7 : record.index(",", 8)]), False, record) for record in records]
    if (
        max(map(len, records)) > LONG_TEXT
    ):  # else no text is that long: it is shorter than its record
        items = [
            (seq, len(record) > LONG_TEXT and len(json.loads(record)["text"]) > LONG_TEXT, record)
            for seq, _, record in items
        ]
    return _Run(where, found["cid"], items, found)


def _json(chunk: list[tuple[int, str]]) -> list[Any]:
    """The decoded JSON of each line that is not blank (one json.loads for the chunk).

    Raises:
        InvalidRequest: naming the first line that is not JSON, or that
            holds a string that is not valid Unicode.
    """
    chunk = [(number, line) for number, line in chunk if line.strip()]
    if not chunk:
        return []
    joined = "[" + ",".join(line for _, line in chunk) + "]"
    records: list[Any] | None
    try:
        records = json.loads(joined)
    except json.JSONDecodeError:
        records = None
    # A line holding two values ("1, 2") joins into a longer array: decode
    # such a chunk line by line, which also names the line that is wrong.
    if records is None or len(records) != len(chunk):
        records = []
        for number, line in chunk:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InvalidRequest(f"line {number}: not JSON ({exc.msg})") from None
    if "\\u" in joined:
        for (number, line), record in zip(chunk, records):
            if "\\u" in line:
                _check_unicode(number, record)
    return records


def _check_unicode(number: int, record: Any) -> None:
    """Refuse a lone surrogate escape (``\\ud800``): JSON lets it through, but no UTF-8 can store it."""
    try:
        _dump(record).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(
            f"line {number}: holds a \\ud800-\\udfff escape without its pair, which is not a character"
        ) from None


@dataclass
class _Draft:
    line: int
    header: dict[str, Any]
    lists: dict[str, list[EncodedUtterance]] = field(
        default_factory=lambda: {where: [] for where in _WHERE}
    )


def read_export(lines: Iterable[str]) -> Iterator[EncodedConversation]:
    """The conversations in an export, one at a time, each checked completely.

    Only the conversation being read is held, and the ids seen (to refuse
    one that appears twice).

    Raises:
        InvalidRequest: naming the line and what is wrong with it.
    """
    draft: _Draft | None = None
    draft_id: Any = None
    seen: set[str] = set()
    fields, types, prefixes, speakers = _LINE_FIELDS, _LINE_TYPES, _PREFIXES, _SPEAKERS
    match_type, run_type = re.Match, _Run
    long_text, starts = LONG_TEXT, {where: len(prefix) for where, prefix in _PREFIXES.items()}
    for chunk in _chunks(lines):
        at = 0
        while at < len(chunk):
            number, line, record = chunk[at]
            at += 1
            if type(record) is run_type:
                if record.conversation_id == draft_id and draft is not None:
                    draft.lists[record.where] += record.items
                    continue
                # Not this conversation's, or before any: its lines are read
                # one at a time like any other, which names what is wrong.
                chunk[at:at] = _line_entries(record.lines(), number)
                continue
            if type(record) is match_type:
                # An utterance line as chd export writes it: what the pattern
                # left to check is that it belongs here and has a timestamp.
                where, seq, text, _, timestamp, _, cid = record.groups()
                if cid == draft_id and timestamp.strip() and draft is not None:
                    long = len(text) > long_text and (
                        "\\" not in text or len(json.loads(f'"{text}"')) > long_text
                    )
                    draft.lists[where].append(
                        (int(seq), long, "{" + line[starts[where] :].rstrip(_BLANKS))
                    )
                    continue
                record = json.loads(line)  # for the checks below, which name what is wrong
            # The usual line, checked without a call per field: the ten
            # fields of an export line, each of its type and in its range.
            # Anything else takes _utterance_line, which names what is wrong.
            if draft is not None and type(record) is dict and len(record) == 10:
                try:
                    values = fields(record)
                except KeyError:
                    values = None
                if values is not None and tuple(map(type, values)) == types:
                    kind, where, seq, speaker, text, turn, timestamp, tokens, cid, _ = values
                    if (
                        kind == "utterance"
                        and where in prefixes
                        and speaker in speakers
                        and 1 <= seq <= _MAX_INT
                        and 0 <= turn <= _MAX_INT
                        and 0 <= tokens <= _MAX_INT
                        and cid == draft_id
                        and cid.strip()
                        and timestamp.strip()
                        and line.startswith(prefixes[where])
                    ):
                        rest = line[len(prefixes[where]) :].rstrip(_BLANKS)
                        if rest.startswith('"seq":') and _plain(rest):
                            draft.lists[where].append((seq, len(text) > LONG_TEXT, "{" + rest))
                            continue
            if draft is not None and type(record) is dict and record.get("record") == "utterance":
                try:
                    where, item, conversation_id = _utterance_line(record)
                except InvalidRequest as exc:
                    raise InvalidRequest(f"line {number}: {exc}") from None
                if conversation_id != draft_id:
                    raise InvalidRequest(
                        f"line {number}: utterance of conversation {conversation_id!r} inside "
                        f"conversation {draft_id!r}"
                    )
                draft.lists[where].append(item)
                continue
            try:
                started = _take(record, draft)
            except InvalidRequest as exc:
                raise InvalidRequest(f"line {number}: {exc}") from None
            if draft is not None:
                yield _finished(draft, seen)
            draft = _Draft(number, started)
            draft_id = started.get("conversation_id")
    if draft is not None:
        yield _finished(draft, seen)


def iter_states(lines: Iterable[str]) -> Iterator[ConversationState]:
    """The conversations in an export as states, one at a time, each checked completely.

    Raises:
        InvalidRequest: naming the line and what is wrong with it.
    """
    return (conversation.to_state() for conversation in read_export(lines))


def check_lines(lines: Iterable[str]) -> list[str]:
    """The ids of the conversations in an export, after checking all of it (nothing else is kept)."""
    return [conversation.conversation_id for conversation in read_export(lines)]


def parse_lines(lines: Iterable[str]) -> list[ConversationState]:
    """The conversations in an export, checked completely (all held in memory).

    Raises:
        InvalidRequest: naming the line and what is wrong with it.
    """
    return list(iter_states(lines))


def _finished(draft: _Draft, seen: set[str]) -> EncodedConversation:
    try:
        conversation = _conversation(draft)
    except InvalidRequest as exc:
        raise InvalidRequest(f"conversation starting at line {draft.line}: {exc}") from None
    if conversation.conversation_id in seen:
        raise InvalidRequest(
            f"line {draft.line}: conversation {conversation.conversation_id!r} appears twice"
        )
    seen.add(conversation.conversation_id)
    return conversation


def _take(record: Any, draft: _Draft | None) -> dict[str, Any]:
    """The header of the conversation ``record`` starts; raises for any other line (read_export takes utterances)."""
    if type(record) is not dict:
        raise InvalidRequest("each line must be a JSON object")
    kind = record.get("record")
    if kind == "utterance":
        raise InvalidRequest("an utterance before any conversation line")
    if kind == "conversation":
        version = as_int("format", record.get("format"), minimum=1)
        if version > EXPORT_FORMAT:
            raise InvalidRequest(
                f"written by a newer chd (export format {version}; this chd reads {EXPORT_FORMAT})"
            )
        return record
    raise InvalidRequest(f"'record' must be conversation or utterance, got {kind!r}")


_SPEAKERS = frozenset(SPEAKERS)
_MAX_INT = 2**53
_BLANKS = " \t\r\n"  # JSON's whitespace
# The patterns below repeat possessively (*+): each piece can end in one
# place only, so giving characters back could never find another match,
# and a possessive repeat keeps no state for it. Matching a run of lines
# (_RUN) costs 3,800 machine instructions a line so, 10,600 without.
_CHARS = r'[^"\\\x00-\x1f]*+'  # string characters: no quote, backslash or control character
_TEXT = r'"' + _CHARS + r'(?:\\["\\/bfnrt]' + _CHARS + r')*+"'  # a JSON string with no \\u escape
# A string with no escape, not blank: a character that is not whitespace (str.strip's, which is \s's).
_FILLED = r'"[^\S\x00-\x1f]*+[^\s"\\\x00-\x1f]' + _CHARS + '"'
# Up to 15 digits: below 2**53 whatever they are (a longer number takes the checking path).
_COUNT, _POSITIVE = r"(?:0|[1-9][0-9]{0,14}+)", r"[1-9][0-9]{0,14}+"
# An utterance line exactly as chd export writes it, with no \\u escape:
# matching it checks the JSON syntax and most of each field without
# decoding the line (decoding was half of an import's time). The groups:
# in, seq, speaker, text, turn_number, timestamp, tokens, conversation_id.
_EXPORTED = re.compile(
    r'\{"record":"utterance","in":"(buffer|pending|archive)","seq":('
    + _POSITIVE
    + r'),"speaker":"(?:user|assistant|system)","text":"('
    + _TEXT[1:-1]
    + r')","turn_number":('
    + _COUNT
    + r'),"timestamp":"('
    + _CHARS
    + r')","tokens":('
    + _COUNT
    + r'),"conversation_id":"('
    + _CHARS
    + r')","important":(?:true|false)\}[ \t\r\n]*+'
)


def _run_line(where: str, conversation_id: str) -> str:
    """_EXPORTED's line with a timestamp that is not blank, ending in "}" and its newline; no groups."""
    return (
        r'\{"record":"utterance","in":"'
        + where
        + r'","seq":'
        + _POSITIVE
        + r',"speaker":"(?:user|assistant|system)","text":'
        + _TEXT
        + r',"turn_number":'
        + _COUNT
        + r',"timestamp":'
        + _FILLED
        + r',"tokens":'
        + _COUNT
        + r',"conversation_id":"'
        + conversation_id
        + r'","important":(?:true|false)\}\n'
    )


# A run of utterance lines as chd export writes them: consecutive lines of
# one list ("in") and one conversation, the later ones repeating the first
# one's "in" and conversation id. One match takes the whole run, so a run
# costs a few calls whatever its length: matching and taking apart each
# line on its own was most of an import's time. Linear: the lines are the
# same unambiguous pieces as _EXPORTED's, and a line that fails ends the run.
_RUN = re.compile(
    _run_line("(?P<where>buffer|pending|archive)", "(?P<cid>" + _CHARS + ")")
    + "(?:"
    + _run_line("(?P=where)", "(?P=cid)")
    + ")*+"
)
# The fields of an utterance line as chd export writes them, and their types.
_LINE_FIELDS = operator.itemgetter(
    "record",
    "in",
    "seq",
    "speaker",
    "text",
    "turn_number",
    "timestamp",
    "tokens",
    "conversation_id",
    "important",
)
_LINE_TYPES = (str, str, int, str, str, int, str, int, str, bool)
_SEQ = operator.itemgetter(0)


def _utterance_line(record: dict[str, Any]) -> tuple[str, EncodedUtterance, str]:
    """Where the utterance of ``record`` goes, the utterance encoded, and its conversation.

    The line read_export's usual path did not take: each field is checked
    on its own, so the error names it, and the record is encoded anew.

    Raises:
        InvalidRequest: naming the field that is wrong.
    """
    where = record.get("in")
    if where not in _PREFIXES:
        raise InvalidRequest(f"'in' must be one of {', '.join(_WHERE)}, got {where!r}")
    utterance = _utterance(record)
    return where, encode_record(utterance), utterance.conversation_id


def _plain(rest: str) -> bool:
    """No '{', '[', '"in"' or '"record"' anywhere (in a string too: then the record is encoded anew)."""
    return "{" not in rest and "[" not in rest and '"in"' not in rest and '"record"' not in rest


def _utterance(record: dict[str, Any]) -> Utterance:
    """The utterance of ``record``, each field checked and named when wrong."""
    return Utterance(
        conversation_id=as_str("conversation_id", record.get("conversation_id")),
        seq=as_int("seq", record.get("seq"), minimum=1),
        speaker=as_speaker("speaker", record.get("speaker")),
        text=as_str("text", record.get("text"), allow_empty=True),
        turn_number=as_int("turn_number", record.get("turn_number")),
        timestamp=as_str("timestamp", record.get("timestamp")),
        tokens=as_int("tokens", record.get("tokens")),
        important=as_bool("important", record.get("important", False)),
        key=as_str("idempotency_key", record.get("idempotency_key", ""), allow_empty=True),
    )


_SEGMENT_NUMBERS = ("tokens", "seq_from", "seq_to", "turn_from", "turn_to")
_SEGMENT_TEXTS = ("text", "made_by", "error")
_NUMBERS_OF = operator.itemgetter(*_SEGMENT_NUMBERS)
_INTS = (int,) * len(_SEGMENT_NUMBERS)
_NO_KEYS: list[str] = []  # never changed


def _summary(record: Any) -> Summary:
    """The summary, each field checked first so a bad one is named, not a KeyError."""
    if not isinstance(record, dict) or not isinstance(record.get("segments"), list):
        raise InvalidRequest("summary must be an object with a list of segments")
    for i, segment in enumerate(record["segments"]):
        if not _plain_segment(segment):
            _check_segment(i, segment)
    as_int("summary through_seq", record.get("through_seq"))
    as_int("summary tokens", record.get("tokens"))
    held = record.get("held", [])
    if not isinstance(held, list) or not all(isinstance(u, dict) for u in held):
        raise InvalidRequest("summary held must be a list of utterance objects")
    for name in ("held_dropped", "held_dropped_through"):
        as_int(f"summary {name}", record.get(name, 0))
    if not held:
        return Summary.from_record(record)
    # The originals kept for a Claude rewrite (issue 13), checked like any utterance.
    return replace(
        Summary.from_record({**record, "held": []}), held=tuple(_utterance(u) for u in held)
    )


def _plain_segment(segment: Any) -> bool:
    """True for a segment as chd writes it, which _check_segment passes: told without a call per field.

    A summary's checks, a call per field, were a tenth of reading an export
    of 100-utterance conversations.
    """
    if type(segment) is not dict:
        return False
    try:
        numbers = _NUMBERS_OF(segment)
    except KeyError:
        return False
    keys = segment.get("keys", _NO_KEYS)
    return (
        tuple(map(type, numbers)) == _INTS
        and min(numbers) >= 0
        and max(numbers) <= _MAX_INT
        and type(segment.get("text")) is str
        and type(segment.get("made_by", "")) is str
        and type(segment.get("error", "")) is str
        and type(keys) is list
        and all(map(isinstance, keys, itertools.repeat(str)))
    )


def _check_segment(i: int, segment: Any) -> None:
    """Raise naming what is wrong with summary segment ``i``, if anything."""
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


_DEFAULT_SETTINGS = Settings()


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
        effective_settings(_DEFAULT_SETTINGS, record)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"settings: {exc}") from None
    return record


def _conversation(draft: _Draft) -> EncodedConversation:
    header = draft.header
    settings = _settings(header.get("settings", {}))
    conversation = EncodedConversation(
        conversation_id=as_str("conversation_id", header.get("conversation_id")),
        next_seq=as_int("next_seq", header.get("next_seq"), minimum=1),
        last_turn=as_int("last_turn", header.get("last_turn")),
        settings=settings,
        summary=_summary(header["summary"]) if "summary" in header else Summary(),
        buffer=draft.lists["buffer"],
        pending=draft.lists["pending"],
        archive=draft.lists["archive"],
    )
    seen: set[int] = set()
    for where, items in draft.lists.items():
        seqs = list(map(_SEQ, items))
        if not all(map(operator.lt, seqs, seqs[1:])):
            raise InvalidRequest(f"the {where} utterances must have ascending, distinct seqs")
        if seen and seqs and not seen.isdisjoint(seqs):
            raise InvalidRequest(
                f"seq {min(seen.intersection(seqs))} appears in more than one of buffer, pending and archive"
            )
        seen.update(seqs)
    highest = max(seen, default=0)
    if conversation.next_seq <= highest:
        raise InvalidRequest(
            f"next_seq {conversation.next_seq} must be above the highest seq {highest}"
        )
    return conversation


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
    on_batch: Callable[[list[EncodedConversation], ImportCounts], None] | None = None,
) -> ImportCounts:
    """``import_encoded`` of conversations given as states."""
    return import_encoded(backend, map(EncodedConversation.from_state, states), replace, on_batch)


def import_encoded(
    backend: Backend,
    conversations: Iterable[EncodedConversation],
    replace: bool = False,
    on_batch: Callable[[list[EncodedConversation], ImportCounts], None] | None = None,
) -> ImportCounts:
    """Write each conversation as it comes, a batch of them per storage transaction.

    ``conversations`` is consumed once; only the current batch is held. Each
    conversation is written whole or not at all; a conversation that holds
    data when ``replace`` is False stops the import there, with the batches
    before it written (check them first with ``check_existing``).

    Raises:
        InvalidRequest: A conversation already holds data and ``replace`` is False.
    """
    counts = ImportCounts()
    batch: list[EncodedConversation] = []
    size = 0
    bulk = getattr(type(backend), "write_encoded", None)

    def flush() -> None:
        if bulk is not None:
            bulk(backend, batch, replace)
        else:
            calls = [(c.conversation_id, _replacing(c.to_state(), replace)) for c in batch]
            for outcome in transact_many(backend, calls):
                if outcome.error is not None:
                    raise outcome.error
        counts.conversations += len(batch)
        counts.utterances += size
        if on_batch is not None:
            on_batch(batch, counts)

    for conversation in conversations:
        batch.append(conversation)
        size += conversation.size
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


def _replacing(
    imported: ConversationState, replace: bool
) -> Callable[[ConversationState], tuple[Change, None]]:
    def decide(current: ConversationState) -> tuple[Change, None]:
        if not current.is_empty and not replace:
            raise InvalidRequest(
                f"conversation {current.conversation_id!r} already holds data; "
                "use --replace to overwrite it"
            )
        return replacing_change(current, imported), None

    return decide
