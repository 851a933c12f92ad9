"""Mark/unmark phrasings: 'Mark utterance 12 as important', 'unpin message 3'."""

from __future__ import annotations

from chd.core.language.grammar.query import Query
from chd.core.language.grammar.reading import Reading
from chd.core.language.grammar.slots import take_seqs

__all__ = ["read_mark"]

_TRIGGER = r"\b(?:important|importance|unimportant|pin|pinned|unpin|star|starred|unstar|flag|flagged|unflag|unmark|keeper)\b"
_NEGATIVE = (
    r"^(?:unmark|unflag|unpin|unstar|demote)\b"
    r"|\b(?:not|no\s+longer|un-?important|unpinned|unstarred)\b"
    r"|^(?:remove|clear|drop|take\s+away|take\s+off|delete)\s+(?:the\s+)?(?:important|importance|pin|star|flag)"
)
_QUESTION = r"^(?:is|are|was|were|does|do|did|has|have|which|what|who|how|show|get|list|find)\b"
_VERB = (
    r"^(?:mark|flag|tag|label|set|make|pin|star|consider|treat|keep|unmark|unflag|unpin|unstar|demote"
    r"|remove|clear|drop|take\s+away|take\s+off|delete|declare)\b"
)
_WORDS = frozenset(
    """as important importance unimportant un-important flag flagged flags mark marked marker tag tagged
    pin pinned star starred key critical crucial essential not no longer is being status label
    from on off keeper must stay""".split()
)


def read_mark(text: str) -> Reading | None:
    q = Query(text)
    if q.search(_TRIGGER) is None:
        return None
    if q.search(_QUESTION):
        return None  # "Is utterance 7 important?" asks; it must not set anything.
    important = q.search(_NEGATIVE) is None
    verb = q.take(_VERB)
    seqs = take_seqs(q)
    if verb is None and not seqs:
        return None
    reading = Reading("mark", {"important": important}, q.unexplained(_WORDS), q.total_words)
    if len(seqs) > 1:
        reading.refusal = "mark one utterance per query: 'Mark utterance 12 as important'"
    elif not seqs:
        reading.refusal = "say which utterance by its seq: 'Mark utterance 12 as important'"
    else:
        reading.fields["seq"] = seqs[0]
    return reading
