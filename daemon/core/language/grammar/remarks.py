"""Remarks: a clause that says why a request is made, not what it asks.

Callers explain themselves ("Delete turns 1 and 2; they concern the weather
and are no longer relevant", "Fetch the first two utterances. They are
required to restore the opening context", "..., as I need the context of the
booking"). An LLM orchestrator does so by habit. Such a clause has a subject
and a verb of its own, or opens with a reason word, and names no scope: it
may be set aside when the rest of the query is a complete instruction.

The safety rule (docs/query-language.md, "Commentary"): a remark holds no
number, no negation or exclusion, no quantity or order word, and no write word
other than the write the instruction itself asks for. A short clause without a
verb ("the user's ones") is never a remark: it may narrow the request.
"""

from __future__ import annotations

import re

from chd.core.language.grammar.normalize import WRITE_FORMS
from chd.core.language.grammar.query import QUOTED
from chd.core.language.numbers import NUM

__all__ = [
    "is_remark",
    "agrees",
    "COUNTERMAND",
    "DESCRIBES_TARGET",
    "WRONG_TARGET",
    "SAFE_INTERJECTIONS",
]

# Labels that open a remark: "Rationale: larger batches reduce summarizer calls."
_LABEL = re.compile(r"^\s*(?:rationale|reason|context|note|background|why)\s*[:\u2014-]\s*", re.I)
# Reason words that open a clause with a subject of its own: "as I need", "since the user asked".
_REASON = re.compile(
    r"^\s*(?:(?:as|since|because|so\s+that|so|for|given\s+that|now\s+that)"
    r"\s+(?:i|we|you|it|they|he|she|this|that|these|those|the|a|an|our|my|their|its|there)\b"
    r"|(?:in\s+order\s+)?to\s+(?:free|make|let|help|avoid|reduce|restore|reconstruct|rebuild|give|provide"
    r"|catch|ensure|prevent|allow)\b)",
    re.IGNORECASE,
)
# A verb of its own: the clause is a statement about something, not a filter.
_FINITE = frozenset(
    """is are was were be been am has have had will would can could should must may might
    do does did need needs needed want wants wanted asked asks requested requests went goes
    contained contains concern concerns concerned ended ends resumes resumed changed
    helps help keeps make makes made said says reduce reduces take takes took""".split()
)
_CONTRACTED = frozenset("it's that's there's they're we're i'm i've we've you're i'd we'd".split())
# Past tenses the lemmatizer does not undo by a suffix: "patient withdrew the question",
# "already told him" (issue 25: a narrative clause has a verb of its own).
_IRREGULAR_PAST = frozenset(
    """told gave sent wrote spoke went came got knew thought felt heard paid bought sold found
    lost withdrew forgot began brought caught chose drove ate fell flew meant met ran saw
    sat stood understood woke won""".split()
)


def _past(word: str) -> bool:
    from chd.core.language.grammar.normalize import lemma

    return word in _IRREGULAR_PAST or (
        len(word) > 4 and word.endswith("ed") and lemma(word) != word
    )


# "we keep hitting it": "keep" before an -ing form says "go on", it spares nothing.
_KEEP_DOING = re.compile(r"\b(?:keeps?|kept)\s+(?=\w+ing\b)", re.I)
_TOO_MUCH = re.compile(
    r"\btoo\s+(?=(?:long|big|large|many|much|short|old|small|verbose|detailed|noisy|slow)\b)", re.I
)
# "next customer", "new patient at the desk": the session is over; said so, it agrees with a remove.
_NEXT_PERSON = re.compile(
    r"\b(?:next|new)\s+(?:customer|patient|caller|client|guest|visitor|passenger|ticket|session|call|one\s+in)\b",
    re.I,
)
# A speaker word in these places is who a remark is about, not whose messages are meant:
# after a preposition or a verb of speech ("for this patient", "told the guest"), or as
# the subject of a verb of its own ("the user has requested", "patient withdrew").
_SPEAKER_OBJECT = frozenset(
    "for to with from told tell telling asked ask gave give helped called this that our".split()
)
# Idioms of time that hold a scope word but narrow nothing.
_IDIOMS = re.compile(
    r"\b(?:no\s+longer|any\s*more|from\s+now\s+on|later\s+on|for\s+now|by\s+mistake|in\s+error)\b",
    re.I,
)
# Words that may narrow or negate a request: a clause holding one is never set aside.
_NARROWING = frozenset(
    """not no n't never nothing none except but only without other others besides apart
    excluding exclude instead rather keep keeping leave leaving all every everything each
    any both either neither first last latest oldest newest before after until till through
    between too also plus additionally important unimportant just maybe perhaps possibly
    probably might unsure""".split()
)
# Words that may carry the request itself: who (a remark naming a speaker may
# narrow a read: "the assistant's ones are what I need"), what is wanted (a
# summary, the settings), or a verb that asks ("make a new one", "include the
# summary"). A clause holding one is never set aside.
_ASKING = frozenset(
    """user users assistant assistants system bot ai human model agent claude customer client caller
    patient operator person requester end me my mine our ours ones one those these
    summary summaries recap overview gist digest context settings setting buffer limit budget
    tokens token seq seqs regenerate regenerated fresh new
    show display get fetch return give send include make create generate produce write add store
    save record set change configure update mark flag pin search find list retrieve read tell
    summarize summarise keep put remove delete""".split()
)
_UNNEEDED = re.compile(
    r"\b(?:(?:i|we)\s+)?(?:don't|dont|do\s+not|no\s+longer)\s+need(?:\s+(?:it|them|this|that|these|those))?\b"
    r"|\b(?:not|no\s+longer)\s+(?:needed|relevant|necessary|useful|wanted|required)\b",
    re.IGNORECASE,
)
# Words that say what became of something: "booking cancelled", "wrong number", "a duplicate".
_STATE = frozenset(
    """done finished resolved fixed handled closed obsolete outdated
    duplicate duplicated test testing typo unneeded irrelevant stale old""".split()
)
# Words that take the request back or spare part of it: "the reply can stay", "please
# disregard this request", "that was the wrong conversation".
COUNTERMAND = frozenset(
    """stay stays remain remains kept spare spared disregard ignore cancel undo
    oops instead actually wait hold stop kept keep keeping leave leaving still fine preserve
    preserved spare sparing kidding joking jk jking maybe perhaps unsure""".split()
)
# "that was the wrong conversation" takes the request back; "it was wrong" says why it goes.
# "it was mine", "it was a question", "it was about the weather": what the target is, which may
# not be what the rest selected; "it was a mistake" says why it goes.
DESCRIBES_TARGET = re.compile(
    r"^\s*(?:it|they|that|this|these|those)\s*(?:'s|'re|\s+(?:is|was|are|were))\s+(?:just\s+|only\s+|all\s+)?"
    r"(?!(?:a|an)\s+(?:mistake|test|typo|duplicate|error)\b)"
    r"(?:a|an|the|about|from|by|mine|yours|ours|his|hers|theirs|my|your|our|their|her)\b",
    re.IGNORECASE,
)
WRONG_TARGET = re.compile(
    r"\bwrong\s+(?:conversation|convo|chat|ticket|thread|session|one|request|turn|message|utterance|seq"
    r"|number|id|entry|line|customer|user)\b",
    re.IGNORECASE,
)
# Why something should go, said in a way that agrees with removing it: a write's
# remark is set aside only when it says so (issue 25 review: "it is still needed",
# "just kidding", "sparing the reply" are not on any list of words to refuse,
# so a write asks for agreement instead).
_AGREES = {
    "remove": re.compile(
        r"\b(?:mistakes?|mistaken(?:ly)?|wrong|errors?|erroneous|typos?|typed|duplicat\w*|unneeded|irrelevant"
        r"|obsolete|outdated|stale|old|cancel+ed|test(?:ing)?|spam|junk|garbage|off[\s-](?:track|topic)"
        r"|sensitive|private|personal|confidential|privacy|gdpr|deletion|erased|deleted|removed|forgotten"
        r"|space|room|clean(?:\s*up)?|start(?:ing)?\s+over|fresh\s+start|(?:new|next)\s+(?:session|customer|patient|caller|client|guest|visitor|passenger|ticket|call)"
        r"|relevant|needed|necessary|ended|(?:has|have|is|are)\s+end|over|finished|closed|resolved|fresh|history|ancient"
        r"|withdr[ae]w[n]?|retracted|took\s+(?:it|that|this)\s+back|changed\s+(?:his|her|their)\s+mind"
        r"|superseded|replaced|invalid|no\s+longer\s+valid|void|voided|handled|moved\s+on)\b",
        re.IGNORECASE,
    ),
    "mark": re.compile(
        r"\b(?:important|key|matters?|critical|essential|vital|crucial|needed|keep)\b", re.I
    ),
    "configure": re.compile(
        r"\b(?:hit(?:ting|s)?|reduce[sd]?|fewer|save[sd]?|saving|costs?|memory|performance|faster|slower|calls"
        r"|room|space|budget|longer|shorter|fits?|overflow\w*|larger|smaller|more|less|long|short|big|small"
        r"|limit\w*)\b",
        re.IGNORECASE,
    ),
}
# Interjections that never change a write ("ugh", "thanks"); "oops", "sorry" and
# "actually" may take it back, so they are not among them.
SAFE_INTERJECTIONS = frozenset(
    "lol lmao haha ugh hmm hm thx thanks thank you cheers please pls plz ty k kk ok okay btw fyi asap "
    "quick quickly real honestly sure".split()
)


def agrees(clause: str, operation: str) -> bool:
    """Whether a write's remark says why in a way that agrees with that write."""
    pattern = _AGREES.get(operation)
    return pattern is not None and pattern.search(_UNNEEDED.sub(" unneeded ", clause)) is not None


# A labelled rationale ("Rationale: larger batches reduce summarizer calls") may
# name what the request is about; it may still not name whose messages.
_SPEAKER_NAMES = frozenset(
    "user users assistant assistants system bot ai human model agent claude customer client caller "
    "patient operator person requester me my mine our ours".split()
)
_READS = frozenset({"retrieve", "summarize", "stats"})
# Words a write's reason may hold ("... to free space for new context"), where a
# read's remark might be asking for them ("I need the context").
_WHY_A_WRITE = frozenset("new fresh context buffer model memory tokens token".split())
_PRONOUNS = frozenset("it it's they they're this that that's i i'm we we're there there's".split())
_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*", re.UNICODE)
_NUMBER = re.compile(NUM, re.IGNORECASE)
_MIN_WORDS = 3
_COPULAS = frozenset("is are was were be been being".split())


def is_remark(clause: str, operation: str | None) -> bool:
    """Whether ``clause`` is a remark that a query asking for ``operation`` may set aside.

    With ``operation`` None, write words are not judged (the caller checks
    them once it knows what the rest of the query asks for).
    """
    if (
        "\u27e6" in clause
        or QUOTED.search(clause)
        or WRONG_TARGET.search(clause)
        or (operation != "store" and DESCRIBES_TARGET.search(clause))
    ):
        return False  # a quoted span is an utterance or a topic, never a remark
    text = _LABEL.sub("", clause, count=1)
    labelled = len(text) != len(clause)
    reason = _REASON.match(text) is not None
    text = _IDIOMS.sub(" ", text)
    text = _KEEP_DOING.sub("are ", text)
    text = _TOO_MUCH.sub("very ", text)  # "too long to pass along": a degree, not "also"
    if operation in (None, "remove"):
        text = _NEXT_PERSON.sub(" finished ", text)
        # "not needed anymore", "don't need the weather stuff": a remove's reason agrees with it.
        text = _UNNEEDED.sub(" unneeded ", text)
    if any(c.isdigit() for c in text) or _NUMBER.search(text):
        return False
    words = [w.lower().replace("\u2019", "'") for w in _WORD.findall(text)]
    stated = any(w in _STATE for w in words)
    if len(words) < _MIN_WORDS and not stated:
        return False
    if not (
        labelled
        or reason
        or stated
        or any(w in _FINITE or w in _CONTRACTED or _past(w) for w in words)
    ):
        return False
    sentence = _subject_then_verb(words)
    if operation in _READS and not (labelled or reason or sentence) and words[0] not in _PRONOUNS:
        # A read's remark about "the X" may be naming what to read ("the weather ones matter");
        # a sentence with a subject and a verb of its own tells ("The model needs the context").
        return False
    for i, word in enumerate(words):
        base = word[:-2] if word.endswith("'s") else word  # "it was the user's"
        asking = base in _SPEAKER_NAMES if labelled else base in _ASKING
        if asking and base in _SPEAKER_NAMES and _narrated(words, i):
            asking = False
        if asking and base in _TOLD_OF and (labelled or reason or sentence):
            asking = False  # "the model needs the complete context": who and why, not what
        if (
            asking
            and base in ("summary", "summaries")
            and operation in (None, "summarize")
            and sentence
        ):
            asking = False  # "The summary will be injected into the next call": the one asked for
        if asking and operation not in _READS and base in _WHY_A_WRITE and reason:
            asking = (
                False  # "to free space for new context": why a write is made, not a read's target
            )
        if base in _NARROWING or asking or word.endswith("n't"):
            return False
        if base in COUNTERMAND and operation not in (None, "store"):
            # A store's "so that it remains available" spares nothing; a setting's "the
            # context kept verbatim" may contradict a smaller buffer (second review).
            return False
        if i and words[i - 1] in _COPULAS:
            continue  # "the boundaries are clear": an adjective, not the verb
        write = WRITE_FORMS.get(word)
        if write is not None and operation is not None and write != operation:
            return False
    return True


# Words an orchestrator's reason holds ("the model's context window", "the next model call")
# that may ask for something in a bare clause but only tell in a sentence of its own.
_TOLD_OF = frozenset("context model buffer new fresh window prompt call operator".split())
_DETERMINERS = frozenset("the a an our this that these those its their his her your".split())
# Verbs in the third person or past that make a clause a statement ("the model needs").
_STATES = frozenset(
    """needs wants requires expects uses gets sees knows relies depends runs matters belongs
    contains holds says asks keeps""".split()
)


def _subject_then_verb(words: list[str]) -> bool:
    """Whether the clause opens with a subject ("the operator", "the end user's session") and its verb."""
    if words and words[0] in ("and", "but", "so", "also") and len(words) > 1:
        words = words[1:]  # "..., and the operator wants ...": the clause's own subject follows
    if not words or words[0] not in _DETERMINERS:
        return False
    for j, word in enumerate(words[1:6], start=1):
        if word in _FINITE or word in _STATES or _past(word):
            return j >= 2  # a determiner and at least one noun before the verb
        if word in _NARROWING or WRITE_FORMS.get(word):
            return False
    return False


# What a speaker's possessive may own that makes it a filter: "his messages", "the user's answer".
_MESSAGE_KINDS = frozenset(
    """message messages utterance utterances answer answers question questions reply replies
    response responses entry entries line lines words statement statements text texts ones one""".split()
)


def _narrated(words: list[str], i: int) -> bool:
    """Whether the speaker word ``words[i]`` is who a remark tells of, not a filter."""
    if words[i] in ("me", "my", "mine", "our", "ours"):
        return False  # "it was mine": what the target is
    if words[i].endswith("'s"):
        # "the end user's follow-up" tells of them; "the user's answer" names a message.
        after = words[i + 1] if i + 1 < len(words) else ""
        return (
            bool(after)
            and after not in _MESSAGE_KINDS
            and not any(w in _MESSAGE_KINDS for w in words[i + 1 : i + 3])
        )
    before = words[i - 1] if i else ""
    if before == "the" and i > 1:
        before = words[i - 2]
    if before in _SPEAKER_OBJECT:
        return True
    after = words[i + 1] if i + 1 < len(words) else ""
    return after in _FINITE or _past(after)
