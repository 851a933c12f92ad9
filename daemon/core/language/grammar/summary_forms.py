"""How callers ask for a summary in their own words, rewritten into the forms summarize.py reads.

A summary request is a read that changes nothing, and it takes no speaker or
time filter, so what surrounds it can be read generously (issue 25):
- who took part is not a filter: "the dialogue between the user and the
  assistant", "what the customer and the bot discussed" is the conversation;
- why it is wanted is not a scope: "... for context injection", "(handover to
  next shift)", "before I hand it over", "Before the context window is
  rebuilt, ..." are set aside when they hold no number, turn or order word;
- a limit may be said many ways: "(max 300 tokens)", "not more than 50
  tokens", "max 200 tok", "token_limit=64", "--limit 256", "limited to 250
  tokens" all mean "in N tokens"; "the token limit is in the data field" points
  at data.token_limit, which the request reads anyway.
Only a text that already asks for a summary is rewritten (``rewritten``
returns None otherwise), and every pattern is bounded, so the cost stays linear.
"""

from __future__ import annotations

import re

from chd.core.language.numbers import NUM

__all__ = ["rewritten"]

_ASKS = re.compile(
    r"\b(?:summar(?:y|ies|i[sz]e[ds]?|i[sz]ing|i[sz]ation)|sumarize|recap|overview|gist|digest|tl;?\s*dr|synopsis|rundown|sum\s+up"
    r"|been\s+about|what(?:'s|\s+is)\s+(?:the|this|our)\s+(?:conversation|convo|chat|discussion)\s+about)\b",
    re.IGNORECASE,
)
_SPEAKER = (
    r"(?:(?:end[\s-])?users?|customers?|clients?|callers?|assistants?|bots?|ai|agents?|models?|humans?|system"
    r"|patients?|doctors?|staff|support|me|us|you|i|we)"
)
_PARTICIPANTS = re.compile(
    rf"\b(?:between|among|of|from)\s+(?:the\s+)?{_SPEAKER}\s+(?:and|&)\s+(?:the\s+)?{_SPEAKER}\b",
    re.I,
)
_WHAT_PARTICIPANTS = re.compile(
    rf"\bwhat\s+(?:the\s+)?{_SPEAKER}\s+(?:and|&)\s+(?:the\s+)?{_SPEAKER}\s+"
    r"(?:have\s+|had\s+)?(?:discussed|talked\s+about|said|covered|went\s+over)",
    re.I,
)
_N = rf"(?P<n>{NUM})"
_LIMITS = (
    re.compile(
        r"\(?\s*\b(?:max(?:imum)?|at\s+most|not\s+more\s+than|no\s+more\s+than|up\s+to|limited\s+to|capped\s+at"
        r"|under|below|within|about|around|roughly|approximately|approx\.?|~)\s*"
        + _N
        + r"\s*(?:tokens?|toks?)\b\s*\)?",
        re.I,
    ),
    re.compile(
        r"(?:--|\b)(?:token_limit|limit_tokens|max_tokens|limit|tokens)\s*[=:]?\s*(?P<n>\d+)\b",
        re.I,
    ),
)
_POINTER = re.compile(
    r"[,;]?\s*(?:within\s+)?(?:the\s+)?(?:token\s+)?limit\s+(?:is\s+)?(?:given|provided|set|specified|passed)?\s*"
    r"(?:in|via)\s+(?:the\s+)?data(?:\.token_limit)?(?:\s+field)?",
    re.I,
)
# Why it is wanted: at the end after a comma, dash or bracket, or before the request.
_PURPOSE_END = re.compile(
    r"(?:\s*[,;(\u2014\u2013]\s*|\s+-\s+|\s+)(?P<p>(?:for|before|so\s+that|to\s+(?:hand|pass|give|share|brief|include|inject|paste|prepare))\b"
    r"[^()\d]{1,120}?|\(?[^()\d]{1,80}\))\s*[.!?)]*\s*$",
    re.I,
)
_PURPOSE_START = re.compile(r"^\s*(?:before|for|so\s+that|to)\b(?P<p>[^,\d]{1,120}),\s*", re.I)
# A purpose that names a scope is part of the request ("for the last 5 messages", "for turns 1-3").
_SCOPE = re.compile(
    r"\b(?:turns?|last|first|newest|oldest|latest|recent|earliest|messages?|utterances?|entries|seqs?"
    r"|only|except|not|no|without|tokens?|words?|lines?|sentences?)\b",
    re.I,
)
_PLAIN = (
    (
        re.compile(
            r"\b(?:long\s+story\s+short|in\s+(?:a\s+)?few\s+words|like\s+a\s+summary)\b[,]?", re.I
        ),
        " ",
    ),
    (re.compile(r"\bsummary\s+(?:please|pls|plz)\b", re.I), "summarize"),
    (re.compile(r"\b(?:please|pls|plz|kindly)\b", re.I), " "),
    (
        re.compile(r"\b(?:where\s+we(?:'re|\s+are)\s+at|where\s+things\s+stand)\b", re.I),
        "the conversation",
    ),
    (
        re.compile(
            r"\bwhat(?:'s|\s+is|\s+has)\s+(?:the|this|our)\s+(?:conversation|convo|chat|discussion|dialog(?:ue)?|thread)\s+been\s+about\b",
            re.I,
        ),
        "what is the conversation about",
    ),
    (re.compile(r"\bconvo\b", re.I), "conversation"),
    (re.compile(r"\bkeep\s+it\s+(?:short|brief|concise|tight|compact)\b", re.I), " "),
    (re.compile(r"^\s*just\b", re.I), " "),
    (re.compile(r"\bI\s+(?:require|request|would\s+appreciate)\b", re.I), "give me"),
    (re.compile(r"\b(?:compressed|condensed|succinct|summarized|crisp|tidy)\s+", re.I), "short "),
)
_LIMIT = 600
_FEWEST_TOKENS = 20
_BARE_NOUN = re.compile(
    r"(?:the|a|an)\s+(?:\w+\s+){0,2}(?:gist|recap|overview|summary|rundown|synopsis)", re.I
)


def rewritten(text: str) -> str | None:
    """``text`` in the forms summarize.py reads, or None if it does not ask for a summary."""
    if len(text) > _LIMIT or _ASKS.search(text) is None:
        return None
    out = _WHAT_PARTICIPANTS.sub("what we discussed", text)
    out = _PARTICIPANTS.sub(" ", out)
    out = _POINTER.sub(" ", out)
    out = _LIMITS[0].sub(lambda m: f" in {m.group('n')} tokens ", out, count=1)
    # A bare "limit 5" may count messages: only a size a summary can have is read as tokens.
    out = _LIMITS[1].sub(
        lambda m: (
            f" in {m.group('n')} tokens " if int(m.group("n")[:6]) >= _FEWEST_TOKENS else m.group(0)
        ),
        out,
        count=1,
    )
    for pattern, plain in _PLAIN:
        out = pattern.sub(plain, out)
    for _ in range(2):
        end = _PURPOSE_END.search(out)
        if end is None or _SCOPE.search(end.group("p")) or not _ASKS.search(out[: end.start()]):
            break
        out = out[: end.start()]
    start = _PURPOSE_START.match(out)
    if (
        start is not None
        and not _SCOPE.search(start.group("p"))
        and _ASKS.search(out[start.end() :])
    ):
        out = out[start.end() :]
    out = " ".join(out.replace(" ,", ",").split()).strip(" ,;")
    if _BARE_NOUN.fullmatch(out):
        out = f"give me {out}"
    return out if out != text else None
