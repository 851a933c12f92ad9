"""Readings that are complete but not what was asked: questions, how-to requests, unions, exclusions.

An outside review (issue 25) found queries the rules read in full and ran
wrongly: "How do I delete turn 2?" deleted it, "Is the buffer size 5?" set
it, "Delete turn 1 and the last message" deleted what both name at once (one
utterance, or none) instead of either, "Find utterances about Paris but not in
turn 1" searched for "Paris but not" in turn 1, and "The user said I want 2
tickets" searched instead of storing. Each check below turns such a reading
into a refusal that says what to write instead; none of them ever makes a
query run.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["refusal_for"]

_HOW_TO = re.compile(
    r"^\s*(?:(?:please\s+|can\s+you\s+|could\s+you\s+)?(?:tell|show|explain\s+to|teach)\s+(?:me|us)\s+how"
    r"|explain\s+how|how\s+(?:do|can|could|would|should|shall|might|must|does)\s+(?:i|we|you|one|someone|people)\b"
    r"|how\s+to\b|what(?:'s|\s+is)\s+the\s+(?:way|command|query|syntax)\s+to\b)",
    re.IGNORECASE,
)
# A question that asks whether something is so: never an instruction to make it so.
_YES_NO = re.compile(
    r"^\s*(?:does|do|did|is|are|was|were|has|have|had|should|shall|must)\s+"
    r"(?:the|a|an|i|we|it|they|this|that|these|those|there|my|our|its|their|any|all|every|utterances?"
    r"|messages?|turns?|seqs?|buffer|settings|summary|eviction|max|token|[a-z]+'s)\b"
    r"|^\s*(?:check|verify|confirm|see)\s+(?:that|whether|if)\b",
    re.IGNORECASE,
)
_REPORTED = re.compile(
    r"^\s*(?:the\s+)?(?:user|assistant|system|bot|customer|client|ai)\s+(?:just\s+)?"
    r"(?:said|wrote|asked|replied|answered|typed|told\s+(?:me|us))\b"
    r"(?!\s+(?:about|anything|something|regarding)\b)(?:\s*:)?\s+\S",
    re.IGNORECASE,
)
# Words that would exclude or narrow: a topic holding one is not a plain topic.
_EXCLUDING = re.compile(
    r"\b(?:but|not|except|excluding|without|only|apart\s+from|other\s+than)\b", re.I
)
# Number lists ("turns 1 and 2", "utterances 3, 4 and 5") are one selector, not two.
_NUMBER_LIST = re.compile(r"\d+(?:\s*(?:,|and|&|or)\s*\d+)+", re.IGNORECASE)
_UNION = re.compile(
    r"\b(?:and|plus|as\s+well\s+as|along\s+with|together\s+with)\b|&", re.IGNORECASE
)
_SELECTOR_GROUPS = (
    frozenset({"turn_from", "turn_to", "before_turn", "after_turn", "last_turns", "first_turns"}),
    frozenset({"seq", "seqs"}),
    frozenset({"oldest", "newest"}),
    frozenset({"speaker"}),
    frozenset({"within_seconds", "older_than_seconds"}),
)
_WRITES = frozenset({"remove", "configure", "mark"})
_COUNTS = frozenset({"last_n", "first_n", "limit"})


def refusal_for(query: str, operation: str, fields: dict[str, Any]) -> str | None:
    """Why a complete reading of ``query`` must not run, or None if it may."""
    if _HOW_TO.search(query):
        return (
            "this asks how to do something, which the daemon does not do for you; the query "
            "language is listed by GetInstructions (or `chd instructions`). Send the instruction "
            "itself to run it"
        )
    writes = operation in _WRITES and (operation != "configure" or _changes(fields))
    if _YES_NO.search(query) and (writes or _COUNTS & fields.keys()):
        return (
            "this is a question, not an instruction, so nothing was run or changed; to read the "
            "settings ask 'Show the settings', to change them say 'Set the buffer size to 5'"
        )
    if operation == "remove" and _joined_selectors(query, fields):
        return (
            "this names two selections joined by 'and'; a remove deletes what matches all of its "
            "filters, which is not what 'and' asks for here. Send one remove for each"
        )
    topic = fields.get("topic")
    if isinstance(topic, str) and _EXCLUDING.search(topic):
        return (
            f"a topic search does not take exclusions ({topic!r}); search for the topic alone "
            "and narrow it with filters ('Find utterances about Paris in turns 2 to 4')"
        )
    if operation == "retrieve" and _REPORTED.search(query):
        return (
            "this reads like an utterance to store, not a search; to store it, quote it: "
            'Add user utterance: "..."'
        )
    return None


def _changes(fields: dict[str, Any]) -> bool:
    return any(k != "reset" for k in fields) or bool(fields.get("reset"))


def _joined_selectors(query: str, fields: dict[str, Any]) -> bool:
    groups = sum(1 for group in _SELECTOR_GROUPS if group & fields.keys())
    if groups < 2:
        return False
    return _UNION.search(_NUMBER_LIST.sub(" ", query)) is not None
