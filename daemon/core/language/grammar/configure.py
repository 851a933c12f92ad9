"""Configure phrasings: set, read and reset a conversation's limits.

"Set the token budget to 4000", "buffer_size=50", "use the importance eviction
policy", "what is the buffer size?", "reset the settings".
"""

from __future__ import annotations

import re

from chd.core.language.grammar.query import Query
from chd.core.language.grammar.reading import Reading
from chd.core.language.grammar.vocab import FLAGS
from chd.core.language.numbers import NUM, parse_number

__all__ = ["read_configure"]

# Most specific first: "summary token limit" also contains "token limit".
_NAMES: tuple[tuple[str, str], ...] = (
    (
        "summary_token_limit",
        r"summary[\s_-]*(?:token[\s_-]*)?(?:limit|budget|cap|max(?:imum)?)"
        r"|max(?:imum)?[\s_-]*summary[\s_-]*(?:tokens?|size|length)|summary[\s_-]*tokens",
    ),
    (
        "max_tokens",
        r"max(?:imum)?[\s_-]*tokens|(?:max(?:imum)?\s+)?(?:buffer(?:'s)?\s+)?token[\s_-]*(?:budget|limit|cap)"
        r"|tokens?\s+(?:budget|cap)|context\s+budget|budget",
    ),
    (
        "buffer_size",
        r"buffer[\s_-]*(?:size|length|capacity|limit)|(?:max(?:imum)?|number\s+of)\s+"
        r"(?:utterances|messages)(?:\s+(?:kept|in\s+the\s+buffer))?|(?:utterance|message)\s+(?:limit|cap)",
    ),
    ("eviction_batch", r"eviction[\s_-]*batch(?:[\s_-]*size)?|batch[\s_-]*size"),
    ("eviction_policy", r"eviction[\s_-]*(?:policy|strategy|mode|order|rule)|eviction|policy"),
)
# Only with a value: "limit the buffer to 50 utterances", "cap the summary at 200 tokens".
_VALUE_ONLY_NAMES = (
    ("buffer", r"(?:rolling\s+)?buffer"),
    ("summary_token_limit", r"summary(?:\s+(?:size|length))?"),
)

# Between a name and its value, at most a few linking words, in any order
# (issue 25, non-native and hurried: "Max tokens of buffer put to 4000",
# "Eviction policy please change to fifo", "the buffer up to 40 messages",
# "the buffer to hold at most 50 utterances"); bounded, so still linear.
_LINK = (
    r"(?:\s+(?:please|put|change|changed|set|must|should|be|is|up|down|to|at|as|of|hold|holds|keep|"
    r"at\s+most|max(?:imum)?|(?:of\s+)?(?:the\s+)?buffer)){0,4}"
)
_NUMBER_VALUE = (
    rf"(?:{_LINK}|\s*(?:[=:]|->|=>|\u2192))?\s*(?P<v>{NUM})"
    r"(?:\s*(?P<unit>tokens?|utterances?|messages?|items?|entries))?\b"
)
_POLICY = r"(?P<p>fifo|first[\s-]in,?[\s-]first[\s-]out|oldest[\s-]first|importance(?:[\s-]based)?|by\s+importance|important[\s-](?:ones\s+)?last)"
_POLICY_VALUE = rf"(?:{_LINK}|\s*(?:[=:]|->|=>|\u2192))?\s*['\"`]?(?:the\s+)?{_POLICY}['\"`]?(?:\s+(?:policy|eviction|mode|strategy))*(?:\b|(?<=['\"`]))"
_POLICY_PHRASES = (
    rf"\b(?:use|switch\s+to|enable|turn\s+on|choose|pick|select|apply|adopt)\s+(?:the\s+|an?\s+)?{_POLICY}"
    r"(?:\s+(?:eviction|policy|mode|strategy))*\b",
    r"\bevict\s+(?:utterances\s+|messages\s+)?(?P<p>by\s+importance|oldest\s+first|(?:the\s+)?unimportant\s+(?:ones\s+)?first)\b",
)
_SET_VERB = (
    r"^(?:(?:can|could)\s+(?:we|you|i)\s+)?(?:set|change|update|make|raise|lower|increase|reduce|decrease|adjust|put|configure|use|switch"
    r"|limit|cap|bump|shrink|grow|restrict|modify|fix|give|revert)\b"
)
_READ_VERB = (
    r"^(?:what(?:'s|\s+is|\s+are|\s+was)?|which|show|get|display|list|tell\s+me|read|check|print|view"
    r"|see|give\s+me|report|current)\b"
)
_SETTINGS_NOUN = (
    r"\b(?:settings|configuration|config|limits|options|parameters|budgets|overrides|setup)\b"
)
_SAID = (
    r"\b(?:mention(?:s|ed|ing)?|about|regarding|concerning|discuss(?:es|ed|ing)?|talk(?:s|ed|ing)?|said|say|says"
    r"|asked|ask|wrote|refer(?:s|red)?|contain(?:s|ed|ing)?)\b"
)
_RESET = (
    r"^(?:reset|restore|revert|clear|drop|remove|undo)\s+(?:all\s+)?(?:the\s+|my\s+|this\s+conversation's\s+|its\s+)?"
    r"(?:settings|configuration|config|limits|overrides|budget\s+overrides)"
    r"(?:\s+(?:to|back\s+to)\s+(?:the\s+)?defaults?)?\b"
    r"|^(?:use|restore|go\s+back\s+to|revert\s+to|reset\s+to)\s+(?:the\s+)?defaults?(?:\s+(?:settings|configuration|limits))?\b"
)
_WORDS = frozenset(
    """set change update make raise lower increase reduce decrease adjust put configure use switch limit cap
    bump shrink grow restrict modify fix give what's is are was which show get display list tell read check
    print view see report current settings configuration config limits options parameters budgets
    overrides setup conversation's policy eviction mode strategy value values new revert can could we""".split()
)


_MAX_REPEATS = 2


def _policy(word: str) -> str:
    return "importance" if re.search(r"import|unimportant", word, FLAGS) else "fifo"


# The value a setting has now, said beside the new one: "from 512 to 300", "to 50 instead
# of 20", "(currently 20)". Only the new value is read (issue 25).
# The old value's unit goes with it: "(currently 4000 tokens)" must not make the new value tokens.
_OLD_UNIT = r"(?:\s+(?:tokens?|messages?|utterances?|turns?|items?|entries))?"
# A query that corrects itself keeps every number for the correction reader ("to 20 instead
# of 30 - no wait, 40"); stripped, the correction would replace the wrong one (second review).
_CORRECTS = re.compile(
    r"\b(?:no\s+wait|wait\s+no|sorry|i\s+mean|actually|make\s+that|scratch\s+that)\b", re.I
)
_OLD_VALUE = re.compile(
    # Each alternative starts at a word or a bracket, never with optional spaces: a run of
    # spaces is not tried once per space (tests/test_parser_linear.py).
    rf"\bfrom\s+{NUM}\s+(?=(?:up\s+|down\s+)?to\s+{NUM})"
    rf"|\b(?:instead\s+of|rather\s+than)\s+(?:the\s+)?(?:current\s+|old\s+|default\s+)?{NUM}{_OLD_UNIT}\b"
    rf"|[(,]\s*+(?:currently|now|was|it\s+is|it's|right\s+now|today)\s+(?:at\s+)?{NUM}{_OLD_UNIT}\s*+\)?"
    # A setting holds until it is changed: "from now on", "going forward" say nothing more.
    # Only here: "From now on, delete the user's messages" asks for a policy, not a remove.
    r"|\b(?:from\s+now\s+on|going\s+forward|from\s+here\s+on|from\s+this\s+point\s+on)\b",
    re.IGNORECASE,
)


def read_configure(text: str) -> Reading | None:
    if _CORRECTS.search(text) is None:
        text = _OLD_VALUE.sub(" ", text)
    q = Query(text)
    fields: dict[str, object] = {}
    if q.take(_RESET):
        fields["reset"] = True
    setting = q.search(_SET_VERB) is not None
    for pattern in _POLICY_PHRASES:
        if m := q.take(pattern):
            fields["eviction_policy"] = _policy(m.group("p"))
    named = False
    # Named without a value: "Set the buffer size and the eviction batch to 4".
    unset: list[str] = []
    conflict = False
    for name, alias in _NAMES:
        pattern = rf"\b(?:the\s+)?(?:{alias})\b" + (
            _POLICY_VALUE if name == "eviction_policy" else _NUMBER_VALUE
        )
        # A name set more than twice leaves the rest unexplained (and refused)
        # instead of searching the whole query once per repetition.
        for _ in range(_MAX_REPEATS):
            if (m := q.take(pattern)) is None:
                break
            fields[name] = (
                _policy(m.group("p")) if name == "eviction_policy" else parse_number(m.group("v"))
            )
            if name == "buffer_size" and (m.group("unit") or "").lower().startswith("token"):
                if "max_tokens" in fields:
                    # "the token budget to 4000 tokens and the buffer size to 4000 tokens"
                    conflict = True
                fields["max_tokens"] = fields.pop("buffer_size")
            named = True
        if q.take(rf"\b(?:the\s+)?(?:{alias})\b"):
            named = True
            if name not in fields:
                unset.append(name)
    if setting:
        for name, alias in _VALUE_ONLY_NAMES:
            if m := q.take(rf"\b(?:the\s+)?(?:{alias})\b{_NUMBER_VALUE}"):
                unit = (m.group("unit") or "").lower()
                key = "max_tokens" if name == "buffer" and unit.startswith("token") else name
                fields["buffer_size" if key == "buffer" else key] = parse_number(m.group("v"))
    changes = {k for k in fields if k != "reset"}
    reads = (
        not changes
        and (named or q.search(_SETTINGS_NOUN))
        and q.search(_READ_VERB)
        # "Which lines mention the budget?" asks what was said, not what the settings are.
        and not q.search(_SAID)
    )
    if not (fields or reads):
        return None
    if not changes and not fields.get("reset") and not reads:
        return None
    q.take(_SET_VERB if setting else _READ_VERB)
    reading = Reading("configure", fields, q.unexplained(_WORDS), q.total_words)
    if conflict:
        reading.refusal = (
            "two settings are given a value in tokens; the buffer's size counts utterances "
            "('Set the buffer size to 50' or 'Set the token budget to 4000')"
        )
    elif changes and unset:
        reading.refusal = (
            f"{', '.join(unset)} is named without a value; give each setting its own value "
            "('Set the buffer size to 4 and the eviction batch to 4')"
        )
    elif changes and not setting and re.match(_READ_VERB, text.strip(), FLAGS):
        # "Show the settings with buffer size 5" asks to see, not to change.
        reading.refusal = (
            "this reads the settings but names a value; to change it say 'Set the buffer size to 5'"
        )
    return reading
