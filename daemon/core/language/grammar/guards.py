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

from chd.core.language.grammar.repairs import repaired
from chd.core.language.grammar.vocab import SPEAKER

__all__ = ["refusal_for"]

_HOW_TO = re.compile(
    r"^\s*(?:(?:please\s+|can\s+you\s+|could\s+you\s+)?(?:tell|show|explain\s+to|teach)\s+(?:me|us)\s+how"
    r"|explain\s+how|how\s+(?:do|can|could|would|should|shall|might|must|does)\s+(?:i|we|you|one|someone|people)\b"
    r"|how\s+to\b|what(?:'s|\s+is)\s+the\s+(?:way|command|query|syntax)\s+to\b)",
    re.IGNORECASE,
)
# A question that asks whether something is so: never an instruction to make it so.
_YES_NO = re.compile(
    r"^\s*(?:does|do|did|is|are|was|were|has|have|had|should|shall|must|(?:can|could|may|might)(?!\s+(?:we|i|you|u)\b))\s+"
    r"(?:the|a|an|i|we|it|they|this|that|these|those|there|my|our|its|their|any|all|every|utterances?"
    r"|messages?|turns?|seqs?|buffer|settings|summary|eviction|max|token|[a-z]+_[a-z_]+|[a-z]+'s)\b"
    r"|^\s*(?:check|verify|confirm|see)\s+(?:that|whether|if)\b",
    re.IGNORECASE,
)
_REPORTED = re.compile(
    r"^\s*(?:the\s+)?(?:user|assistant|system|bot|customer|client|ai)\s+(?:just\s+)?"
    r"(?:said|wrote|asked|replied|answered|typed|mentioned|noted|stated|explained|told\s+(?:me|us))\b"
    r"(?!\s+(?:about|anything|something|regarding)\b)(?:\s*:)?\s+\S",
    re.IGNORECASE,
)
# Words that would exclude or narrow: a topic holding one is not a plain topic.
_EXCLUDING = re.compile(
    r"\b(?:but|not|except|excluding|without|only|apart\s+from|other\s+than|minus|skip(?:ping)?|ignor(?:e|ing)"
    r"|sans|instead|just|irrelevant)\b",
    re.I,
)
# Number lists ("turns 1 and 2", "utterances 3, 4 and 5") are one selector, not two.
_NUMBER_LIST = re.compile(r"\d+(?:\s*(?:,|and|&|or)\s*\d+)+", re.IGNORECASE)
# "or" too: "the user's messages or turn 2" was read as both at once (second review of issue 25);
# "turn 3 or later" is one range.
_UNION = re.compile(
    r"\b(?:and|plus|also|as\s+well\s+as|along\s+with|together\s+with"
    r"|or(?!\s+(?:later|more|after|earlier|before|newer|older|so|less|fewer|above|below|beyond)\b))\b"
    r"|&|\+|\|\|?|(?<!\d)/(?!\d)|;|\u222a|\u22c3|\u2228|\\|\u2212|\u2216|\u2296|\u2227|\u00ac|~",
    re.IGNORECASE,
)
_CORRECTION = re.compile(
    r"\S[\s,;.!\u2014\u2013-]+(?:no\s*,?\s*wait|wait\s*,?\s*no|sorry|oops|actually|i\s+mean|or\s+rather|rather"
    r"|make\s+(?:that|it)|correction)[\s,;:.!\u2014\u2013-]+\S",
    re.IGNORECASE,
)
_AT_LEAST = re.compile(r"\bat\s+least\b|\bor\s+more\b|\bminimum\b|\bno\s+less\s+than\b", re.I)
_AGO = re.compile(r"\bago\b", re.IGNORECASE)
_EVERY_CONVERSATION = re.compile(
    r"\b(?:all|every|each|other)\s+conversations?\b|\bglobal(?:ly)?\b|\bfor\s+everyone\b|\bdaemon[- ]wide\b",
    re.IGNORECASE,
)
# A request may be asked ("Can you delete turn 2?"); any other sentence ending in "?" is a question.
_QUESTION_SENTENCE = re.compile(r"(?:^|[.!?]\s+)(?P<s>[^.!?]*)\?", re.IGNORECASE)
_REQUEST = re.compile(
    r"^\s*(?:(?:ok(?:ay)?|so|hey|hi|please|pls|um+|uh+)[\s,]+)*(?:(?:can|could|would|will)\s+(?:you|u|ya|we|i)\b|please\b|pls\b|kindly\b)",
    re.IGNORECASE,
)
_SELECTOR_GROUPS = (
    frozenset({"turn_from", "turn_to", "before_turn", "after_turn", "last_turns", "first_turns"}),
    frozenset({"seq", "seqs"}),
    frozenset({"oldest", "newest", "last_n", "first_n"}),
    frozenset({"speaker"}),
    frozenset({"within_seconds", "older_than_seconds"}),
)
_WRITES = frozenset({"remove", "configure", "mark"})
_COUNTS = frozenset({"last_n", "first_n", "limit"})


_TURN_FIELDS = frozenset(
    {"turn_from", "turn_to", "before_turn", "after_turn", "last_turns", "first_turns"}
)
# Speech reported before a separator: what follows is what was said.
_SPEECH_BEFORE_SEPARATOR = re.compile(
    r"\b(?:say|says|said|saying|write|writes|wrote|writing|ask|asks|asked|asking|tell|tells|told"
    r"|telling|type|types|typed|typing|answer|answers|answered|answering|reply|replies|replied"
    r"|replying)\b[^:;.!?\u2014\u2013\n]{0,12}?(?:[:;]|[.!?]\s|\s[-\u2014\u2013]+\s|[\u2014\u2013])",
    re.IGNORECASE,
)
# Before a write's verb: a question word, or a verb that reports speech or a request ("What
# did the user send: remove all", "Customers asked to remove the last 2", "Tell me what the
# user said, remove all"). What follows such words is what was said or asked, never a request
# to this memory as it stands (fifth review of issue 25).
_ASKS_OR_REPORTS = re.compile(
    r"\b(?:what|which|who|whom|whose|when|where|why|how|say|says|said|saying|write|writes|wrote"
    r"|writing|written|send|sends|sent|sending|mention|mentions|mentioned|mentioning|post|posts|posted"
    r"|tell|tells|told|telling|ask|asks|asked|asking|request|requests|requested|reply|replies|replied"
    r"|answer|answers|answered|type|types|typed|texted|demand|demanded|insist|insisted|messaged)\b",
    re.IGNORECASE,
)
_WRITE_VERB = re.compile(
    r"\b(?:remove|delete|erase|purge|wipe|forget|discard|scrub|nuke|trash|expunge|obliterate|eradicate"
    r"|destroy|drop|prune|rm|del|toss|ditch|scrap|axe|clear|mark|unmark|flag|unflag|pin|unpin|set|change"
    r"|configure|reconfigure|raise|lower|increase|decrease|reduce|limit|cap)\b",
    re.IGNORECASE,
)


def _asks_before_the_write(query: str) -> bool:
    """Whether a question or reported speech comes before the first write verb of ``query``."""
    plain = _QUOTED_SPAN.sub(" ", query)
    verb = _WRITE_VERB.search(plain)
    return verb is not None and _ASKS_OR_REPORTS.search(plain, 0, verb.start()) is not None


_SEQ_OR = re.compile(r"\d\s*(?:,\s*)?\bor\b\s*(?:seq\s*|#)?\d", re.IGNORECASE)
_QUOTED_SPAN = re.compile(r"\"[^\"]*\"|\u201c[^\u201d]*\u201d")
# "The user asked me to delete turn 2": the speaker asked; whose messages go is not said.
_ASKED_BY = re.compile(
    rf"^\W*(?:the\s+|our\s+|my\s+)?(?:{SPEAKER}|end\s+user|client|caller|requester|person)s?\s+"
    r"(?:has\s+|had\s+|just\s+)?(?:asked|asks|wants|wanted|requested|requests|told|tells|says|said|insisted|demanded)\b",
    re.IGNORECASE,
)
# A clause at the end that says a speaker asked (or said, or wants) something.
_REQUESTED_BY = re.compile(
    rf"(?:[,;(\u2014\u2013]|\s-+\s|[.!?]\s)\s*(?:as\s+|because\s+|since\s+)?(?:the\s+|this\s+|our\s+|my\s+)?"
    rf"(?:{SPEAKER}|end\s+user|client|caller|operator|requester|person)\s+"
    r"(?:has\s+|had\s+|just\s+)?(?:asked|requested|wants?|wanted|said|told\s+(?:me|us)|insisted|demanded|called)\b[^,;\u2014\u2013]{0,80}$",
    re.IGNORECASE,
)


def refusal_for(query: str, operation: str, fields: dict[str, Any]) -> str | None:
    """Why a complete reading of ``query`` must not run, or None if it may."""
    if _HOW_TO.search(query):
        return (
            "this asks how to do something, which the daemon does not do for you; the query "
            "language is listed by GetInstructions (or `chd instructions`). Send the instruction "
            "itself to run it"
        )
    writes = operation in _WRITES and (operation != "configure" or _changes(fields))
    if (_YES_NO.search(query) or (writes and _unrequested_question(query))) and (
        writes or _COUNTS & fields.keys()
    ):
        return (
            "this is a question, not an instruction, so nothing was run or changed; to read the "
            "settings ask 'Show the settings', to change them say 'Set the buffer size to 5'"
        )
    if writes and _CORRECTION.search(query) and repaired(query) is None:
        # "Delete utterance 5, sorry, the last message": a correction the rules
        # could not place; applying both parts would delete what was taken back.
        return (
            "this corrects itself ('sorry', 'no wait', 'I mean') in a way the rules cannot place; "
            "send the corrected instruction alone"
        )
    if (
        operation == "remove"
        and ("seq" in fields or "seqs" in fields)
        and _TURN_FIELDS & fields.keys()
    ):
        # "Remove seq 3 until turn 4" removed seq 3 alone (review of issue 25).
        return (
            "this names seqs and turns together; a remove takes seqs ('messages 3 to 8') or turns "
            "('turns 2 to 4'), not a range from one to the other"
        )
    if operation == "remove" and "seqs" in fields and _SEQ_OR.search(query):
        # "Delete seq 3 or 4": one of them, or both? (fifth review)
        return (
            "'or' between seqs does not say which to delete; name them with 'and' or one at a time"
        )
    if writes and (_SPEECH_BEFORE_SEPARATOR.search(query) or _asks_before_the_write(query)):
        # "What was the user saying: remove all": what someone said, quoted after a
        # separator, is never a request to this memory (third review of issue 25).
        return (
            "this reports what someone said or wrote before the request; to store it, say "
            "'Add user utterance: ...'; to change the memory, send the request alone"
        )
    if (
        operation in ("remove", "mark")
        and "speaker" in fields
        and (_REQUESTED_BY.search(query) or _ASKED_BY.search(query))
    ):
        # "Delete everything — the customer asked": who asked for it, or whose messages go?
        return (
            "it is not clear whether the speaker named at the end says whose messages to change "
            "or who asked for it; say 'the user's messages' in the request, or leave the remark out"
        )
    if operation == "remove" and "within_seconds" in fields and _AGO.search(query):
        return (
            "'... ago' does not say whether newer or older messages go; say 'older than 2 hours' "
            "or 'in the last 2 hours'"
        )
    if operation == "configure" and _EVERY_CONVERSATION.search(query):
        return (
            "configure sets this conversation's limits only; the daemon's defaults for every "
            "conversation are set when it starts (chd serve --buffer-size ...)"
        )
    if operation in ("remove", "retrieve") and _joined_selectors(query, fields):
        return (
            f"this names two selections joined by 'and' or 'or'; a {operation} takes what matches all "
            f"of its filters at once, which is not what the query asks for here. Send one {operation} "
            "for each"
        )
    if operation == "summarize" and _AT_LEAST.search(query):
        return (
            "a summary's limit is a most, not a least; say 'in 200 tokens' or 'within 200 tokens'"
        )
    topic = fields.get("topic")
    quoted = isinstance(topic, str) and any(f"{q}{topic}" in query for q in "\"'\u201c\u2018")
    if isinstance(topic, str) and not quoted and _EXCLUDING.search(topic):
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


def _unrequested_question(query: str) -> bool:
    """Whether a sentence of ``query`` ends in "?" without being a request ("Delete utterance 3?")."""
    return any(
        not _REQUEST.match(m.group("s"))
        for m in _QUESTION_SENTENCE.finditer(query[:_QUESTION_LIMIT])
    )


_QUESTION_LIMIT = 2_000


def _changes(fields: dict[str, Any]) -> bool:
    return any(k != "reset" for k in fields) or bool(fields.get("reset"))


def _joined_selectors(query: str, fields: dict[str, Any]) -> bool:
    groups = sum(1 for group in _SELECTOR_GROUPS if group & fields.keys())
    if groups < 2:
        return False
    return _UNION.search(_NUMBER_LIST.sub(" ", query)) is not None
