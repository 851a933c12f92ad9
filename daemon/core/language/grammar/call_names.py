"""Function and action names nobody listed: ``store_utterance()``, ``memory.add()``, ``{"action": "append"}``.

A developer scripting against chd writes the call their own code would have
(issue 25): ``delete_utterances(turn=2)``, ``search_history(topic="budget")``,
``df.tail(3)``. Such a name is read by its words: exactly one operation's verb
among them names the operation; a name with none, or with the verbs of two
operations ("get_and_delete"), is refused, never guessed. Argument names are
read through the aliases below (``role`` is the speaker, ``content`` the text)
and then checked like any call's (grammar/calls.py).
"""

from __future__ import annotations

import re

__all__ = ["call_for_name", "canonical_key"]

# Verbs of names -> the generic call of their operation (guide.py's CALLS).
_VERBS: dict[str, str] = {
    **dict.fromkeys(
        "add store save append insert log record push put write remember persist create post".split(),
        "store",
    ),
    **dict.fromkeys("get fetch read list show retrieve load select".split(), "retrieve"),
    **dict.fromkeys("search find query lookup grep match".split(), "search"),
    "tail": "get_last_n",
    "last": "get_last_n",
    "recent": "get_last_n",
    "head": "get_first_n",
    "first": "get_first_n",
    **dict.fromkeys("delete remove drop erase purge forget discard".split(), "remove"),
    **dict.fromkeys("summarize summarise summary summarization recap".split(), "summarize"),
    **dict.fromkeys("configure config set settings update".split(), "configure"),
}
_OPERATION_OF = {
    "store": "store",
    "retrieve": "retrieve",
    "search": "retrieve",
    "get_last_n": "retrieve",
    "get_first_n": "retrieve",
    "remove": "remove",
    "summarize": "summarize",
    "configure": "configure",
}
# "get_summary" is a read of the summary, known by name; these words only
# qualify a verb ("history", "utterances") and never name an operation alone.
_NEUTRAL = frozenset(
    """utterance utterances message messages msg msgs history memory memories conversation chat
    item items entry entries record records row rows data text turn turns to from by new one
    conversations context""".split()
)
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")

_KEYS: dict[str, str] = {
    **dict.fromkeys("role author sender from by who speaker_role".split(), "speaker"),
    **dict.fromkeys("content utterance message body msg text_content value".split(), "text"),
    **dict.fromkeys("query q keyword keywords term terms search".split(), "topic"),
    **dict.fromkeys("limit_tokens max_tokens_summary tokens token_budget".split(), "token_limit"),
    **dict.fromkeys("turn_no turn_id turnnumber".split(), "turn_number"),
    "seq_id": "seq",
    "id": "seq",
    "ids": "seqs",
}


def call_for_name(name: str) -> str | None:
    """The generic call an unlisted function or action ``name`` asks for, or None."""
    last = name.rsplit(".", 1)[-1]
    words = [w.lower() for w in _WORDS.findall(last)]
    if any(w not in _VERBS and w not in _NEUTRAL for w in words):
        return None  # "forget_everything", "get_user_messages": the name says more than its verb
    found = {_VERBS[w] for w in words if w in _VERBS}
    if "search" in found and "retrieve" in found:
        found.discard("retrieve")  # "get_search_results": a search
    if {"get_last_n", "get_first_n"} & found and "retrieve" in found:
        found.discard("retrieve")  # "get_last": the last ones
    if "summarize" in found and "retrieve" in found:
        return None  # "get_summary" is listed; "fetch_summary_history" is a guess
    operations = {_OPERATION_OF[f] for f in found}
    if len(found) != 1 or len(operations) != 1:
        return None
    return found.pop()


def canonical_key(key: str, operation: str) -> str:
    """An argument name in the operation's own words (``role`` -> ``speaker``)."""
    low = key.lower()
    if low in ("limit", "n", "count", "k") and operation == "summarize":
        return "token_limit"
    if low == "turn" and operation == "store":
        return "turn_number"
    return _KEYS.get(low, low)
