"""What a summarizer is: the protocol, its error, and what it returns.

Two implementations satisfy ``Summarizer``: ``ExtractiveSummarizer``
(extractive.py, offline, the default) and ``ClaudeSummarizer`` (claude.py,
used when ANTHROPIC_API_KEY is set). The daemon calls neither directly but a
``SummaryWriter`` (writer.py) around them.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from chd.core.utterance import Utterance

if TYPE_CHECKING:  # tokens.py loads tiktoken, which `chd --help` does without
    from chd.core.tokens import TokenCounter

__all__ = [
    "Summarizer",
    "SummarizerError",
    "Summarized",
    "Late",
    "SummaryContext",
    "summarizer_name",
    "summarize_with",
    "trim_items",
    "SUMMARIZER_CHOICES",
    "DEFAULT_CLAUDE_MODEL",
]


@dataclass(frozen=True, slots=True)
class SummaryContext:
    """What a summarizer may read but must not summarize: the rest of the picture.

    ``summary``: the running summary's other segments (the parts this call
    does not rewrite). ``buffered``: the utterances still in the buffer.
    ``parts``: when segments are merged, the turn range of each part
    (``(turn_from, turn_to, text)``), so a model sees where each came from.
    Summarizers that read it say so with ``reads_context = True``.
    """

    summary: str = ""
    buffered: tuple[Utterance, ...] = ()
    parts: tuple[tuple[int, int, str], ...] = ()


class Summarizer(Protocol):
    """Merges a previous summary with newly evicted utterances.

    ``name`` says which summarizer wrote a summary (kept with each summary
    segment and reported in responses).
    """

    name: str

    def summarize(self, previous: str, utterances: Sequence[Utterance], token_limit: int) -> str:
        """A summary of ``previous`` plus ``utterances`` of at most ``token_limit`` tokens.

        ``utterances`` may be empty: then ``previous`` is condensed. Raise
        SummarizerError (or any exception) on failure. Implementations should
        aim under the limit; SummaryWriter trims anything over it, so the
        budget holds even for a misbehaving summarizer.

        A summarizer with ``reads_context = True`` is also called with a
        ``context=SummaryContext`` keyword: read-only surroundings.
        """
        ...


class SummarizerError(Exception):
    """A summarizer could not produce a summary.

    ``retryable`` is False for failures another try cannot fix (a rejected
    key, a malformed request), so the writer falls back at once.
    """

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


def trim_items(text: str, limit: int, counter: TokenCounter) -> str:
    """``text`` without its last lines until it fits ``limit`` (one line is left, however long).

    For a summary written as one item per line: dropping whole items beats
    cutting one, and the budget belongs to every item equally.
    """
    lines = text.splitlines()
    while len(lines) > 1 and counter.count("\n".join(lines)) > limit:
        lines.pop()
    return "\n".join(lines)


def summarizer_name(summarizer: object) -> str:
    return str(getattr(summarizer, "name", type(summarizer).__name__))


@dataclass(frozen=True, slots=True)
class Late:
    """A call of the configured summarizer still running after its caller stopped waiting.

    ``future`` gives the summarizer's raw text (or its exception); ``seqs``
    are the utterances it was given and ``token_limit`` the length it was
    asked for, so its result can replace the offline text of that range
    (folding.py).
    """

    future: Future[str]
    seqs: frozenset[int]
    token_limit: int


@dataclass(frozen=True, slots=True)
class Summarized:
    """A summary text, who wrote it, and why the configured summarizer did not (if so).

    ``late``: the configured summarizer's call for this text, still running
    when the offline fallback wrote it.
    """

    text: str
    made_by: str
    error: str = ""
    late: Late | None = field(default=None, compare=False, repr=False)


SUMMARIZER_CHOICES = ("auto", "claude", "offline")
# Here rather than in claude.py so that `chd --help` and `chd query`
# do not import the SDK (two seconds).
DEFAULT_CLAUDE_MODEL = "claude-haiku-4-5"


def summarize_with(
    summarizer: Summarizer,
    previous: str,
    utterances: Sequence[Utterance],
    token_limit: int,
    context: SummaryContext | None,
) -> str:
    """``summarizer.summarize``, with the context only for a summarizer that reads one."""
    if context is not None and getattr(summarizer, "reads_context", False):
        return summarizer.summarize(previous, utterances, token_limit, context=context)  # type: ignore[call-arg]
    return summarizer.summarize(previous, utterances, token_limit)
