"""From a query to a typed intent: data.operation, the rule parser, then maybe Claude.

The rules decide whenever they can. Only a query they could not read with
enough confidence (``NotUnderstood``, never ``Ambiguous``) goes to the
optional classifier, and what it returns passes the same intent checks as
everything else. A classified remove is limited to one utterance and may
not clear the conversation: a guess must never delete much.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from chd.core.errors import DaemonError, InvalidRequest
from chd.core.language.classifier import QueryClassifier
from chd.core.language.fields import as_str
from chd.core.language.intents import Intent, RemoveIntent, build_intent
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
        return Understood(_guarded(intent, refusal), parsed.confidence, "classifier")
    try:
        intent = build_intent(parsed.operation, parsed.fields, metadata, data)
    except DaemonError as error:
        # Read, then refused on a field: the trace and metrics label the
        # operation the caller asked for, not "unknown".
        if error.operation is None:
            error.operation = parsed.operation
        raise
    return Understood(intent, parsed.confidence, "rules")


def _guarded(intent: Intent, refusal: NotUnderstood) -> Intent:
    if not isinstance(intent, RemoveIntent):
        return intent
    if intent.all:
        raise InvalidRequest(
            f"the query was not understood by the rules and the classifier read it as "
            f"'remove everything'; clearing a conversation needs an explicit query such as "
            f"'Clear the conversation'. Nothing was changed. ({refusal})"
        )
    return replace(intent, at_most=1 if intent.at_most is None else min(intent.at_most, 1))
