"""Words the grammar shares: speakers, nouns for utterances, filler words.

A filler is a word that may appear in a query without changing its
meaning ("show *me* *the* messages *so far*"). Words that change meaning —
"not", "except", "but", "without", "other" — are never fillers, so a query
using them is not silently read as if they were absent.
"""

from __future__ import annotations

import re

__all__ = [
    "FLAGS",
    "SPEAKER",
    "speaker_of",
    "NOUN",
    "SINGULAR",
    "NOUNS_RE",
    "FILLERS",
    "CONVERSATION",
]

FLAGS = re.IGNORECASE | re.DOTALL

_SPEAKERS = {
    "user": "user", "human": "user", "customer": "user",
    # Issue 25: the user as a clinic, hotel or travel desk names them, only
    # where a speaker stands ("the patient's messages", "what the guest said");
    # elsewhere ("patient waiting") they are people mentioned, not a filter.
    "patient": "user", "visitor": "user", "guest": "user", "passenger": "user",
    "traveller": "user", "traveler": "user", "shopper": "user", "buyer": "user",
    "assistant": "assistant", "bot": "assistant", "ai": "assistant",
    "model": "assistant", "agent": "assistant", "claude": "assistant",
    "system": "system",
}  # fmt: skip
SPEAKER = r"(?:" + "|".join(_SPEAKERS) + r")"


def speaker_of(word: str) -> str:
    """The stored speaker name for a word of the query ("bot" -> "assistant")."""
    return _SPEAKERS[word.lower()]


_SINGULAR_NOUNS = (
    "utterance", "message", "entry", "line", "item", "reply", "response", "statement",
    "question", "answer", "record", "text", "thing", "one", "comment", "note", "prompt",
    "remark", "post", "snippet", "bit", "piece", "passage", "sentence", "chunk", "contribution",
)  # fmt: skip
_PLURAL_NOUNS = (
    "utterances", "messages", "entries", "lines", "items", "replies", "responses",
    "statements", "questions", "answers", "records", "texts", "things", "ones",
    "comments", "notes", "prompts", "remarks", "posts", "snippets", "bits", "pieces", "passages",
    "sentences", "chunks", "contributions",
)  # fmt: skip
SINGULAR = r"(?:" + "|".join(_SINGULAR_NOUNS) + r")"
NOUN = r"(?:turns?\s+of\s+(?:talk|speech)|" + "|".join(_PLURAL_NOUNS + _SINGULAR_NOUNS) + r")"
NOUNS_RE = re.compile(rf"\b{NOUN}\b", FLAGS)
CONVERSATION = r"(?:conversation|history|buffer|chat|dialog(?:ue)?|transcript|context|memory|log|thread|session)"

FILLERS = frozenset(
    """the a an all any every each of in from this that these those it its
    conversation history buffer chat dialog dialogue transcript context memory log thread session
    so far please me us i you we my our your is are was were be been being there here
    do does did have has had what which who whom when where how
    stored saved said say says tell told mention mentioned ask asked write wrote written
    just currently current right now ok okay and or to for with at by up out
    anything everything something stuff whole entire full complete again also
    exactly currently yet ever would like want need can could will shall should
    utterance utterances message messages entry entries line lines item items reply replies
    response responses statement statements question questions answer answers record records
    text texts thing things one ones comment comments note notes prompt prompts remark remarks post posts
    snippet snippets bit bits piece pieces passage passages sentence sentences chunk chunks
    contribution contributions talk speech
    content contents available there's what's""".split()
)
