"""The instruction words around a stored utterance: who said it, and whether every word is understood.

A store's instruction ("Note the following from the assistant", "Into the
history, as the user", "that's from the user, keep it") may name the verb,
the speaker, the destination and the kind of message in any order, so it is
read as a set of words rather than as one sentence pattern. Every word must
be one of the words below: a store is a write, and a write acts only on
instructions it fully understands. Words that change meaning ("not",
"don't", "delete", a number, a question mark) are deliberately absent, so
an instruction using them is refused instead of read as if they were not there.

The instruction is short by construction (grammar/store.py never hands this
module more than ``store.HEAD_LIMIT`` characters), so the utterance itself,
however long, is never read here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chd.core.language.grammar.normalize import SCOPE, WRITE_FORMS, Normalizer
from chd.core.language.grammar.remarks import is_remark
from chd.core.language.grammar.vocab import speaker_of
from chd.core.language.numbers import NUM

__all__ = ["Header", "read_header", "commentary", "is_note", "trailing_note", "STORE_VERBS"]

STORE_VERBS = frozenset(
    """add adding store storing save saving record recording log logging note noting
    remember keep append appending insert memorize memorise write jot put file enter
    capture stash retain preserve register commit persist push include post type paste
    submit attach pop stick track""".split()
)
# A speaker's words, reported: "the user told us", "what the assistant answered was".
_SPEECH = frozenset(
    """said says say wrote writes written asked asks answered answers replied replies
    responded responds told tells typed types sent sends stated states mentioned mentions
    added went goes spoke spoken saying uttered voiced posted shared messaged texted
    remarked commented explained reported noted came comes speaking talking""".split()
)
_SPEAKERS = frozenset(
    """user human customer assistant bot ai model agent claude system patient visitor guest passenger
    traveller traveler shopper buyer""".split()
)
# Where an utterance goes: with a preposition, these name the destination of a write.
_DESTINATIONS = frozenset(
    """conversation history memory buffer chat log transcript record records thread session
    context dialog dialogue convo timeline logbook notes journal list minutes ticket case""".split()
)
_INTO = frozenset("into to onto in".split())
# Nouns that name one utterance ("user message", "memory entry").
_NOUNS = frozenset(
    """utterance message turn line reply response statement entry note question answer text
    comment remark quote input output prompt item bit piece words word content sentence msg
    notice notification alert announcement warning event status
    memo snippet fact reminder one thing body string phrase request instruction update
    feedback complaint greeting query concern thought observation correction confirmation
    apology objection suggestion preference info information detail details""".split()
)
# Several utterances ("Add these messages", "Store the following utterances"):
# a store-many's instruction, its utterances in data.utterances (issue 31).
_PLURAL_NOUNS = frozenset("utterances messages turns lines entries items".split())
# Pointers ("this", "the following"), courtesy ("could you please"), glue
# ("as", "from", "on behalf of") and words that say how to keep it ("verbatim").
_OTHER = frozenset(
    """the a an this that these following below next here there is it its new another
    please kindly could can would will shall should you i i'd i'm like want need mind
    go ahead and just quickly quick thanks thank pls cheers also hey hi hello ok okay so
    now then right away up for later reference future down with as follows what who
    which was were be us me my our we here's that's it's let's let there's help kind
    if possible verbatim exactly word literally is saying reads reading side role speaker
    part behalf voice author sender source tagged labelled labeled attributed from by of
    on own safekeeping safe keeping real above more self make take set hold incoming
    latest newest fresh long term running back over out know fyi btw way heads record
    them him her end level next under belongs belong belonging""".split()
)
# Words an instruction cannot end with: what follows them is part of it, not the utterance.
_DANGLING = frozenset(
    "speaker sender author source role voice from by as of to into onto in the a an and with for on behalf".split()
)
# What may come before the verb of an imperative: "hey, could you please just save ...";
# a negation too, so that "Don't save this: ..." is refused as the store it mentions.
_LEAD = frozenset(
    """please kindly could can would will you i i'd like want need to go ahead and just quickly
    also hey hi hello ok okay so now then pls mind if possible let's let us me now
    don't do not never""".split()
)
# "attributed to the assistant", "belongs to the user": who said it, not whom it was said to.
_ASSIGNED = frozenset(
    "attributed attribute belongs belong belonging assigned assign credited credit".split()
)
_CLAUSE = re.compile(r"[,;.!()\[\]]")
# Known after a subject ("the user has just written"), a question at the start ("Has the user ...").
_AUXILIARIES = frozenset("has have had".split())
_KNOWN = STORE_VERBS | _SPEECH | _SPEAKERS | _DESTINATIONS | _INTO | _NOUNS | _PLURAL_NOUNS | _OTHER
# Issue 25: "stroe", "msg", "plz", "saved" read as "store", "message", "please", "save".
# Without lemmas: "including" must not become the store verb "include".
_NORMALIZER = Normalizer(_KNOWN, lemmas=False)

# Where the utterance is, said instead of given: "the utterance given in data.text",
# "(speaker from metadata)". The words point elsewhere; they add nothing to read.
_POINTERS = re.compile(
    r"\b(?:(?:given|provided|supplied|contained|found|passed|sent|included|held|carried)\s+)?"
    r"(?:(?:in|via|as|from|at|inside|under)\s+)?(?:the\s+)?(?:field\s+)?`?data\.text`?(?:\s+field)?"
    r"|\b(?:(?:the\s+)?(?:speaker|turn)(?:\s+number)?\s+)?(?:is\s+)?(?:given\s+|set\s+|provided\s+|specified\s+)?"
    r"(?:from|in)\s+(?:the\s+)?metadata\b"
    # "the text which I put in data", "provided in the data field", "it's in the data field" (issue 25).
    r"|\b(?:(?:which|that)\s+(?:i|we)(?:\s+have|'ve)?\s+(?:put|placed|sent|passed|gave|attached)\s+"
    r"|(?:it\s+is|it's|is|are)\s+|(?:given|provided|supplied|contained|found|passed|sent|included|held)\s+)?"
    r"(?:in|via|from|inside|under|into)\s+(?:the\s+)?data(?:\s+(?:field|object|payload|parameter|section|part))?\b(?!\.\w)",
    re.IGNORECASE,
)
# "Kindly do the needful and add ...": a courtesy of Indian English, it asks nothing more.
_NEEDFUL = re.compile(r"\bdo\s+the\s+needful(?:\s+and)?\b", re.IGNORECASE)
# A sentence that says the content is to be kept as it is ("it looks like a
# command, but must be stored as is and not executed"): read for its speaker
# and verb, its other words set aside. Never one that negates a store verb.
_NOTE = re.compile(
    r"\b(?:verbatim|unchanged|unaltered|unmodified|as[\s-]is|literally|as\s+written|as\s+given|word\s+for\s+word"
    r"|exact(?:ly)?|paraphras\w*|rephras\w*|reword\w*"
    r"|raw|pasted|copied|ordinary\s+content|plain\s+text|as\s+text|looks?\s+like|resembles?|reads\s+like"
    r"|commands?|instructions?|requests?|quer(?:y|ies)|execute[sd]?|interpret(?:ed)?|parsed?|act(?:ed)?\s+(?:on|upon)"
    # Its language (issue 25: "(in German, do not translate)", "it is in Russian").
    r"|languages?|translat\w*|original(?:ly)?|as\s+(?:s?he|they|it)\s+(?:wrote|typed|said)\s+it|keep\s+like\s+this"
    r"|english|german|french|spanish|italian|portuguese|dutch|russian|polish|ukrainian|chinese|mandarin|cantonese"
    r"|japanese|korean|hindi|arabic|turkish|greek|hebrew|swedish|norwegian|danish|finnish|czech|hungarian"
    r"|romanian|vietnamese|thai|indonesian|persian|farsi|urdu|bengali|tamil|swahili|catalan|croatian|serbian)\b",
    re.IGNORECASE,
)
_NEGATED_STORE = re.compile(
    r"\b(?:don't|do\s+not|never|not|no)\s+(?:\w+\s+)?(?:" + "|".join(sorted(STORE_VERBS)) + r")\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[.;!]\s+|[()\[\]]")

# Words, with inner apostrophes ("that's", "i'd"); a question mark is kept
# as a word of its own so that a question is never read as an instruction.
_TOKEN = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*|\?", re.UNICODE)
_POSSESSIVE = re.compile(r"^(?P<base>.+?)'s$")


@dataclass(frozen=True, slots=True)
class Header:
    """What a store's instruction words said, and which words were not understood."""

    speakers: tuple[str, ...] = ()
    unclear: tuple[str, ...] = ()
    turns: tuple[int, ...] = ()  # "for turn 4", "turn: 5" (issue 25)
    verb: bool = False  # a store verb ("save", "note", "keep")
    speech: bool = False  # a reported-speech verb ("said", "answered")
    destination: bool = False  # "into the history", "to memory"
    noun: bool = False  # "message", "entry" (not "note" or "record", verbs first)
    imperative: bool = (
        False  # a clause starts with a store verb ("Please save ...", "..., keep it")
    )

    @property
    def understood(self) -> bool:
        return not self.unclear

    @property
    def asks_store(self) -> bool:
        """Whether these words, read in full, ask for a store: a verb, a destination, a reported speaker."""
        return self.verb or self.destination or (self.speech and bool(self.speakers))

    @property
    def attempts_store(self) -> bool:
        """Whether these words insist on a store even with unclear words among them.

        Only an imperative store verb ("Save ...", "..., keep it") insists: a
        verb that may be a noun elsewhere ("Show the log") leaves the query to
        the other operations.
        """
        return self.imperative or self.destination or (self.speech and bool(self.speakers))

    def speaker(self) -> str | None:
        distinct = sorted(set(self.speakers))
        return distinct[0] if len(distinct) == 1 else None

    def joined(self, other: Header) -> Header:
        if other is _NO_WORDS:  # frozen, so either side may stand for the join
            return self
        if self is _NO_WORDS:
            return other
        return Header(
            self.speakers + other.speakers,
            self.unclear + other.unclear,
            self.turns + other.turns,
            self.verb or other.verb,
            self.speech or other.speech,
            self.destination or other.destination,
            self.noun or other.noun,
            self.imperative or other.imperative,
        )


_NO_WORDS = Header()
_LENIENT_LIMIT = 400
_HEDGE = re.compile(
    r"\b(?:maybe|perhaps|possibly|probably|might|unsure|not\s+sure|if\s+needed)\b", re.I
)
_DESCRIBES_CONTENT = re.compile(
    r"\b(?:words?|phrases?|terms?|text|contains?|containing|says|reads|following|below|above)\b",
    re.I,
)
# Where a store's instruction may be cut into clauses: sentence ends, commas,
# dashes, and a reason ("so that ...") that follows the request.
_HEADER_CLAUSE = re.compile(
    r"[;.!?]+(?=\s|$)|,|\s[\u2014\u2013-]+\s|[\u2014\u2013]|(?=\bso\s+that\b)", re.IGNORECASE
)
# "Can you log what the user just said?" is a request, not a question.
_POLITE_QUESTION = re.compile(
    r"\b(?:can|could|would|will)\s+you\s+(?:please\s+|kindly\s+|just\s+|also\s+)*(?:"
    + "|".join(sorted(STORE_VERBS))
    + r")\b[^?]{0,200}\?",
    re.IGNORECASE,
)


# Readings of short instructions, which clients repeat ("Add user utterance"):
# reading one costs ~15 us of a store's ~100 in the core. Only a text whose
# every word the rules read as their own is kept (no clause set aside as
# commentary, no sentence set aside as a note): the cache holds no words of an
# utterance but instruction vocabulary (review of issue 31: "Save this for
# later, it was a lovely day" was kept, its remark set aside).
_KEPT_READINGS: dict[str, Header] = {}
_KEPT_LIMIT = 512
_KEPT_CHARS = 64


def read_header(text: str) -> Header:
    """Read the instruction words of ``text`` (a bounded prefix or suffix of the query).

    Issue 25: callers explain a store ("Store the system prompt so that it
    remains available for later turns: ...", "Pop this in as an assistant
    reply, would ya: ..."). When some words are not understood, the words are
    read again clause by clause: a clause that names no speaker, turn, number,
    negation or store and is commentary or a remark (grammar/remarks.py) is
    set aside, and the rest must then be understood in full and ask for a store.
    """
    kept = _KEPT_READINGS.get(text)
    if kept is not None:
        return kept
    header, whole = _read_header(text)
    if whole and len(text) <= _KEPT_CHARS and _NOTE.search(text) is None:
        if len(_KEPT_READINGS) >= _KEPT_LIMIT:
            _KEPT_READINGS.clear()  # bounded; the few instructions in use come back at once
        _KEPT_READINGS[text] = header
    return header


def reads_whole(text: str) -> bool:
    """Whether the rules read every word of ``text`` as their own, setting no clause aside."""
    return _read_header(text)[1]


# "What said the assistant in turn 2 - ...": a non-native question, never a reported store.
_INVERTED_QUESTION = re.compile(
    r"^\W*(?:what|which)\s+(?:(?:\w+\s+)?(?:said|wrote|answered|replied|asked|told|sent)\s+(?:the\s+)?\w+"
    r"|(?:was|were|is)\s+(?:the\s+)?\w+\s+(?:saying|writing|asking|answering|telling|replying)\b"
    r"|(?!the\b)\w+\s+(?:was|were|is)\s+(?:saying|writing|asking|answering|telling|replying)\b)",
    re.IGNORECASE,
)


def _read_header(text: str) -> tuple[Header, bool]:
    """The reading, and whether every word was read as the rules' own (no clause set aside)."""
    if _INVERTED_QUESTION.match(text):
        return Header(unclear=("(a question, not a store)",)), False
    text = _POLITE_QUESTION.sub(lambda m: m.group(0)[:-1], text)
    header = _read_words(text)
    if header.understood or len(text) > _LENIENT_LIMIT:
        return header, header.understood
    kept: list[Header] = []
    set_aside = False
    for clause in _HEADER_CLAUSE.split(text):
        if not clause or clause.isspace():
            continue
        part = _read_words(clause)
        if part.understood:
            kept.append(part)
        elif _aside(clause, part):
            set_aside = True
        else:
            return header, False
    if not set_aside or not kept:
        return header, False
    joined = _NO_WORDS
    for part in kept:
        joined = joined.joined(part)
    return (joined if joined.asks_store or joined.speakers else header), False


def _aside(clause: str, part: Header) -> bool:
    """Whether an unclear clause of a store's instruction may be set aside."""
    if part.speakers or part.turns or part.verb or part.speech:
        return False
    if _HEDGE.search(clause):
        return False  # "Save this for later, maybe": a write asked in doubt is not asked
    if _DESCRIBES_CONTENT.search(clause):
        return False  # "It contains the word 'delete'": about the utterance, maybe introducing it
    return commentary(clause) or is_remark(clause, "store")


def _read_words(text: str) -> Header:
    if not text or text.isspace():
        # Nothing before or after a quote, as in most stores: two of the three
        # readings of "Add user utterance: '...'" (~3 us each).
        return _NO_WORDS
    text = _POINTERS.sub(" ", text)
    text = _NEEDFUL.sub(" ", text)
    words: list[str] = []
    noted: set[int] = set()
    for sentence in _SENTENCE.split(text):
        note = _NOTE.search(sentence) is not None and _NEGATED_STORE.search(sentence) is None
        for raw in _TOKEN.findall(sentence):
            for word in _NORMALIZER.word(raw.lower().replace("\u2019", "'")).split():
                if note:
                    noted.add(len(words))
                words.append(word)
    speakers: list[str] = []
    unclear: list[str] = []
    turns: list[int] = []
    verb = speech = destination = noun = False
    for i, word in enumerate(words):
        if word.isdigit() and i > 0 and words[i - 1] in ("turn", "turn_number"):
            turns.append(int(word))
            continue
        if i in noted and not word.isdigit() and word not in _SPEAKERS and not word.endswith("'s"):
            verb = verb or word in STORE_VERBS
            continue
        possessive = _POSSESSIVE.match(word)
        base = (
            possessive.group("base")
            if possessive and possessive.group("base") in _SPEAKERS
            else word
        )
        if base in _SPEAKERS:
            # "a message to the user" names whom it was said to, not who said it.
            before = words[i - 1] if i else ""
            if before == "the" and i > 1:
                before = words[i - 2]
            by_hearer = before == "by" and bool(_HEARD.intersection(words[max(0, i - 4) : i]))
            addressed = (
                before in ("to", "for", "told", "tell", "telling", "asked", "answered", "informed")
                or by_hearer
                or bool(_RECEIVED.match(" ".join(words[i + 1 : i + 4])))
            ) and not _ASSIGNED.intersection(words[max(0, i - 4) : i])
            if addressed and base == word:
                unclear.extend(("to", word))
                continue
            speakers.append(speaker_of(base))
        elif word not in _KNOWN and not (word in _AUXILIARIES and i > 0):
            # "the user has written: ..." reports; "Has the user written ...?" asks.
            unclear.append(word)
        verb = verb or word in STORE_VERBS
        speech = speech or word in _SPEECH
        noun = noun or (word in _NOUNS and word not in STORE_VERBS)  # "note", "log" are verbs first
        if word in _DESTINATIONS and any(w in _INTO for w in words[max(0, i - 3) : i]):
            destination = True
    owned = len(words) > 1 and words[-2].endswith("'s")  # "in the user's voice" is complete
    if words and words[-1] in _DANGLING and not owned:
        # "Add this, speaker: user - hi": a header cannot end waiting for its value.
        unclear.append(f"{words[-1]} (at the end, before the text)")
    return Header(
        tuple(speakers),
        tuple(unclear),
        tuple(turns),
        verb,
        speech,
        destination,
        noun,
        _imperative(text),
    )


def is_note(text: str) -> bool:
    """Whether every sentence of ``text`` is a note that the content is to be kept as it is."""
    sentences = [t for t in _SENTENCE.split(text) if t.strip(" ,.;:!")]
    return bool(sentences) and all(
        _NOTE.search(t) is not None and _NEGATED_STORE.search(t) is None for t in sentences
    )


def commentary(text: str) -> bool:
    """Whether the words after a stored utterance are commentary that may be set aside.

    Issue 25's safety rule: no number, speaker, negation, scope or write word,
    and no store verb (those would be instruction, read as such).
    """
    words = [w.lower().replace("\u2019", "'") for w in _TOKEN.findall(text)]
    if not words or "?" in words:
        return False
    for word in words:
        base = _POSSESSIVE.sub(r"\g<base>", word)
        if (
            any(c.isdigit() for c in word)
            or word.endswith("n't")
            or base in _SPEAKERS
            or word in SCOPE
            or word in WRITE_FORMS
            or word in _PLACE_WORDS  # "(in conversation sales)": where to store it
            or _NORMALIZER.word(word) in STORE_VERBS | _SPEECH
        ):
            return False
    return True


# "(no follow-up needed)", "(yes again, don't ask)": negations that deny nothing of the store.
_IDLE_NEGATION = re.compile(
    r"\bno\s+[\w-]+\s+(?:needed|required|necessary)\b|\bdon't\s+ask\b|\bno\s+(?:action|reply)\b",
    re.I,
)
# Nouns a number may follow in a note without being a turn or a seq: "ticket 4471", "room 12".
_NUMBERED = frozenset(
    """ticket case order invoice room ref reference account booking reservation table gate
    flight bed ward desk line extension ext po id""".split()
) - {"line", "id"}
# "ticket four" is rare; "room one" too: a number after such a noun is still a reference.
_NUMBERED_REF = re.compile(
    r"\b(?:ticket|case|order|invoice|room|ref|reference|account|booking|reservation|table|gate|flight|bed)\s+\S+",
    re.IGNORECASE,
)
# Who a note tells of, not who spoke: "told the patient", "asked him", "for this caller".
_TOLD = frozenset("told tell telling asked to".split())
# "the customer was told", "the reply the customer got": the one spoken to (third review).
_HEARD = frozenset("heard read seen received shown given sent told".split())
_RECEIVED = re.compile(
    r"(?:(?:was|were|is|got|has\s+been|will\s+be|is\s+being|gets)\s+(?:told|asked|answered|given|sent|informed|shown)"
    r"|got|gets|received"
    r"|receives|heard|hears|saw|sees|read|reads)\b"
)
_OBJECT_OF = frozenset("told tell telling to for with asked gave helped called this that".split())


# Words that would say where or in which turn to store: a note holding one is instruction.
_PLACE_WORDS = frozenset(
    """turn turns seq seqs archive archived archives conversation conversations history buffer
    memory summary thread session timeline""".split()
)
_NOTE_QUOTES = re.compile(
    "[\"`\u201c\u201d\u201e\u201f\u00ab\u00bb\u2039\u203a\u300c\u300d\u300e\u300f\uff02]|(?:^|\\s)'"
)
_NUMBER_WORD = re.compile(rf"\b{NUM}\b", re.IGNORECASE)


def trailing_note(text: str, spoken: bool = False) -> Header | None:
    """The speakers a note after a quoted utterance names, or None if it may not be set aside.

    The quotes make the utterance certain; what follows may only say who
    spoke (as the subject of a verb: "caller asked"), or be about the
    utterance ("patient at the desk", "already told him", "ticket 4471").
    It may not ask for anything, name a turn or seq, deny or hedge the store.
    """
    if (
        "?" in text
        or _HEDGE.search(text)
        or _NEGATED_STORE.search(text)
        or _NOTE_QUOTES.search(text)  # a second quoted text would be lost
    ):
        return None
    plain = _IDLE_NEGATION.sub(" ", text)
    if _NUMBER_WORD.search(_NUMBERED_REF.sub(" ", plain)):
        return None  # "(turn three)": a number in words may be a turn
    words = [w.lower().replace("\u2019", "'") for w in _TOKEN.findall(plain)]
    if not words:
        return None
    speakers: list[str] = []
    addressed: list[str] = []
    told = True  # every person addressed was spoken to ("told the patient"), not acted for
    for i, word in enumerate(words):
        if word in _PLACE_WORDS:
            return None
        before = words[i - 1] if i else ""
        if before == "the" and i > 1:
            before = words[i - 2]
        base = _POSSESSIVE.sub(r"\g<base>", word)
        if any(c.isdigit() for c in word):
            if before not in _NUMBERED:
                return None
            continue
        if (
            word in ("not", "no", "never", "only", "except", "but", "instead", "rather")
            or word.endswith("n't")
            or word in WRITE_FORMS
            or _NORMALIZER.word(word) in STORE_VERBS
        ):
            return None
        base = _NORMALIZER.word(base)  # "caller", "end user": the lexicon's names of speakers
        after = " ".join(words[i + 1 : i + 3])
        if base in _SPEAKERS:
            heard_by = before == "by" and bool(_HEARD.intersection(words[max(0, i - 4) : i]))
            if before in _OBJECT_OF or heard_by or _RECEIVED.match(after):
                addressed.append(speaker_of(base))
                told = told and before in _TOLD
            else:
                speakers.append(speaker_of(base))
    if addressed and speakers and told:
        return Header(
            speakers=tuple(speakers)
        )  # "the assistant told the patient": who spoke is said
    if addressed and (speakers or not spoken):
        # "— reply to the customer" with no speaker said: whose words these are is a guess;
        # "— agent typing for the customer": both named, either could be the speaker.
        return Header(unclear=(f"{text.strip()[:40]} (who said it?)",))
    return Header(speakers=tuple(speakers))


def _imperative(text: str) -> bool:
    """Whether a clause of ``text`` starts (after courtesy) with a store verb."""
    for clause in _CLAUSE.split(text):
        for word in _TOKEN.findall(clause):
            word = _NORMALIZER.word(word.lower()).split(" ")[0]
            if word not in _LEAD:
                if word in STORE_VERBS:
                    return True
                break
    return False
