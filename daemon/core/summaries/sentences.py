"""Sentences and facts of utterance text, in time linear in its length.

The splitter ends a sentence at a run of ``.``, ``!`` or ``?`` followed by
white space (or the end), and at a line break: "3.11.6", "src/app.py",
"https://x.org/a.b" and "ana@example.com" hold dots that are followed by a
character, so they stay whole (issue 13: "3.11.6" used to become "3.").
No pattern here has a repetition inside a repetition or a failing tail
after an unbounded run, so no text can make matching slower than linear
(issue 14: ``[^.!?\\n]+(?:[.!?]+|$)`` was quadratic on a long line
followed by a newline).

A fact is what a summary must keep word for word: names (capitalised words
not at a sentence start, or known as names elsewhere; "The Linden Inn",
"Seed & Sprout"), numbers with the unit after them and the month or label
before them ("3.1 by 2.4 metres"), codes (TCK-48213, LT1200, #4101),
versions with the lower-case name before them ("pydantic 2.7.0"), paths,
URLs, e-mail addresses, quoted literals with their quotes ('customer_id'),
a short value after a colon (an error message), and the phrase around a
rare word ("walk-in shower", "the old cathedral"; which words are rare is
the caller's to say, see extractive.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

__all__ = [
    "said_in",
    "said_elsewhere",
    "split_sentences",
    "clean",
    "facts_of",
    "facts_in",
    "name_words",
    "words_of",
    "lower_words_of",
    "opener",
    "opens_capitalised",
    "utterance_key",
    "STOPWORDS",
]

# A run of sentence-ending marks; whether it ends a sentence depends on the
# one character after it, looked at outside the pattern (no lookahead that
# could fail after an unbounded run and backtrack into it).
_ENDS = re.compile(r"[.!?]+|\n")
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*|\d[\d.,:]*")
# The same with letters of any script ("München", not "M" and "nchen": a
# topic read "about nchen"), for text that is not ASCII: 2.3x slower, so
# ASCII text keeps the pattern above. Each repetition starts with a
# different character, so neither can backtrack.
_WORD_ANY_SCRIPT = re.compile(r"[^\W\d_]+(?:['\-][^\W\d_]*)*|\d[\d.,:]*")
_LEADING = "\"'([{<“‘"
_TRAILING = "\"')]}>.,;:!?”’…"

STOPWORDS = frozenset(
    """a about above after again all also am an and any are as at be because been
    before being below between both but by can could did do does doing down during
    each few for from further had has have having he her here hers him his how i if
    in into is it its itself just let me more most my no nor not now of off ok okay
    on once only or other our ours out over own please same she should so some such
    than thank thanks that the their theirs them then there these they this those
    through to too under until up very was we were what when where which while who
    whom why will with would yes you your yours sure right well oh hi hello i'm
    i'll i've i'd it's that's you're let's can't don't isn't get got go going know
    like maybe much many one really think want yeah great good fine cool per ask
    asking asked glad welcome anything else something help done sorry nice actually
    since instead""".split()
)
_MONTHS = frozenset(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday "
    "saturday sunday".split()
)
_TIMES_OF_DAY = frozenset("morning noon afternoon evening night midnight".split())
# Joins the words of a name ("Hearth & Co", "Pieter de Vries").
_JOINERS = frozenset({"&", "de", "van", "von", "der", "da", "di", "la", "le", "del"})


def clean(sentence: str) -> str:
    """One line, single spaces, straight quotes (curly ones delimit quotes in a summary)."""
    return " ".join(sentence.replace("“", '"').replace("”", '"').split())


# Longer sentences are cut into pieces of at most this many characters (at a
# space when there is one): the tokenizer's cost grows faster than linearly
# on a long run without a break (tiktoken on 16,000 dots: 10x the time of
# 4,000), and no summary quotes a sentence that long anyway.
MAX_SENTENCE = 1000


# Words whose dot is an abbreviation's, not a sentence end (issue 26: "Dr."
# ended a sentence, so "Dr. Helen Achterberg" never survived). Compared in
# lower case, without the dot.
_ABBREVIATIONS = frozenset(
    "dr mr mrs ms mx prof st mt ft jr sr vs e.g i.e approx cf dept est fig incl ref tel ave rd blvd "
    "gen col capt lt sgt rev hon jan feb apr jun jul aug sep sept oct nov dec mon tue tues wed thu thur "
    "thurs fri sat sun".split()
)
# These only before a number: "No. 3" (but "No. I don't think so.").
_NUMBER_ABBREVIATIONS = frozenset({"no", "nos", "nr", "vol", "pp", "ch", "art", "sec"})


def _abbreviation(text: str, dot: int) -> bool:
    """Whether the dot at ``dot`` closes an abbreviation: looks back at most 6 characters (linear)."""
    word = text[max(0, dot - 6) : dot].rsplit(None, 1)[-1:]
    if not word:
        return False
    lowered = word[0].lstrip(_LEADING).lower()
    if lowered in _ABBREVIATIONS:
        return True
    if lowered in ("a.m", "p.m"):  # "at 4 p.m. on Friday", but "… at 4 p.m. Then we"
        after = text[dot + 1 : dot + 3].lstrip()
        return after[:1].islower() or after[:1].isdigit()
    if lowered in _NUMBER_ABBREVIATIONS:
        after = text[dot + 1 : dot + 3].lstrip()
        return after[:1].isdigit()
    return False


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, cleaned, empty ones left out, none over MAX_SENTENCE characters."""
    out: list[str] = []
    start = 0
    length = len(text)
    for match in _ENDS.finditer(text):
        end = match.end()
        if match.group() != "\n" and end < length and not text[end].isspace():
            continue  # "3.11", "a.py", "x@y.org": a dot inside a word
        if match.group() == "." and end < length and _abbreviation(text, match.start()):
            continue  # "Dr. Achterberg", "e.g. a pump", "No. 3"
        out.extend(_pieces(clean(text[start:end])))
        start = end
    out.extend(_pieces(clean(text[start:])))
    return out


def _pieces(sentence: str) -> list[str]:
    pieces: list[str] = []
    while len(sentence) > MAX_SENTENCE:
        cut = sentence.rfind(" ", MAX_SENTENCE // 2, MAX_SENTENCE)
        cut = cut if cut > 0 else MAX_SENTENCE
        pieces.append(sentence[:cut].rstrip())
        sentence = sentence[cut:].lstrip()
    if sentence:
        pieces.append(sentence)
    return pieces


def words_of(text: str) -> list[str]:
    """Word tokens: words with apostrophes and hyphens, and numbers with their dots."""
    return (_WORD if text.isascii() else _WORD_ANY_SCRIPT).findall(text)


def lower_words_of(text: str) -> list[str]:
    """``words_of(text)`` in lower case; for ASCII text in one regex call on the lowered text
    (_WORD's classes hold both cases, so lowering moves no match), not a ``lower()`` per word."""
    if text.isascii():
        return _WORD.findall(text.lower())
    return [w.lower() for w in _WORD_ANY_SCRIPT.findall(text)]


def _core(token: str) -> tuple[str, int, bool]:
    """``token`` without surrounding punctuation, where the core starts, and whether it ended a phrase."""
    opened = token.lstrip(_LEADING)
    core = opened.rstrip(_TRAILING)
    return core, len(token) - len(opened), len(core) < len(opened)


def _strong(core: str) -> bool:
    """A number, code, version, path, address or identifier: a fact by its shape."""
    if not core:
        return False
    if core.isalpha() and core.islower():
        return False  # most words: letters only, none upper case (the checks below, in two C calls)
    if any(c.isdigit() for c in core) or "@" in core or "_" in core:
        return True
    if core[0] == "#" and len(core) > 1:
        return True
    if "/" in core and any(c.isalpha() for c in core):
        return True
    inner = core[1:-1]
    if "." in inner and core[0].isalnum() and core[-1].isalnum():
        return True  # pyproject.toml, example.org
    letters = [c for c in core if c.isalpha()]
    if len(letters) >= 2 and all(c.isupper() for c in letters) and core.lower() not in STOPWORDS:
        return True  # VAT, CET, XMBFVZ
    return any(c.isupper() for c in core[1:]) and any(c.islower() for c in core)  # NoneType


# Words of talk, not of content: a capital does not make them a name (issue
# 26: "Agreed", "Yep", "Hm" were kept as facts of a transcript).
FILLERS = frozenset(
    """hey hiya yo wow woah whoa yay yep yup nope nah ha haha hah hm hmm mhm uh um umm oof ooh oh aww
    agreed absolutely definitely totally exactly indeed congrats congratulations awesome amazing gotcha
    lemme gonna wanna bye goodbye cheers lol omg btw hopefully honestly basically anyway sounds looks
    perfect noted understood alright true cool sweet wonderful fantastic brilliant lovely excellent
    ugh aha right sure okay ok yes no thanks""".split()
)


def _capitalised(core: str) -> bool:
    return (
        bool(core)
        and core[0].isupper()
        and core[0].isalpha()
        and core.lower() not in STOPWORDS
        and (core.lower() not in FILLERS)
    )


def opener(sentence: str) -> str:
    """The core of ``sentence``'s first word: the one word whose being a name the names decide (facts_in)."""
    return _core(sentence.split(" ", 1)[0])[0]


def opens_capitalised(sentence: str) -> bool:
    """Whether ``sentence``'s first word could be a name: every name is capitalised."""
    return _capitalised(opener(sentence))


def name_words(sentences: Iterable[str]) -> set[str]:
    """Capitalised words seen mid-sentence: names, also when they open a sentence elsewhere."""
    names: set[str] = set()
    for sentence in sentences:
        names.update(_names_in(sentence))
    return names


# A fold re-reads the sentences of the running summary every time; these
# caches make that a lookup (bounded: sentences are at most MAX_SENTENCE long).
@functools.lru_cache(maxsize=8192)
def _names_in(sentence: str) -> frozenset[str]:
    tokens = sentence.split()
    names: set[str] = set()
    for i in range(1, len(tokens)):
        # Only a token whose first letter past the opening marks is upper
        # case can be capitalised: the others (most) skip _core.
        opened = tokens[i].lstrip(_LEADING)
        if not opened[:1].isupper():
            continue
        core, _, _ = _core(tokens[i])
        if _capitalised(core) and not tokens[i - 1].endswith((".", "!", "?", ":")):
            names.add(core)
    return frozenset(names)


def facts_in(
    sentence: str,
    names: set[str],
    rare: set[str],
    uncommon: set[str] = frozenset(),  # type: ignore[assignment]
) -> tuple[str, ...]:
    """``facts_of``, cached on what of ``names``, ``rare`` and ``uncommon`` the sentence can use."""
    named = opener(sentence) in names
    if rare or uncommon:
        lowered = lower_words_of(sentence)
        used = frozenset(w for w in lowered if w in rare) if rare else frozenset()
        few = frozenset(w for w in lowered if w in uncommon) if uncommon else frozenset()
    else:
        used = few = frozenset()
    return _facts_cached(sentence, named, used, few)


@functools.lru_cache(maxsize=8192)
def _facts_cached(
    sentence: str, named: bool, rare: frozenset[str], uncommon: frozenset[str]
) -> tuple[str, ...]:
    names = {opener(sentence)} if named else set()
    return tuple(facts_of(sentence, names, set(rare), set(uncommon)))


def facts_of(
    sentence: str,
    names: set[str],
    rare: set[str] = frozenset(),  # type: ignore[assignment]
    uncommon: set[str] = frozenset(),  # type: ignore[assignment]
    first: bool = False,
) -> list[str]:
    """The facts of one cleaned sentence, in order, each as it is written there.

    With ``first``, only the first of them (a list of at most one): facts
    are only ever appended, so the scan stops as soon as there is one.

    Args:
        names: words known as names in the conversation (see ``name_words``).
        rare: lower-case words the tokenizer splits (identifiers, tools,
            names: "pydantic", "release-prep"), facts with the phrase around them.
        uncommon: lower-case words uncommon in English ("cathedral"), facts
            with their phrase only where a noun phrase starts (after "the",
            "to", "near"...): "Declan replied" is no fact, "the old cathedral" is.
    """
    tokens = sentence.split(" ")
    # Each token's core and whether it ends a phrase, once: the checks below
    # look at a token's neighbours too, and took _core three or four times
    # per token (a third of a fold's fact scan; issue 17).
    split = [_core(token) for token in tokens]
    cores = [core for core, _, _ in split]
    closing = [ends for _, _, ends in split]
    facts: list[str] = []
    run: list[str] = []
    units = 0  # lower-case words taken after a number, at most two

    def close() -> None:
        nonlocal units
        while run and run[-1].lower() in _JOINERS:
            run.pop()
        if run:
            facts.append(" ".join(run))
        run.clear()
        units = 0

    value = _colon_value(tokens) if ":" in sentence else None
    phrases = _rare_phrases(cores, closing, rare, uncommon) if rare or uncommon else {}
    skip = -1
    ends = False
    for i, token in enumerate(tokens):
        if first and facts:
            return facts
        if i <= skip:
            if ends:
                close()
            continue
        core = cores[i]
        ends = closing[i]
        lowered = core.lower()
        number = bool(core) and core[0].isdigit() or core[:1] in "€$£" and core[1:2].isdigit()
        if (
            lowered in _ABBREVIATIONS
            and token.endswith(".")
            and lowered not in _TITLES
            and lowered not in _MONTHS
        ):
            close()  # "e.g.", "vs.": not a fact, and no part of one
            continue
        if lowered in _MONTHS and token.endswith(".") and _next_is_number(cores, i):
            close()
            run.append(core + ".")  # "Oct. 10": the month keeps its dot and its day
            ends = False
            continue
        if (
            lowered in _TITLES
            and token.endswith(".")
            and i + 1 < len(tokens)
            and _capitalised(cores[i + 1])
        ):
            close()  # "Dr. Helen Achterberg": a name keeps its title
            run.append(core + ".")
            ends = False
            continue
        if (
            (lowered in _NUMBER_LABELS or lowered in _NUMBER_ABBREVIATIONS and token.endswith("."))
            and (not ends or token.endswith("."))
            and _next_is_number(cores, i)
        ):
            close()  # "type 2 diabetes", "run No. 3": the label says what the number counts
            run.append(
                core + "." if token.endswith(".") and lowered in _NUMBER_ABBREVIATIONS else core
            )
            ends = False
            continue
        if (
            lowered in _SPELLED
            and not run
            and not ends
            and i + 1 < len(tokens)
            and (_unit(cores, closing, i + 1) or cores[i + 1].lower() in _SPELLED)
        ):
            run.append(core)  # "three nights", "two hundred guests": a number in words
            continue
        if run and lowered in _SPELLED and run[-1].lower() in _SPELLED and not ends:
            run.append(core)
            continue
        if run and units == 0 and _ordinal(run[-1]) and _is_word(core) and lowered not in STOPWORDS:
            run.append(core)  # "4th floor", "2nd draft": an ordinal counts the noun after it
            units = 2
            if ends:
                close()
            continue
        if (
            run
            and lowered in ("×", "x")
            and i + 1 < len(tokens)
            and cores[i + 1] == "g"
            and _after_number(run)
        ):
            run.extend((core, "g"))  # "16,000 × g"
            skip = i + 1
            ends = closing[i + 1]
            units = 2
            continue
        if run and units < 2 and _after_unit_start(run, units) and _measure_word(core):
            # "USD 1.15 million", "4,000 rpm", "3.85 %", "75 µg", "50 mM"; "4 p.m." keeps its dot
            run.append(core + "." if lowered in ("a.m", "p.m") and token.endswith(".") else core)
            units += 1
            if ends:
                close()
            continue
        if _strong(core):
            if run and units:
                close()
            if (
                number
                and token.startswith("(")
                and token.endswith(")")
                and i + 1 < len(tokens)
                and (_next_is_number(cores, i))
            ):
                close()
                run.append(token)  # "(845) 555-0142": a phone number keeps its area code's brackets
                continue
            run.append(_quoted(token, core))
        elif core == "The" and not ends and i + 1 < len(tokens) and _capitalised(cores[i + 1]):
            close()  # "The Linden Inn": the article is part of the name
            run.append(core)
        elif _capitalised(core) and (i > 0 or core in names or _next_is_name(tokens, cores, names)):
            if run and units:
                close()
            run.append(_quoted(token, core))
        elif run and lowered in _JOINERS and not ends:
            run.append(core)
        elif (
            run and lowered in _BY and not ends and _after_number(run) and _next_is_number(cores, i)
        ):
            run.append(core)  # "3.1 by 2.4 metres": one measurement
        elif (
            not ends and lowered not in STOPWORDS and _is_word(core) and _next_is_version(cores, i)
        ):
            close()  # "pydantic 2.7.0": a lower-case name before its version
            run.append(core)
        elif run and units == 0 and _after_number(run) and _unit(cores, closing, i):
            run.append(core)
            units += 1
            if not _plural(lowered):  # "3 business days": the unit is the plural after it
                nxt, ends = cores[i + 1], closing[i + 1]
                run.append(nxt)
                units += 1
                skip = i + 1
        elif lowered in _MONTHS and (not ends or token.endswith(".") and _next_is_number(cores, i)):
            close()
            run.append(core + "." if ends else core)  # "Oct. 10"
            ends = False
        elif run and lowered in _TIMES_OF_DAY and run[-1].lower() in _MONTHS:
            run.append(core)  # "Monday noon"
        elif i in phrases and not (run and _after_number(run)):
            # A rare word with the words around it: "luxury vinyl planks", not "planks".
            close()
            last = phrases[i]
            run.extend(cores[i : last + 1])
            ends = closing[last]
            skip = last
            if ends or not _next_is_version(cores, last):
                close()  # a phrase is a fact of its own: "invoices say" is not part of "€2400"
            continue
        else:
            close()
            continue
        if number:
            units = 0
        if ends:
            close()
    close()
    if first and facts:
        return facts[:1]
    if value is not None and value not in facts:
        facts.append(value)  # the names and numbers in it stay facts of their own too
    return facts


# A short clause after a colon, ending the sentence, is a value quoted as it
# was said: an error message ("KeyError: 'customer_id'"), a reply, a label's
# content. Up to this many words and without a comma or semicolon (those
# make it a list or a second clause, whose facts are read one by one).
_VALUE_WORDS = 8
_BY = frozenset({"by", "x", "×"})
# A version has two dots or a "v": "8.2 square metres" is a quantity.
_VERSION = re.compile(r"v\d+(?:\.\d+)+|\d+\.\d+\.\d+(?:\.\d+)*")


def _colon_value(tokens: list[str]) -> str | None:
    """The clause after the last "word:" of the sentence, when it is short and plain."""
    for j in range(len(tokens) - 2, max(-1, len(tokens) - 2 - _VALUE_WORDS), -1):
        token = tokens[j]
        if token.endswith(":") and len(token) > 1 and not token.endswith("::"):
            clause = " ".join(tokens[j + 1 :]).rstrip(".!?…")
            if not clause or any(c in clause for c in ",;:") or clause.startswith(("//", "/")):
                return None
            # "Updated: the budget is now 1700 euros" is a sentence after a label, not a value.
            first = words_of(clause)
            if not first or first[0].lower() in STOPWORDS:
                return None
            return clause
        if token.endswith((",", ";")):
            return None
    return None


def _quoted(token: str, core: str) -> str:
    """``core`` with the quotes around it when the token is quoted: 'customer_id' stays a literal."""
    for mark in ("'", '"'):
        opened = token.lstrip(_LEADING.replace(mark, ""))
        if (
            opened.startswith(mark)
            and opened[1:].startswith(core)
            and opened[1 + len(core) : 2 + len(core)] == mark
        ):
            return mark + core + mark
    return core


def _is_word(core: str) -> bool:
    return (
        len(core) >= 2
        and core.replace("-", "").isalpha()
        and core.islower()
        and core not in _MONTHS
    )


def _next_is_version(cores: list[str], i: int) -> bool:
    return i + 1 < len(cores) and _VERSION.fullmatch(cores[i + 1]) is not None


def _next_is_number(cores: list[str], i: int) -> bool:
    return i + 1 < len(cores) and cores[i + 1][:1].isdigit()


# A rare word's phrase takes at most this many words, the rare one included.
_PHRASE_WORDS = 4
_NOUN_OPENERS = frozenset(
    "the a an our your their his her my its this that these those some any no of for from to with "
    "in on at near about by into onto over under after before than via".split()
)


def _rare_phrases(
    cores: list[str], closes: list[bool], rare: set[str], uncommon: set[str]
) -> dict[int, int]:
    """For each run of lower-case content words holding a rare word, its first and last token index.

    A word rare in the conversation is usually part of a noun phrase ("roof
    glazing", "raised ceiling joists"): the phrase is the fact, the word
    alone reads as nothing. A run stops at a stopword, a phrase end and
    anything not a lower-case word. ``cores`` and ``closes``: each token's
    core and whether it ends a phrase (``_core``).
    """
    content = [_is_word(core) and core not in STOPWORDS for core in cores]
    out: dict[int, int] = {}
    i = 0
    while i < len(cores):
        if not content[i]:
            i += 1
            continue
        start = i
        while i + 1 < len(cores) and content[i + 1] and not closes[i]:
            i += 1
        words = cores[start : i + 1]
        before = cores[start - 1].lower() if start else ""
        noun = before in _NOUN_OPENERS
        hits = [k for k, w in enumerate(words) if w in rare or (noun and w in uncommon)]
        if hits:
            # Words before the rare one are its modifiers only after an article or a
            # preposition ("the old cathedral"); after a subject they are a verb ("we pin").
            lo = 0 if noun else hits[0]
            lo = max(lo, hits[0] - _PHRASE_WORDS + 1)
            hi = min(len(words), lo + _PHRASE_WORDS)
            out[start + lo] = start + hi - 1
        i += 1
    return out


# Titles kept with the name after them; labels kept with the number after them.
_TITLES = frozenset("dr mr mrs ms mx prof st mt sir dame capt lt sgt rev".split())
_NUMBER_LABELS = frozenset(
    "type stage grade level phase tier size class category room floor gate bay dock lane platform terminal "
    "track route exit step round batch lot run table row seat section clause item unit apt suite week "
    "day page chapter version option plan line passage cycle dose door pier berth slot zone aisle rack shelf "
    "bin box tube well lane trailer truck load order invoice ticket case account policy claim ref booking "
    "flight train bus container pallet station stop highway interstate mile sample fraction plate gel figure "
    "panel replicate slide aliquot freezer fridge incubator year month quarter term payment instalment "
    "installment course song seat bed ward bed floor building block wing ext extension".split()
)
# Scale words and units written after a number; issue 26 found "USD 5" kept
# for "USD 5 million", "600" for "600 mg". Lower-case words that are not a
# plural (which _unit already takes) or that the tokenizer reads as symbols.
_SCALES = frozenset("thousand million billion trillion k m bn mn percent pc pct".split())
_UNITS = frozenset(
    """mg g kg µg ug mcg ng lb lbs oz t ml l µl ul dl cl mm cm m km mi ft yd nm µm um mph kph kmh km/h rpm
    bpm mmol mol µm µmol nmol mm/hg mmhg psi bar kpa pa hz khz mhz ghz kw kwh w mw v mv ma mah wh db
    gb mb tb kb gbps mbps kbps ms min mins h hr hrs sec secs s yo am pm % ° °c °f c f x ×g iu u da kda
    bp kb sqm m² m2 m³ m3 ha ac sq usd eur gbp chf cad aud a.m p.m ×g""".split()
)


_SPELLED = frozenset(
    """two three four five six seven eight nine ten eleven twelve fifteen twenty thirty forty fifty
    sixty seventy eighty ninety hundred dozen""".split()
)


def _ordinal(word: str) -> bool:
    return len(word) >= 3 and word[:-2].isdigit() and word[-2:].lower() in ("st", "nd", "rd", "th")


def _measure_word(core: str) -> bool:
    """A unit or scale word as written after a number: "million", "rpm", "mM", "µg/µL", "°C", "%"."""
    if not core or len(core) > 10:
        return False
    lowered = core.lower()
    if lowered in _SCALES or lowered in _UNITS:
        return True
    if core[0] in "%°µ":
        return True
    head, slash, tail = lowered.partition("/")
    return (
        bool(slash)
        and (head in _UNITS or head[:1] in "µ°%")
        and (tail in _UNITS or tail in {"day", "dose", "kg", "week"})
    )


def _after_unit_start(run: list[str], units: int) -> bool:
    """Whether a unit may follow: right after a number, or after a scale word ("1.5 million tonnes")."""
    if units == 0:
        last = run[-1].lstrip("-+~−")  # "-18 °C", "~40 kg"
        return _after_number(run) or (
            last[:1].isdigit() and last.count(".") < 2 and last[-1:].isdigit()
        )
    return run[-1].lower() in _SCALES


def _after_number(run: list[str]) -> bool:
    last = run[-1]
    if last.lower() in _SPELLED:
        return True
    # A version or a code takes no unit: "1.10.15 works" is not a quantity.
    return (last[:1].isdigit() and last.count(".") < 2 and not any(c.isalpha() for c in last)) or (
        last[:1] in "€$£"
    )


# Verbs ending in s that follow numbers ("exit code 2 means", "1.10.15 works"):
# units are plural nouns, these are not.
_VERBS_IN_S = frozenset(
    "is was has does goes makes takes needs leaves costs arrives says looks seems comes gets runs "
    "uses holds shows means works fails passes returns starts ends lasts".split()
)


# Plurals without an s: "12 people", "2 children", "40 feet".
_IRREGULAR_PLURALS = frozenset(
    "people children men women feet teeth mice geese persons staff crew".split()
)


def _plural(word: str) -> bool:
    if word in _IRREGULAR_PLURALS:
        return True
    return (
        len(word) > 2 and word.endswith("s") and not word.endswith("ss") and word not in _VERBS_IN_S
    )


def _unit(cores: list[str], closes: list[bool], i: int) -> bool:
    """Whether token ``i`` (or it and the next) is the unit of the number before it."""
    core = cores[i]
    word = core.lower()
    if not core.isalpha() or word in STOPWORDS or not core.islower():
        return False
    if _plural(word):
        return True
    if closes[i] or i + 1 >= len(cores):
        return False
    nxt = cores[i + 1]
    return nxt.isalpha() and nxt.islower() and _plural(nxt.lower()) and nxt.lower() not in STOPWORDS


def _next_is_name(tokens: list[str], cores: list[str], names: set[str]) -> bool:
    if len(tokens) < 2 or tokens[0].endswith((",", ".", ":", ";")):
        return False
    nxt = cores[1]
    if nxt.lower() in _JOINERS and len(tokens) > 2:
        nxt = cores[2]  # "Seed & Sprout near the hotel": a joined name
    return _capitalised(nxt)


def said_in(fact: str, text: str) -> bool:
    """Whether ``fact`` occurs in ``text`` as whole words: "€500" is not in "€5000", nor "2" in "v2.1.0"."""
    start = text.find(fact)
    while start >= 0:
        end = start + len(fact)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before in "-.@/_") and not (after.isalnum() or after in "-@/_"):
            return True
        start = text.find(fact, start + 1)
    return False


# "Said elsewhere" compares facts of up to this many words; a longer one (a
# run of names) is rarely repeated word for word and is not looked for.
_SAID_WORDS = 8


def said_elsewhere(facts: Iterable[str], text: str) -> set[str]:
    """The ``facts`` said in ``text`` as whole words, found in one pass over ``text``.

    Words are compared without the punctuation around them ("K1" is said
    by "(K1)," but not by "K1/K2" nor "v2.1.0"). ``said_in`` per fact was a
    search of the whole text for each fact: quadratic in a large budget
    (1.7 s of a 2.6 s call at 4,000 summary lines). Here each word of
    ``text`` that starts a fact is tried with the fact lengths that start
    with it, at most ``_SAID_WORDS`` each: linear in ``text``.
    """
    wanted: dict[str, dict[tuple[str, ...], str]] = {}
    for fact in facts:
        words = tuple([token.lstrip(_LEADING).rstrip(_TRAILING) for token in fact.split(" ")])
        if len(words) <= _SAID_WORDS and words[0]:
            wanted.setdefault(words[0], {})[words] = fact
    if not wanted:
        return set()
    lengths = {first: sorted({len(words) for words in group}) for first, group in wanted.items()}
    cores = _cores_of(text)
    found: set[str] = set()
    for i in [i for i, core in enumerate(cores) if core in wanted]:
        group = wanted[cores[i]]
        for n in lengths[cores[i]]:
            said = group.get(cores[i : i + n])
            if said is not None:
                found.add(said)
    return found


@functools.lru_cache(maxsize=4)
def _cores_of(text: str) -> tuple[str, ...]:
    """The words of ``text`` without their punctuation (cached: a fold passes the same summary to each call)."""
    return tuple(
        token.lstrip(_LEADING).rstrip(_TRAILING) for token in text.split()
    )  # _core's, inlined


# Facts are looked for in an utterance's first this many characters: a fold
# keys every utterance it folds in the daemon, and past this an utterance of
# thousands of one-word sentences cost a fact scan each (0.1 s for 32,000
# characters of "a\n"), for a key that is only a coverage measure.
KEY_SCAN_CHARS = 4000


def utterance_key(text: str) -> str:
    """The most telling word of an utterance: its first fact (in its first ``KEY_SCAN_CHARS``
    characters), else its longest content word ("" for small talk)."""
    sentences = split_sentences(text[:KEY_SCAN_CHARS])
    names: set[str] | None = None
    for sentence in sentences:
        # facts_in(sentence, name_words(sentences), set())[0], without the
        # scan past the first fact, the names unless the opener could be one
        # (names are capitalised), or a cache entry: a fold keys every
        # utterance it folds, in the daemon, beside the requests (issue 17).
        word = opener(sentence)
        if _capitalised(word) and names is None:
            names = name_words(sentences)
        facts = facts_of(sentence, {word} if names and word in names else set(), first=True)
        if facts:
            return facts[0]
    words = [w for w in words_of(text) if len(w) >= 4 and w.lower() not in STOPWORDS]
    return max(words, key=len, default="")
