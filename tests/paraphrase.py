"""Seeded paraphrases of store, retrieve, remove and summarize queries, each with its expected effect.

The generator crosses verbs × headers × speakers × separators × quoting ×
politeness × number forms × word order, and knows for each variant what it
must do to the demo conversation (tests/demo_conversation.py: seqs 1-8,
turns 1-4, the user opens each turn): the exact text and speaker a store
keeps, the seqs a retrieve returns or a remove deletes, the scope and token
limit of a summary. ``judge`` runs a variant through ConversationHistory
and says whether it was understood, refused, or did something else.

Every vocabulary list is split in two by position: the "tuning" split is
what the parser was developed against, the "held-out" split (with its own
seed) is only measured, so its figures say how the rules do on words they
were not fitted to. The phrasings were written for this generator, not
taken from tests/corpus/.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from chd.core.errors import DaemonError
from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from tests.demo_conversation import seed_demo

__all__ = ["Expect", "Variant", "Verdict", "OPERATIONS", "SPLITS", "SEEDS", "variants", "Judge"]

OPERATIONS = ("store", "retrieve", "remove", "summarize")
SPLITS = ("tuning", "held-out")
SEEDS = {"tuning": 12, "held-out": 1207}

# The demo conversation: seq -> (speaker, turn).
_SPEAKER_OF = {seq: ("user" if seq % 2 else "assistant") for seq in range(1, 9)}
_TURN_OF = {seq: (seq + 1) // 2 for seq in range(1, 9)}
_ALL = tuple(range(1, 9))


@dataclass(frozen=True, slots=True)
class Expect:
    """What a variant must do. Unset fields are not checked."""

    operation: str
    text: str | None = None  # store: the text kept, exactly
    speaker: str | None = None  # store: who said it
    seqs: tuple[int, ...] | None = None  # retrieve: returned, in order
    seq_set: frozenset[int] | None = None  # retrieve: returned, any order (topic search)
    removed: tuple[int, ...] | None = None  # remove: deleted
    token_limit: int | None = None  # summarize
    covered: int | None = None  # summarize: utterances covered


@dataclass(frozen=True, slots=True)
class Variant:
    """One generated query, what it must do, and the classes it belongs to (for per-class figures)."""

    operation: str
    query: str
    expect: Expect
    classes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a variant fared: understood, refused, or wrong (with what went wrong)."""

    outcome: str  # "understood" | "refused" | "wrong-operation" | "wrong-text" | "wrong-effect"
    detail: str = ""

    @property
    def wrong(self) -> bool:
        return self.outcome.startswith("wrong")


# --- vocabulary (each list is split in two by position) -----------------------------------


def _half(items: Sequence[str], split: str) -> list[str]:
    """Even positions for tuning, odd ones held out; a one-item list serves both."""
    if len(items) < 2:
        return list(items)
    return list(items[0::2] if split == "tuning" else items[1::2])


_STORE_VERBS = (
    "add", "store", "save", "record", "log", "note", "remember", "keep", "append", "insert",
    "memorize", "write down", "jot down", "put", "file", "capture", "stash", "register",
    "commit", "enter", "note down", "preserve", "retain", "log away", "persist", "push",
)  # fmt: skip
_OBJECTS = (
    "", "this", "the following", "this one", "the next", "the following {noun}", "this {noun}",
    "a {noun}", "a new {noun}", "the next {noun}", "another {noun}", "this {noun} here", "it",
    "the {noun} below", "one more {noun}",
)  # fmt: skip
_NOUNS = (
    "message", "utterance", "reply", "line", "entry", "note", "statement", "response",
    "remark", "comment", "text", "input", "answer", "msg", "snippet", "item",
)  # fmt: skip
_DESTINATIONS = (
    " to the history", " into the conversation", " to memory", " in the log", " to the transcript",
    " for later", " into the buffer", " for future reference", " to the chat", " into memory",
    " in the conversation history", " onto the thread", " for safekeeping", " to the record",
)  # fmt: skip
_SPEAKER_WORDS = {
    "user": ("user", "customer", "human", "user"),
    "assistant": ("assistant", "bot", "AI", "model", "agent", "assistant"),
    "system": ("system", "system"),
}
# How a header names the speaker: {sp} is the speaker's word.
_SPEAKER_FORMS = (
    " from the {sp}", " by the {sp}", " as the {sp}", " on behalf of the {sp}", ", {sp} side",
    " said by the {sp}", " as the {sp}'s {noun}", " (from the {sp})", " from the {sp}'s side",
    " as said by the {sp}", ", the {sp}'s {noun}", " written by the {sp}", " as a {sp} {noun}",
    " (speaker: {sp})", " in the {sp}'s voice", " for the {sp}", ", sender {sp}", " as {sp}",
)  # fmt: skip
# Headers where the speaker stands before the noun: "Add an assistant reply".
_SPEAKER_OBJECTS = (
    "a {sp} {noun}",
    "the {sp}'s {noun}",
    "this {sp} {noun}",
    "the following {sp} {noun}",
    "the next {sp} {noun}",
    "one {sp} {noun}",
    "the {sp} {noun} below",
    "a new {sp} {noun}",
)
_POLITE = (
    "", "please ", "could you ", "kindly ", "would you please ", "can you ", "I'd like you to ",
    "go ahead and ", "hey, ", "ok, ", "please just ", "could you please ", "would you ",
    "I want you to ", "just ",
)  # fmt: skip
_SEPARATORS = (
    ":",
    " -",
    " \u2014",
    "\u2014",
    " \u2013",
    " ->",
    " =>",
    "\n",
    ": ",
    " - ",
    " \u2192",
)
_QUOTES = (
    ('"', '"'),
    ("'", "'"),
    ("\u201c", "\u201d"),
    ("\u2018", "\u2019"),
    ("\u00ab", "\u00bb"),
    ("`", "`"),
)
# (text, tags): "sep" if it holds a separator, "label" if it starts like "Note: ...".
_UTTERANCES: tuple[tuple[str, frozenset[str]], ...] = tuple(
    (text, frozenset(tags.split()))
    for text, tags in (
        ("the gate code is 4411", ""),
        ("Checkout is at 11.", ""),
        ("Call me back at six.", ""),
        ("We fly out Monday.", ""),
        ("Yes, pets are allowed.", ""),
        ("I prefer aisle seats", ""),
        ("Remove all my files please", ""),
        ("Summarize the last 5 messages for me", ""),
        ("delete utterance 3", ""),
        ("Meet me at 10:30 - bring the map", "sep"),
        ('Is the museum "open" on Sundays?', ""),
        ("It's fine, don't worry about it.", ""),
        ("line one\nline two", "sep"),
        ("\u00c7a co\u00fbte 12 \u20ac, merci.", ""),
        ("user: can you hear me?", "sep label"),
        ("Note: the room is 12", "sep label"),
        ("What did the assistant say about Paris?", ""),
        ("thanks", ""),
        ("The flight leaves from gate B7 \u2014 don't be late", "sep"),
        ("Ratio is 3:2 => fine", "sep"),
        ("Okay.", ""),
        ("My email is anna@example.org", ""),
        ("Forget it, I'll walk.", ""),
        ("Show me the last 3 messages", ""),
        ("Can we move dinner to 9pm?", ""),
        ("Your order #5531 shipped today.", ""),
        ("Keep the change", ""),
        ("Save 20% with code SPRING", ""),
        ("The assistant's answer was wrong", ""),
        ("I'll take the 7:15 train", "sep"),
        ("  indented? no, trimmed", ""),
        ("Add two eggs and stir.", ""),
        ("The user said: hello", "sep label"),
        ("'Quoted' is how I'd put it", ""),
        ("\u2014 as discussed, Tuesday", "sep"),
        ("x", ""),
        ("system: reboot at 2am", "sep label"),
        ("Here is the plan, add it to the doc", ""),
        ("Did the assistant say 'Paris'?", ""),
        ("50% off -> today only", "sep"),
        ("Thanks!! See you tomorrow :)", "sep"),
        (" ".join(["The quick brown fox jumps over the lazy dog."] * 40), ""),
    )
)


@dataclass(frozen=True, slots=True)
class _Words:
    """One split's vocabulary."""

    verbs: list[str]
    objects: list[str]
    nouns: list[str]
    destinations: list[str]
    speakers: dict[str, list[str]]
    speaker_forms: list[str]
    speaker_objects: list[str]
    polite: list[str]
    utterances: list[tuple[str, frozenset[str]]]

    @staticmethod
    def of(split: str) -> _Words:
        return _Words(
            _half(_STORE_VERBS, split),
            _half(_OBJECTS, split),
            _half(_NOUNS, split),
            _half(_DESTINATIONS, split),
            {sp: _half(words, split) for sp, words in _SPEAKER_WORDS.items()},
            _half(_SPEAKER_FORMS, split),
            _half(_SPEAKER_OBJECTS, split),
            _half(_POLITE, split),
            [(t.strip(), tags) for t, tags in _half(_UTTERANCES, split)],
        )


# --- stores --------------------------------------------------------------------------------


def _quotable(text: str, quote: tuple[str, str]) -> bool:
    """A text can sit in these quotes if the closing mark cannot be read as an earlier end."""
    closer = quote[1]
    for i, char in enumerate(text):
        if char == closer and not (
            closer in "'\u2019" and i + 1 < len(text) and text[i + 1].isalnum()
        ):
            return False
    return True


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


@dataclass
class _StoreParts:
    rng: random.Random
    w: _Words
    classes: dict[str, str] = field(default_factory=dict)

    def pick(self, name: str, options: Sequence[str]) -> str:
        value = self.rng.choice(list(options))
        self.classes[name] = repr(value.strip()) if value.strip() else "none"
        return value

    def noun(self) -> str:
        return self.rng.choice(self.w.nouns)

    def speaker_phrase(self, speaker: str | None) -> str:
        if speaker is None:
            self.classes["speaker form"] = "none"
            return ""
        form = self.pick("speaker form", self.w.speaker_forms)
        return form.format(sp=self.rng.choice(self.w.speakers[speaker]), noun=self.noun())

    def header(self, speaker: str | None) -> str:
        """'please save this message from the user to the history', parts in either order."""
        polite = self.pick("politeness", self.w.polite)
        verb = self.pick("verb", self.w.verbs)
        if speaker is not None and self.rng.random() < 0.3:
            obj = self.pick("object", self.w.speaker_objects).format(
                sp=self.rng.choice(self.w.speakers[speaker]), noun=self.noun()
            )
            who = ""
            self.classes["speaker form"] = "before the noun"
        else:
            obj = self.pick("object", self.w.objects).format(noun=self.noun())
            who = self.speaker_phrase(speaker)
        where = self.pick("destination", [""] * 3 + self.w.destinations)
        order = self.rng.random() < 0.5
        self.classes["header order"] = (
            "speaker-then-destination" if order else "destination-then-speaker"
        )
        tail = who + where if order else where + who
        words = " ".join(part for part in (verb, obj) if part) + tail
        return _cap(polite + words) if self.rng.random() < 0.6 else polite + words


_SPEECH = (
    "said",
    "asked",
    "answered",
    "replied",
    "wrote",
    "told us",
    "typed",
    "responded",
    "stated",
    "sent",
    "just said",
    "told me",
    "wrote back",
    "has just written",
    "sent over",
)
_AFTER = (" please", ", thanks", " verbatim", ", thank you", " please, exactly as is", " for later")


# Store shapes: (name, template, speaker). {body} is the utterance quoted
# or not, {q} always quoted, {text} never; {header} is a generated
# instruction (verb, object, speaker, destination in either order).
# speaker: "named" shapes need one, "none" shapes cannot name one, "any" fit both.
_STORE_FORMS: tuple[tuple[str, str, str], ...] = (
    ("header, separator, text", "{header}{sep} {body}", "any"),
    ("header, quoted text", "{header} {q}", "any"),
    ("header, quoted text, courtesy after", "{header} {q}{after}", "any"),
    ("speaker label", "{Sp}{sep} {body}", "named"),
    ("speaker and kind label", "{Sp} {noun}{sep} {body}", "named"),
    ("reported speech", "{polite}{verb} that the {sp} {speech}{sep} {body}", "named"),
    ("reported speech, what-clause", "what the {sp} {speech} was{sep} {body}", "named"),
    ("reported speech, here's what", "Here's what the {sp} {speech}{sep} {body}", "named"),
    ("reported speech, the reply was", "The {sp}'s {noun} was{sep} {body}", "named"),
    ("reported speech, this is what", "This is what the {sp} {speech}{sep} {body}", "named"),
    ("speaker said, quoted", "The {sp} {speech}, {q}", "named"),
    ("verbless header", "{Dest}, as the {sp}{sep} {body}", "named"),
    ("verbless header, kind first", "Memory {noun}, {sp} side{sep} {body}", "named"),
    ("verbless header, new message", "New {sp} {noun}{sep} {body}", "named"),
    ("verbless header, incoming", "Incoming from the {sp}{sep} {body}", "named"),
    ("quote in the middle", "Here is the {sp}'s {noun}, {q}, {verb} it", "named"),
    ("text first, quoted", "{q}{sep} that's from the {sp}, {verb} it", "named"),
    ("text first, quoted, speech after", "{q}, the {sp} {speech}", "named"),
    ("text first, unquoted", "{text}{sep} {verb} it, from the {sp}", "named"),
    ("text first, quoted, no speaker", "{q}{sep} {verb} it{dest}", "none"),
    ("remember that", "{polite}remember that {text}", "none"),
)


def _store_forms(speaker: str | None, text: str, tags: frozenset[str]) -> list[tuple[str, str]]:
    """The shapes that fit the speaker, leaving out the ones a text would make ambiguous."""
    fitting = []
    for name, template, needs in _STORE_FORMS:
        if needs != "any" and (needs == "named") != (speaker is not None):
            continue
        if name == "text first, unquoted" and "label" in tags:
            continue  # "Note: the room is 12 - keep it" starts like a store of its own
        if name == "remember that" and (
            "sep" in tags or text.lower().startswith(("the user", "the assistant"))
        ):
            continue
        fitting.append((name, template))
    return fitting


def _store_variant(rng: random.Random, w: _Words) -> Variant:
    parts = _StoreParts(rng, w)
    speaker = rng.choice((None, "user", "assistant", "system", "user", "assistant"))
    text, tags = rng.choice(w.utterances)
    quote = rng.choice([q for q in _QUOTES if _quotable(text, q)])
    sep = parts.pick("separator", _SEPARATORS)
    quoted = rng.random() < 0.4
    q_text = f"{quote[0]}{text}{quote[1]}"
    sp_word = rng.choice(w.speakers[speaker]) if speaker else ""
    name, template = rng.choice(_store_forms(speaker, text, tags))
    values = {
        "sep": sep, "text": text, "q": q_text, "body": q_text if quoted else text,
        "sp": sp_word, "Sp": _cap(sp_word), "noun": parts.noun(), "speech": rng.choice(_SPEECH),
        "verb": rng.choice(w.verbs), "dest": rng.choice(w.destinations), "after": rng.choice(_AFTER),
    }  # fmt: skip
    values["Dest"] = _cap(values["dest"].strip())
    if "{header}" in template:
        values["header"] = parts.header(speaker)
    if "{polite}" in template:
        values["polite"] = parts.pick("politeness", w.polite)
    parts.classes["form"] = name
    parts.classes["quoting"] = (
        f"{quote[0]}{quote[1]}" if "{q}" in template or quoted and "{body}" in template else "none"
    )
    if "{sep}" not in template:
        parts.classes["separator"] = "none"
    parts.classes["speaker"] = speaker or "unnamed"
    query = _surface(rng, template.format(**values), text, parts.classes)
    return Variant(
        "store",
        query,
        Expect("store", text=text, speaker=speaker or "user"),
        tuple(sorted(parts.classes.items())),
    )


def _surface(rng: random.Random, query: str, text: str, classes: dict[str, str]) -> str:
    """Case and spacing people type: the instruction in capitals or lower case, spaces doubled or dropped."""
    at = query.find(text)
    head, tail = query[:at], query[at:]
    style = rng.choice(
        ("as written", "as written", "as written", "lower case", "upper case", "spacing")
    )
    classes["surface"] = style
    if style == "lower case":
        head = head.lower()
    elif style == "upper case":
        head = head.upper()
    elif style == "spacing":
        head = head.replace(": ", ":", 1) if rng.random() < 0.5 else head.replace(" ", "  ", 1)
    return head + tail


# --- reads, removes, summaries -------------------------------------------------------------

_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight")
_ORDINALS = ("zeroth", "first", "second", "third", "fourth")


def _number(rng: random.Random, n: int, classes: dict[str, str]) -> str:
    form = rng.choice(("digits", "words"))
    classes["number form"] = form
    return str(n) if form == "digits" else _NUMBER_WORDS[n]


_READ_VERBS = (
    "get", "show", "show me", "list", "give me", "fetch", "display", "pull up", "retrieve",
    "bring up", "return", "read me", "let me see", "print", "look up", "I need",
)  # fmt: skip
_READ_NOUNS = (
    "messages",
    "utterances",
    "entries",
    "lines",
    "replies",
    "turns of talk",
    "items",
    "things said",
)
_TOPICS = {"Paris": frozenset({1, 2, 4}), "budget": frozenset({7, 8}), "tomorrow": frozenset({3, 4}),
           "8pm": frozenset({5, 6}), "weather": frozenset({1}), "rain": frozenset({4})}  # fmt: skip
_TOPIC_FORMS = (
    "{verb} {noun} about {t}", "{verb} anything on {t}", "{verb} the {noun} mentioning {t}",
    "what was said about {t}", "{verb} the bits that touch on {t}", "{verb} {noun} where {t} was mentioned",
    "find {t}", "{verb} everything regarding {t}", "search for {t}", "{verb} {noun} related to {t}",
    "anything that mentions {t}?", "{verb} what we discussed about {t}",
)  # fmt: skip


def _speaker_seqs(speaker: str | None) -> tuple[int, ...]:
    return tuple(s for s in _ALL if speaker is None or _SPEAKER_OF[s] == speaker)


def _retrieve_variant(rng: random.Random, split: str) -> Variant:
    classes: dict[str, str] = {}
    verb = rng.choice(_half(_READ_VERBS, split))
    noun = rng.choice(_half(_READ_NOUNS, split))
    polite = rng.choice(_half(_POLITE, split))
    kind = rng.choice(("newest", "oldest", "speaker", "seq", "turn", "topic"))
    classes["form"] = kind
    speaker = rng.choice((None, "user", "assistant")) if kind in ("newest", "oldest") else None
    if kind in ("newest", "oldest"):
        n = rng.randint(1, 4)
        pool = _speaker_seqs(speaker)
        want = pool[-n:] if kind == "newest" else pool[:n]
        word = rng.choice(
            _half(("last", "latest", "most recent", "newest", "final"), split)
            if kind == "newest"
            else _half(("first", "oldest", "earliest", "first"), split)
        )
        count = _number(rng, n, classes)
        unit = noun if n > 1 else rng.choice(("message", "utterance", "entry", "line"))
        who = "" if speaker is None else rng.choice((f" from the {speaker}", f" by the {speaker}"))
        query = f"{verb} the {word} {count} {unit}{who}"
        return Variant(
            "retrieve",
            polite + query,
            Expect("retrieve", seqs=want),
            tuple(sorted(classes.items())),
        )
    if kind == "speaker":
        speaker = rng.choice(("user", "assistant"))
        form = rng.choice(_half((
            "{verb} everything the {sp} said", "{verb} all {sp} messages", "{verb} the {sp}'s messages",
            "{verb} only the {sp}'s lines", "{verb} nothing but the {sp}'s lines", "{verb} {sp} lines alone",
            "{verb} all the {sp} wrote so far", "{verb} all the {sp} wrote up to now", "what did the {sp} say?",
            "{verb} just the {sp}'s messages", "{verb} what the {sp} has said", "{verb} every {sp} message",
        ), split))  # fmt: skip
        classes["speaker form"] = form.replace("{verb} ", "")
        return Variant(
            "retrieve",
            polite + form.format(verb=verb, sp=speaker),
            Expect("retrieve", seqs=_speaker_seqs(speaker)),
            tuple(sorted(classes.items())),
        )
    if kind == "seq":
        n = rng.randint(1, 8)
        form = rng.choice(
            _half(
                (
                    "{verb} utterance {n}",
                    "{verb} message #{d}",
                    "{verb} message number {n}",
                    "{verb} entry {n}",
                    "{verb} utterance no. {d}",
                    "{verb} just message {n}",
                ),
                split,
            )
        )
        classes["seq form"] = form.replace("{verb} ", "")
        query = form.format(verb=verb, n=_number(rng, n, classes), d=n)
        return Variant(
            "retrieve",
            polite + query,
            Expect("retrieve", seqs=(n,)),
            tuple(sorted(classes.items())),
        )
    if kind == "turn":
        a = rng.randint(1, 3)
        b = rng.randint(a + 1, 4)
        if rng.random() < 0.5:
            form = rng.choice(
                _half(
                    (
                        "{verb} turn {n}",
                        "{verb} the {o} turn",
                        "{verb} just turn {n}",
                        "what was said in turn {n}?",
                        "{verb} everything from turn {n}",
                    ),
                    split,
                )
            )
            query, want = (
                form.format(verb=verb, n=_number(rng, a, classes), o=_ORDINALS[a]),
                (2 * a - 1, 2 * a),
            )
        else:
            form = rng.choice(
                _half(
                    (
                        "{verb} turns {a} to {b}",
                        "{verb} turns {a} through {b}",
                        "{verb} everything between turns {a} and {b}",
                        "{verb} turns {a}-{b}",
                    ),
                    split,
                )
            )
            query = form.format(verb=verb, a=_number(rng, a, classes), b=_number(rng, b, classes))
            want = tuple(range(2 * a - 1, 2 * b + 1))
        classes["turn form"] = form.replace("{verb} ", "")
        return Variant(
            "retrieve",
            polite + query,
            Expect("retrieve", seqs=want),
            tuple(sorted(classes.items())),
        )
    topic = rng.choice(list(_TOPICS))
    form = rng.choice(_half(_TOPIC_FORMS, split))
    classes["topic form"] = form.replace("{verb} ", "")
    query = form.format(verb=verb, noun=noun, t=topic)
    return Variant(
        "retrieve",
        polite + query,
        Expect("retrieve", seq_set=_TOPICS[topic]),
        tuple(sorted(classes.items())),
    )


_REMOVE_VERBS = (
    "remove", "delete", "erase", "drop", "forget", "discard", "purge", "scrap", "throw away",
    "strike", "trash", "wipe", "get rid of", "clear out", "take out", "eliminate", "ditch", "toss",
)  # fmt: skip


def _remove_variant(rng: random.Random, split: str) -> Variant:
    classes: dict[str, str] = {}
    verb = rng.choice(_half(_REMOVE_VERBS, split))
    classes["verb"] = verb
    polite = rng.choice(_half(_POLITE, split))
    kind = rng.choice(("seq", "oldest", "newest", "before turn", "turn", "speaker"))
    classes["form"] = kind
    if kind == "seq":
        n = rng.randint(1, 8)
        form = rng.choice(
            _half(
                (
                    "{v} utterance {n}",
                    "{v} message #{d}",
                    "{v} the entry numbered {n}",
                    "{v} message number {n}",
                    "{v} utterance {n} please",
                    "{v} item {d}",
                ),
                split,
            )
        )
        query, removed = form.format(v=verb, n=_number(rng, n, classes), d=n), (n,)
    elif kind in ("oldest", "newest"):
        n = rng.randint(2, 4)
        words = (
            ("oldest", "first", "earliest")
            if kind == "oldest"
            else ("last", "newest", "most recent", "latest")
        )
        form = rng.choice(
            _half(
                (
                    "{v} the {k} {n} messages",
                    "{v} the {n} {k} messages",
                    "{v} the {k} {n} utterances",
                    "{v} the {n} {k} entries",
                ),
                split,
            )
        )
        query = form.format(v=verb, k=rng.choice(words), n=_number(rng, n, classes))
        removed = _ALL[:n] if kind == "oldest" else _ALL[-n:]
    elif kind == "before turn":
        n = rng.randint(2, 4)
        form = rng.choice(
            _half(
                (
                    "{v} every turn before turn {n}",
                    "{v} whatever came before turn {n}",
                    "{v} everything prior to turn {n}",
                    "{v} all messages before turn {n}",
                    "{v} everything older than turn {n}",
                    "{v} the turns before turn {n}",
                ),
                split,
            )
        )
        query = form.format(v=verb, n=_number(rng, n, classes))
        removed = tuple(s for s in _ALL if _TURN_OF[s] < n)
    elif kind == "turn":
        n = rng.randint(1, 4)
        form = rng.choice(
            _half(
                (
                    "{v} turn {n}",
                    "{v} the {o} turn",
                    "{v} everything in turn {n}",
                    "{v} all of turn {n}",
                ),
                split,
            )
        )
        query = form.format(v=verb, n=_number(rng, n, classes), o=_ORDINALS[n])
        removed = (2 * n - 1, 2 * n)
    else:
        speaker = rng.choice(("user", "assistant"))
        form = rng.choice(
            _half(
                (
                    "{v} everything the {sp} said",
                    "{v} all {sp} messages",
                    "{v} all of the {sp}'s messages",
                    "{v} every message from the {sp}",
                ),
                split,
            )
        )
        query = form.format(v=verb, sp=speaker)
        removed = _speaker_seqs(speaker)
    classes["phrase"] = form.replace("{v} ", "")
    return Variant(
        "remove", polite + query, Expect("remove", removed=removed), tuple(sorted(classes.items()))
    )


_SUMMARY_NOUNS = ("summary", "synopsis", "overview", "digest", "rundown", "wrap-up", "recap", "precis",
                  "abstract", "gist", "brief summary", "outline")  # fmt: skip
_SUMMARY_VERBS = ("summarize", "summarise", "sum up", "recap", "condense", "boil down", "give me {a} of",
                  "write {a} of", "make {a} of", "produce {a} of")  # fmt: skip
_LIMIT_WORDS = {
    40: "forty",
    60: "sixty",
    80: "eighty",
    100: "one hundred",
    150: "a hundred and fifty",
}
_LIMITS = (
    "in {n} tokens", "in under {n} tokens", "within {n} tokens", "[max {n} tokens]", "using no more than {n} tokens",
    "staying below {n} tokens", "capped at {n} tokens", "in at most {n} tokens", "(limit: {n} tokens)",
    "in no more than {n} tokens", "under {n} tokens", "with a {n} token limit",
)  # fmt: skip


def _summarize_variant(rng: random.Random, split: str) -> Variant:
    classes: dict[str, str] = {}
    polite = rng.choice(_half(_POLITE, split))
    noun = rng.choice(_half(_SUMMARY_NOUNS, split))
    article = "an" if noun[0] in "aeiou" else "a"
    verb = rng.choice(_half(_SUMMARY_VERBS, split)).format(a=f"{article} {noun}")
    classes["verb"] = verb
    scope = rng.choice(("conversation", "turns"))
    classes["scope"] = scope
    if scope == "conversation":
        target, covered = (
            rng.choice(("the conversation", "the chat", "everything", "the whole history")),
            8,
        )
    else:
        a = rng.randint(1, 3)
        b = rng.randint(a + 1, 4)
        target, covered = f"turns {a} to {b}", 2 * (b - a + 1)
    limit = None
    query = f"{verb} {target}"
    if rng.random() < 0.7:
        limit = rng.choice((40, 60, 80, 100, 150))
        form = rng.choice(_half(_LIMITS, split))
        classes["limit form"] = form
        spelled = rng.random() < 0.3
        classes["number form"] = "words" if spelled else "digits"
        phrase = form.format(n=_LIMIT_WORDS[limit] if spelled else limit)
        query = f"{query} {phrase}" if rng.random() < 0.7 else f"{phrase}, {query}"
    else:
        classes["limit form"] = "none"
    return Variant(
        "summarize",
        polite + query,
        Expect("summarize", token_limit=limit, covered=covered),
        tuple(sorted(classes.items())),
    )


_BUILDERS: dict[str, Callable[[random.Random, str], Variant]] = {
    "store": lambda rng, split: _store_variant(rng, _Words.of(split)),
    "retrieve": _retrieve_variant,
    "remove": _remove_variant,
    "summarize": _summarize_variant,
}


def variants(
    operation: str, count: int, split: str = "tuning", seed: int | None = None
) -> list[Variant]:
    """``count`` distinct variants of ``operation`` (fewer if the space runs out), in a seeded order."""
    rng = random.Random(f"{operation}:{SEEDS[split] if seed is None else seed}")
    build = _BUILDERS[operation]
    seen: dict[str, Variant] = {}
    for _ in range(count * 20):
        if len(seen) >= count:
            break
        variant = build(rng, split)
        seen.setdefault(variant.query, variant)
    return list(seen.values())


# --- judging -------------------------------------------------------------------------------


class Judge:
    """Runs variants on a fresh demo conversation each and judges them by their effect."""

    def __init__(self) -> None:
        self._history: ConversationHistory | None = None
        self._pristine: object = None

    def _fresh(self) -> ConversationHistory:
        if self._history is not None and self._history.backend.read("default") == self._pristine:
            return self._history
        if self._history is not None:
            self._history.close()
        self._history = ConversationHistory(settings=Settings())
        seed_demo(self._history)
        self._pristine = self._history.backend.read("default")
        return self._history

    def close(self) -> None:
        if self._history is not None:
            self._history.close()

    def __call__(self, variant: Variant) -> Verdict:
        history = self._fresh()
        try:
            outcome = history.query(variant.query)
        except DaemonError as error:
            if history.backend.read("default") != self._pristine:
                return Verdict("wrong-effect", f"refused but changed the conversation: {error}")
            return Verdict("refused", str(error).splitlines()[0][:200])
        expect = variant.expect
        if outcome.operation != expect.operation:
            return Verdict("wrong-operation", f"ran {outcome.operation}: {_short(outcome.result)}")
        return _check(expect, outcome.result, history)


def _short(result: object) -> str:
    return repr(result)[:160]


def _check(expect: Expect, result: dict, history: ConversationHistory) -> Verdict:  # type: ignore[type-arg]
    state = history.backend.read("default")
    if expect.operation == "store":
        stored = state.utterances[-1]
        if stored.text != expect.text:
            return Verdict("wrong-text", f"stored {stored.text!r}")
        if stored.speaker != expect.speaker:
            return Verdict("wrong-effect", f"stored as {stored.speaker}")
    elif expect.operation == "retrieve":
        hits = [u["seq"] for u in result.get("utterances", [])]
        if expect.seqs is not None and hits != list(expect.seqs):
            return Verdict("wrong-effect", f"returned {hits}")
        if expect.seq_set is not None and set(hits) != expect.seq_set:
            return Verdict("wrong-effect", f"returned {hits}")
    elif expect.operation == "remove":
        left = {u.seq for u in state.utterances}
        removed = tuple(s for s in _ALL if s not in left)
        if removed != expect.removed:
            return Verdict("wrong-effect", f"removed {list(removed)}")
    elif expect.operation == "summarize":
        if expect.token_limit is not None and result["token_limit"] != expect.token_limit:
            return Verdict("wrong-effect", f"token_limit {result['token_limit']}")
        if (
            expect.token_limit is None
            and result["token_limit"] != history.settings.summary_token_limit
        ):
            return Verdict("wrong-effect", f"token_limit {result['token_limit']} not the default")
        if expect.covered is not None and result["utterances_covered"] != expect.covered:
            return Verdict("wrong-effect", f"covered {result['utterances_covered']}")
    return Verdict("understood")


def judged(items: Sequence[Variant]) -> Iterator[tuple[Variant, Verdict]]:
    """Each variant with its verdict, on one Judge."""
    judge = Judge()
    try:
        for variant in items:
            yield variant, judge(variant)
    finally:
        judge.close()
