"""What a summary's text says about the facts it kept (issue 26), beside the verbatim share.

The retention bench counts a fact kept when its words occur in the summary.
These measures say whether what is kept reads as a fact about something:

* ``items``: the summary split into items, on newlines and on "; " outside
  curly quotes (a quoted sentence holding "; " is one item).
* ``anchored``: of the kept facts, those whose anchor (the word the
  writer marked as what the fact is about) occurs in an item holding the
  fact, case aside.
* ``truncated``: facts with a number and a unit or scale word ("USD 5
  million", "600 mg", "type 2 diabetes") of which the summary holds a cut
  piece: the number with some of the fact's words but not all ("USD 5",
  "2 diabetes"), or the number alone as a whole item ("600").
* ``unbalanced``: items whose brackets, double quotes, curly quotes,
  backticks or opening single quotes do not close.
* ``corrections``: of the (old, new) pairs a later utterance corrected with
  both values in the summary, those where the old value is marked as
  superseded ("(was 50 µg)", "not 10:30", "instead of …", "50 µg → 75 µg").
"""

from __future__ import annotations

import re

__all__ = ["items_of", "anchored", "truncated", "unbalanced", "corrections_marked", "said_in"]

# What opens an item without being part of it: a line's head, the list label, a speaker's label.
_HEAD = re.compile(
    r"^(?:Turns? [\d–]+(?:, about [^:]*)?: )?(?:facts: )?(?:[^:;()]{1,40} \(user\): )?"
)
_NUMBER = re.compile(r"\d")
# A token's surrounding punctuation is not part of the word ("(5", "mg,").
_EDGE = "()[]{}“”\"'`,;:.!?"
_OPENERS = {"(": ")", "[": "]", "{": "}", "“": "”"}
_CLOSERS = {v: k for k, v in _OPENERS.items()}
_MARKERS = r"(?:\(was|was|were|not|instead of|previously|formerly|from|replaces|replacing|superseded:?|old:?)"


def said_in(fact: str, text: str, ignore_case: bool = False) -> bool:
    """Whether ``fact`` occurs in ``text`` as whole words ("March 3" is not in "March 31")."""
    flags = re.IGNORECASE if ignore_case else 0
    return re.search(rf"(?<![\w-]){re.escape(fact)}(?![\w-])", text, flags) is not None


def items_of(summary: str) -> list[str]:
    """The summary's items: its lines, each split on "; " outside a “quote” (a quoted sentence is one item)."""
    items: list[str] = []
    for line in summary.split("\n"):
        depth = start = 0
        i = 0
        while i < len(line):
            ch = line[i]
            if ch == "“":
                depth += 1
            elif ch == "”":
                depth = max(0, depth - 1)
            elif ch == ";" and depth == 0 and line[i + 1 : i + 2] == " ":
                items.append(line[start:i])
                start = i + 2
            i += 1
        items.append(line[start:])
    return [item for item in items if item.strip()]


def anchored(kept: list[tuple[str, str]], items: list[str]) -> int:
    """How many (fact, anchor) pairs have the fact and the anchor in one item."""
    return sum(
        1
        for fact, anchor in kept
        if any(said_in(fact, item) and said_in(anchor, item, ignore_case=True) for item in items)
    )


def _words(text: str) -> list[str]:
    return [w.strip(_EDGE) for w in text.split()]


def truncated(
    facts: list[str], summary: str, items: list[str], wholes: list[str] | None = None
) -> int:
    """How many facts with a number and a word beside it the summary holds cut short.

    Cut short: in some item, a number of the fact has lost the word right
    beside it (its unit or scale word) where the item ends, keeping another
    of the fact's words ("USD 5" of "USD 5 million", "2 diabetes" of "type
    2 diabetes"), or the number is the whole item ("600" of "600 mg").
    Another value sharing a part ("3.6 by 2.4 metres" beside the fact "3.6
    by 3.7 metres") is not a cut, nor a date without its weekday ("October
    10" of "Saturday, October 10").

    ``wholes``: the item each of ``items`` was split from, when they are
    pieces of a group ("Saturday, October 17, 2026" split on ", "): a piece
    of an item that states the whole fact is no cut of it.
    """
    per_item = [_words(_HEAD.sub("", item)) for item in items]
    where: dict[str, list[tuple[int, int]]] = {}
    for k, words in enumerate(per_item):
        for i, w in enumerate(words):
            if _NUMBER.search(w):
                where.setdefault(w, []).append((k, i))
    count = 0
    for fact in facts:
        fw = _words(fact)
        numbers = [i for i, w in enumerate(fw) if _NUMBER.search(w)]
        if not numbers or len(numbers) == len(fw):
            continue  # no unit or scale word to lose
        cut = False
        for n in numbers:
            for k, at in where.get(fw[n], ()):
                if wholes is not None and said_in(fact, wholes[k]):
                    continue  # the item says the whole fact; its split pieces are no cut
                words = per_item[k]
                left = 0
                while (
                    n - left - 1 >= 0
                    and at - left - 1 >= 0
                    and words[at - left - 1] == fw[n - left - 1]
                ):
                    left += 1
                right = 0
                while (
                    n + right + 1 < len(fw)
                    and at + right + 1 < len(words)
                    and words[at + right + 1] == fw[n + right + 1]
                ):
                    right += 1
                if left + right + 1 == len(fw):
                    continue  # the whole fact
                # Where the fact goes on, the item must end: otherwise it says something else.
                # Only the number's own neighbour is its unit or scale word: "October 10"
                # of "Saturday, October 10" keeps it, "2 diabetes" of "type 2 diabetes" does not.
                left_cut = n - left > 0 and at - left == 0 and left == 0
                right_cut = n + right + 1 < len(fw) and at + right + 1 == len(words) and right == 0
                whole_left = n - left == 0 or (at - left == 0 and left > 0)
                whole_right = n + right + 1 == len(fw) or (
                    at + right + 1 == len(words) and right > 0
                )
                # A cut piece keeps one of the fact's words ("USD 5"), or is the bare number ("600").
                piece = any(not _NUMBER.search(fw[j]) for j in range(n - left, n + right + 1))
                if (
                    (left_cut or right_cut)
                    and (left_cut or whole_left)
                    and (right_cut or whole_right)
                    and (piece or len(words) == 1)
                ):
                    cut = True
                    break
            if cut:
                break
        count += cut
    return count


def _balanced(item: str) -> bool:
    stack: list[str] = []
    for ch in item:
        if ch in _OPENERS:
            stack.append(ch)
        elif ch in _CLOSERS:
            if not stack or stack[-1] != _CLOSERS[ch]:
                return False
            stack.pop()
    if stack or item.count('"') % 2 or item.count("`") % 2:
        return False
    # A single quote opens where a word starts ("'tz'"), and must close later;
    # an apostrophe inside or after a word ("Tomasz's", "drivers'") is not a quote.
    for m in re.finditer(r"(?:^|(?<=[\s(\[:]))'(?=\S)", item):
        if "'" not in item[m.end() :]:
            return False
    return True


def unbalanced(items: list[str]) -> int:
    """How many items leave a bracket or quote open (or close one never opened)."""
    return sum(1 for item in items if not _balanced(item))


def corrections_marked(
    pairs: list[tuple[str, str]], summary: str, items: list[str]
) -> tuple[int, int]:
    """(pairs with both values in the summary, of those the ones whose old value is marked superseded)."""
    both = marked = 0
    for old, new in pairs:
        if not (said_in(old, summary) and said_in(new, summary)):
            continue
        both += 1
        o = re.escape(old)
        n = re.escape(new)
        pattern = rf"{_MARKERS}\s+{o}(?![\w-])|(?<![\w-]){o}\s*(?:→|->)\s*{n}"
        if any(re.search(pattern, item, re.IGNORECASE) for item in items):
            marked += 1
    return both, marked
