"""Function-call phrasings: ``get_last_n(5)``, ``summarize(token_limit=100)``, ``remove_before_turn(4)``.

The spec names ``get_last_n(5)`` and ``get_summary()``; every operation has
such a spelling (daemon/core/language/guide.py's ``CALLS``). The arguments
are read by a small scanner, one pass over the text and no ``eval``: numbers,
quoted strings with backslash escapes, true/false, null, bare words and
[lists]. A call is understood whole or refused with what is wrong, never
guessed: there is no confidence between the two.
"""

from __future__ import annotations

import json
import re
from typing import Any

from chd.core.errors import InvalidRequest, quote
from chd.core.language.grammar.call_names import call_for_name, canonical_key
from chd.core.language.guide import CALLS, MAX_INSTRUCTION_CHARS, CallForm
from chd.core.language.intents import field_sources
from chd.core.language.numbers import digits_value

__all__ = ["read_call", "read_json", "read_sql_insert", "CALL_NAMES", "MAX_LIST_DEPTH"]

CALL_NAMES: dict[str, CallForm] = {call.name: call for call in CALLS}
_STORE_ARGUMENTS = 4
# Lists are read by recursion: 990 nested brackets reached Python's recursion
# limit and answered INTERNAL (issue 28). No call takes more than a list of
# lists; this leaves room and stays far below the limit.
MAX_LIST_DEPTH = 16

# A name glued to its parenthesis and a closing one at the end: "summarize
# (briefly) the chat" and "Summarize the chat (briefly)" stay sentences.
_CALL = re.compile(r"(?P<name>(?:[A-Za-z_][A-Za-z0-9_]*\.){0,3}[A-Za-z_][A-Za-z0-9_]*)\(")
_KEYWORD = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)")
_BARE = re.compile(r"[^\s,()\[\]=\"']+")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_CONSTANTS: dict[str, Any] = {"true": True, "false": False, "null": None, "none": None}
_QUOTES = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}
# A string's body: anything but a backslash or the closing quote, or an
# escape. Possessive: the engine never gives back what it took, so no input
# makes it backtrack.
_BODIES = {
    closing: re.compile(r"(?:[^\\" + re.escape(closing) + r"]++|\\.)*+", re.DOTALL)
    for closing in _QUOTES.values()
}
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)


def _unescape(text: str) -> str:
    pieces = _ESCAPED.split(text)  # text, escaped char, text, ...
    pieces[1::2] = [_ESCAPES.get(char, char) for char in pieces[1::2]]
    return "".join(pieces)


class _Scanner:
    """Reads the argument list of one call, left to right, once."""

    def __init__(self, text: str, start: int, end: int, name: str, most: int) -> None:
        self.text, self.pos, self.end, self.name, self.most = text, start, end, name, most
        self.depth = 0

    def fail(self, why: str) -> InvalidRequest:
        return InvalidRequest(f"could not read the arguments of {self.name}(): {why}")

    def skip_spaces(self) -> None:
        while self.pos < self.end and self.text[self.pos].isspace():
            self.pos += 1

    def arguments(self) -> tuple[list[Any], list[tuple[str, Any]]]:
        positional: list[Any] = []
        keywords: list[tuple[str, Any]] = []
        self.skip_spaces()
        while self.pos < self.end:
            if len(positional) + len(keywords) >= self.most:
                raise self.fail(f"more than {self.most} arguments")
            keyword = _KEYWORD.match(self.text, self.pos, self.end)
            if keyword:
                self.pos = keyword.end()
                self.skip_spaces()
                keywords.append((keyword.group("key"), self.value()))
            elif keywords:
                raise self.fail("a positional argument after a keyword argument")
            else:
                positional.append(self.value())
            self.skip_spaces()
            if self.pos < self.end:
                if self.text[self.pos] != ",":
                    raise self.fail(f"expected ',' at {quote(self.text[self.pos : self.pos + 20])}")
                self.pos += 1
                self.skip_spaces()
        return positional, keywords

    def value(self) -> Any:
        if self.pos >= self.end:
            raise self.fail("a value is missing")
        char = self.text[self.pos]
        if char in _QUOTES:
            return self.string(_QUOTES[char])
        if char == "[":
            return self.list()
        token = _BARE.match(self.text, self.pos, self.end)
        if token is None:
            raise self.fail(f"unexpected {quote(char)}")
        self.pos = token.end()
        word = token.group(0)
        if word.lower() in _CONSTANTS:
            return _CONSTANTS[word.lower()]
        if _NUMBER.fullmatch(word):
            return _number(word)
        return word  # a bare word: set_eviction_policy(fifo)

    def string(self, closing: str) -> str:
        # One regex pass to the closing quote (escaped quotes skipped), then
        # one to undo the escapes: a stored utterance of a megabyte costs
        # milliseconds, never a Python loop per character.
        body = _BODIES[closing].match(self.text, self.pos + 1, self.end)
        if body is None or body.end() >= self.end:
            raise self.fail("a string is not closed")
        self.pos = body.end() + 1
        text = body.group(0)
        return _unescape(text) if "\\" in text else text

    def list(self) -> list[Any]:
        if self.depth >= MAX_LIST_DEPTH:
            raise self.fail(f"lists nested more than {MAX_LIST_DEPTH} deep")
        self.depth += 1
        self.pos += 1
        items: list[Any] = []
        self.skip_spaces()
        while self.pos < self.end and self.text[self.pos] != "]":
            items.append(self.value())
            self.skip_spaces()
            if self.pos < self.end and self.text[self.pos] == ",":
                self.pos += 1
                self.skip_spaces()
            elif self.pos < self.end and self.text[self.pos] != "]":
                raise self.fail("expected ',' or ']' in a list")
        if self.pos >= self.end:
            raise self.fail("a list is not closed")
        self.pos += 1
        self.depth -= 1
        return items


def _number(word: str) -> int | float:
    if "." in word:
        whole, _, fraction = word.lstrip("+-").partition(".")
        digits_value(whole)  # refuse absurd lengths before float() sees them
        return float(word) if set(fraction) != {"0"} else int(float(word))
    value = digits_value(word.lstrip("+-"))
    return -value if word.startswith("-") else value


# A JSON object, alone or after a verb ("Retrieve utterances {"turn_from": 3}"),
# read as the generic call of its operation (issue 25, agents and developers).
_JSON_OPERATION = {
    "store": "store", "add": "store", "add_utterance": "store", "save": "store", "persist": "store",
    "retrieve": "retrieve", "get": "retrieve", "read": "retrieve", "fetch": "retrieve", "find": "retrieve",
    "search": "retrieve", "show": "retrieve", "list": "retrieve",
    "remove": "remove", "delete": "remove", "summarize": "summarize", "summarise": "summarize",
    "configure": "configure", "set": "configure", "mark": "mark", "stats": "stats",
}  # fmt: skip
_JSON_KEYS = {
    "role": "speaker",
    "author": "speaker",
    "sender": "speaker",
    "content": "text",
    "utterance": "text",
}
_JSON_VERB = re.compile(
    r"^\s*(?P<verb>[A-Za-z_]+)(?:\s*(?:the|following|this|new|an?|utterances?|messages?|conversation|history|[.:]))"
    r"{0,5}\s*(?=\{)",
    re.IGNORECASE,
)


def read_json(text: str) -> tuple[str, dict[str, Any]] | None:
    """``{"op": "store", "speaker": "user", "text": "..."}`` or ``Retrieve utterances {"turn_from": 3}``.

    None when ``text`` holds no such object; InvalidRequest when its keys do
    not fit the operation (never guessed).
    """
    query = text.strip()
    if not query.endswith("}"):
        return None
    verb = _JSON_VERB.match(query)
    start = verb.end() if verb is not None else 0
    if query[start : start + 1] != "{":
        return None
    try:
        body = json.loads(query[start:])
    except (ValueError, RecursionError):  # not JSON, or nested past what the decoder reads
        return None
    if not isinstance(body, dict):
        return None
    named = next(
        (
            k
            for k in (
                "op",
                "operation",
                "action",
                "intent",
                "command",
                "task",
                "method",
                "function",
                "tool",
            )
            if k in body
        ),
        None,
    )
    word = (
        str(body.pop(named))
        if named is not None
        else (verb.group("verb") if verb is not None else "")
    )
    if named is not None and verb is not None:
        return None  # a verb and an op: which one is meant is a guess
    operation = _JSON_OPERATION.get(word.lower())
    generic = None if operation is not None else call_for_name(word)
    if generic is not None:
        operation = CALL_NAMES[generic].operation
    if operation is None:
        return None
    keywords = [
        (
            canonical_key(key, operation)
            if generic is not None
            else (_JSON_KEYS.get(key.lower()) or key),
            value,
        )
        for key, value in body.items()
    ]
    if (
        operation == "store"
        and named is None
        and (":" in query[:start] or "text" not in {k for k, _ in keywords})
    ):
        # "Add: {"a": 1}" stores that JSON as the utterance; fields only when
        # the object names the text and no colon made it the payload.
        return None
    if operation != "store":
        # {"turn": 3} is that turn, as turn=3 is in the developer syntax.
        keywords = [
            pair
            for key, value in keywords
            for pair in (
                [("turn_from", value), ("turn_to", value)]
                if key.lower() == "turn"
                else [(key, value)]
            )
        ]
    try:
        return operation, _fields(CALL_NAMES[operation], [], keywords)
    except InvalidRequest:
        return None  # the other rules read it, or refuse it with their own reason


def read_call(text: str) -> tuple[str, dict[str, Any]] | None:
    """The operation and fields of a function-call query, None if ``text`` is not one.

    Raises InvalidRequest for a call to an unknown function or with
    arguments that do not fit it.
    """
    query = text.strip().rstrip(";").rstrip()
    head = _CALL.match(query)
    if head is None or not query.endswith(")"):
        return None
    name = head.group("name")
    call = CALL_NAMES.get(name.lower())
    generic = None
    if call is None and (generic := call_for_name(name)) is not None:
        call = CALL_NAMES[generic]
    if call is None:
        if "_" not in name and "." not in name:
            return None  # "Remove(3)" may still be a sentence the rules read
        raise InvalidRequest(
            f"unknown function {quote(name, 40)}(); the functions are "
            + ", ".join(f"{c.name}()" for c in CALLS)
        )
    if call.operation != "store" and len(query) > MAX_INSTRUCTION_CHARS:
        # Only a store's text is payload; any other call is an instruction.
        raise InvalidRequest(
            f"{call.name}() is {len(query):,} characters; a call other than a store is read up to "
            f"{MAX_INSTRUCTION_CHARS:,} characters (a long topic goes in data.topic)"
        )
    # A store takes its text and a speaker; every other call is bounded by its length.
    most = _STORE_ARGUMENTS if call.operation == "store" else MAX_INSTRUCTION_CHARS
    scanner = _Scanner(query, head.end(), len(query) - 1, call.name, most)
    positional, keywords = scanner.arguments()
    if call.name == "get_settings" and (positional or keywords):
        raise InvalidRequest(
            "get_settings() takes no arguments: it only reads; set values with configure(buffer_size=...)"
        )
    if generic is not None:
        if positional and call.name not in ("get_last_n", "get_first_n"):
            raise InvalidRequest(
                f"{quote(name, 40)}() is not one of chd's functions, so the order of its arguments "
                "is not known; name them (store(text=..., speaker=...)) or use a listed function"
            )
        keywords = _canonical(keywords, call.operation)
    return call.operation, _fields(call, positional, keywords)


# "INSERT INTO history (speaker, text) VALUES ('assistant', '...')": a developer's store
# (issue 25). The columns name the values; the values are read as a call's arguments.
_SQL_INSERT = re.compile(
    r"\s*insert\s+into\s+[A-Za-z_][\w.]*\s*\((?P<cols>\s*[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*\s*)\)"
    r"\s*values\s*\(",
    re.IGNORECASE,
)


def read_sql_insert(text: str) -> tuple[str, dict[str, Any]] | None:
    """A store written as an SQL INSERT, None if ``text`` is not one; raises if its values do not fit."""
    query = text.strip().rstrip(";").rstrip()
    head = _SQL_INSERT.match(query)
    if head is None or not query.endswith(")"):
        return None
    columns = [c.strip() for c in head.group("cols").split(",")]
    scanner = _Scanner(query, head.end(), len(query) - 1, "INSERT", _STORE_ARGUMENTS)
    positional, keywords = scanner.arguments()
    if keywords or len(positional) != len(columns):
        raise InvalidRequest(
            f"the INSERT names {len(columns)} column{'s' * (len(columns) != 1)} and gives "
            f"{len(positional) + len(keywords)} value{'s' * (len(positional) + len(keywords) != 1)}"
        )
    store = CALL_NAMES["store"]
    return "store", _fields(store, [], _canonical(list(zip(columns, positional)), "store"))


def _canonical(keywords: list[tuple[str, Any]], operation: str) -> list[tuple[str, Any]]:
    """Argument names in the operation's words; a turn of a read or remove is that turn's range."""
    out: list[tuple[str, Any]] = []
    for key, value in keywords:
        name = canonical_key(key, operation)
        if name in ("turn", "turn_number") and operation != "store":
            out += [("turn_from", value), ("turn_to", value)]
        else:
            out.append((name, value))
    return out


def _fields(
    call: CallForm, positional: list[Any], keywords: list[tuple[str, Any]]
) -> dict[str, Any]:
    fields: dict[str, Any] = dict(call.fixed)
    names = list(call.positional)
    rest = names[-1][1:] if names and names[-1].startswith("*") else None
    if rest is not None:
        names.pop()
    if len(positional) > len(names) and rest is None:
        raise InvalidRequest(
            f"{call.name}() takes {len(names)} positional argument{'s' * (len(names) != 1)}"
            f"{' (' + ', '.join(names) + ')' if names else ''}, got {len(positional)}"
        )
    for name, value in zip(names, positional):
        _put(call, fields, name, value)
    if rest is not None and len(positional) > len(names):
        extra = positional[len(names) :]
        _put(
            call,
            fields,
            rest,
            extra[0] if len(extra) == 1 and isinstance(extra[0], list) else extra,
        )
    accepted = set(field_sources(call.operation))
    for key, value in keywords:
        name = key.lower()
        if name == "n" and call.positional:
            name = call.positional[0].lstrip("*")
        if name not in accepted:
            raise InvalidRequest(
                f"{call.name}() has no parameter {quote(key, 40)}; {call.operation} takes "
                + ", ".join(sorted(accepted - {"at_most"}))
            )
        _put(call, fields, name, value)
    for name, value in call.defaults.items():
        fields.setdefault(name, value)
    return fields


def _put(call: CallForm, fields: dict[str, Any], name: str, value: Any) -> None:
    if value is None:
        return  # null: the parameter is not given
    if name in fields and fields[name] != value:
        raise InvalidRequest(f"{call.name}() is given {name} twice with different values")
    if name == "seqs" and not isinstance(value, list):
        value = [value]
    fields[name] = value
