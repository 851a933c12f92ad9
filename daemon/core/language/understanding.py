"""From a query to a typed intent: data.operation, the rule parser, then maybe Claude.

The rules decide whenever they can. Only a query they could not read with
enough confidence (``NotUnderstood``, never ``Ambiguous``) goes to the
optional classifier, and what it returns passes the same intent checks as
everything else. A classified remove may not clear the conversation, and is
limited to one utterance unless it names exact seqs or a turn range whose
every number the query itself holds: a guess must never delete much.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from chd.core.errors import DaemonError, InvalidRequest
from chd.core.language.classifier import QueryClassifier
from chd.core.language.fields import as_str
from chd.core.language.intents import Intent, RemoveIntent, build_intent
from chd.core.language.numbers import NUM, parse_number
from chd.core.language.parser import NotUnderstood, parse

__all__ = ["Understood", "understand"]


@dataclass(frozen=True, slots=True)
class Understood:
    """The intent, how sure the interpreter was, and which one it was (rules, data, classifier)."""

    intent: Intent
    confidence: float
    interpreted_by: str


def understand(
    text: Any,
    metadata: Mapping[str, Any],
    data: Mapping[str, Any],
    classifier: QueryClassifier | None = None,
) -> Understood:
    """Interpret one query; raise InvalidRequest (or a subclass) before anything changes."""
    if "operation" in data:
        operation = as_str("data.operation", data["operation"]).strip().lower()
        return Understood(build_intent(operation, {}, metadata, data), 1.0, "data")
    if not isinstance(text, str):
        raise InvalidRequest("query must be a string")
    try:
        parsed = parse(text)
    except NotUnderstood as refusal:
        if classifier is None:
            raise
        parsed = classifier.classify(text, refusal)
        intent = build_intent(parsed.operation, parsed.fields, metadata, data)
        return Understood(_guarded(intent, refusal, text), parsed.confidence, "classifier")
    try:
        intent = build_intent(parsed.operation, parsed.fields, metadata, data)
    except DaemonError as error:
        # Read, then refused on a field: the trace and metrics label the
        # operation the caller asked for, not "unknown".
        if error.operation is None:
            error.operation = parsed.operation
        raise
    return Understood(intent, parsed.confidence, "rules")


def _guarded(intent: Intent, refusal: NotUnderstood, text: str) -> Intent:
    if not isinstance(intent, RemoveIntent):
        return intent
    if intent.all:
        raise InvalidRequest(
            f"the query was not understood by the rules and the classifier read it as "
            f"'remove everything'; clearing a conversation needs an explicit query such as "
            f"'Clear the conversation'. Nothing was changed. ({refusal})"
        )
    named = _named_in(intent, text)
    if named is not None:
        # Exact seqs or a turn range whose every number the caller wrote
        # ("wipe entries 3 and 4", "drop turns two through four"): the rules can
        # check it, so it may delete what it names (issue 25), and no more.
        return replace(
            intent, at_most=named if intent.at_most is None else min(intent.at_most, named)
        )
    return replace(intent, at_most=1 if intent.at_most is None else min(intent.at_most, 1))


_EXACT = ("seq", "seqs", "turn_from", "turn_to", "before_turn", "after_turn")
_FUZZY = ("oldest", "newest", "last_turns", "first_turns", "within_seconds", "older_than_seconds")
_TURN_BOUNDS = ("turn_from", "turn_to", "before_turn", "after_turn")


def _named_in(intent: RemoveIntent, text: str) -> int | None:
    """How many utterances a classified remove may delete when the query names all its numbers, else None.

    Seqs: one each. A turn range: no count (the range is the check), given
    as a large bound. Anything fuzzy (counts, time, first/last turns) keeps
    the one-utterance limit.
    """
    if any(getattr(intent, name) not in (None, ()) for name in _FUZZY):
        return None
    numbers = [getattr(intent, name) for name in ("seq", *_TURN_BOUNDS)]
    numbers += list(intent.seqs)
    numbers = [n for n in numbers if n is not None]
    if not numbers:
        return None
    written = {parse_number(m.group(0)) for m in _NUMBER.finditer(text)}
    if not all(n in written for n in numbers):
        return None
    if any(getattr(intent, name) is not None for name in _TURN_BOUNDS):
        return _RANGE_MOST
    return len(set(intent.seqs) | ({intent.seq} if intent.seq is not None else set()))


_NUMBER = re.compile(NUM, re.IGNORECASE)
# A checked turn range may remove what it holds; the bound only keeps a runaway guess finite.
_RANGE_MOST = 10_000
