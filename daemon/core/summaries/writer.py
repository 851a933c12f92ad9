"""The summarizer the daemon calls: retries, an offline fallback, a hard budget.

``SummaryWriter`` retries the configured summarizer with backoff, falls back
to the offline one so the summary stays current, says which one wrote the
text and why, and holds the token budget whatever they returned. A fold's
call that outlives ``late_after`` goes on in the background (late.py) and
rides on the fallback's result, for its reply to replace that text later.
``build_writer`` makes the daemon's writer from its configuration.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from chd.core.summaries.extractive import ExtractiveSummarizer
from chd.core.summaries.late import LateCalls
from chd.core.summaries.summarizer import (
    SUMMARIZER_CHOICES,
    Late,
    Summarized,
    Summarizer,
    SummaryContext,
    summarize_with,
    summarizer_name,
)
from chd.core.tokens import TokenCounter
from chd.core.utterance import Utterance

__all__ = ["LATE_AFTER", "SummaryWriter", "build_writer"]

log = logging.getLogger(__name__)

# Seconds a fold waits for Claude before folding offline (the call goes on,
# and its reply replaces the offline text): as long as a read waits for a
# fold in progress (chd.core.history.READ_WAIT).
LATE_AFTER = 10.0


class SummaryWriter:
    """The configured summarizer with retries, an offline fallback and a hard budget.

    Two kinds of callers: the background worker is patient (``attempts``
    tries with backoff); a read that folds before answering is not (one try,
    and none at all for ``cooldown`` seconds after the configured summarizer
    gave up, so reads stay fast through an outage while the worker keeps
    trying).

    Args:
        primary: the configured summarizer.
        counter: counts tokens for the budget (the daemon's tiktoken table).
        fallback: used when ``primary`` fails; None when ``primary`` is
            itself the offline summarizer.
        attempts: tries of ``primary`` per summary for a patient caller (each
            try may include the SDK's own retries).
        backoff: seconds before the second try, doubled for each later one.
        cooldown: seconds after a failure during which impatient callers go
            straight to the fallback.
        late_after: seconds a fold waits for ``primary`` before the fallback
            writes the text; the call goes on in the background (late.py)
            and its ``Late`` rides on the fallback's result. None: every
            call is waited for to its end (the SDK's timeout).
        sleep, clock: injectable for tests.
    """

    def __init__(
        self,
        primary: Summarizer,
        counter: TokenCounter,
        fallback: Summarizer | None = None,
        attempts: int = 3,
        backoff: float = 1.0,
        cooldown: float = 60.0,
        late_after: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        self.primary = primary
        self.fallback = fallback
        self.counter = counter
        self.attempts = attempts
        self.backoff = backoff
        self.cooldown = cooldown
        self.late_after = late_after
        # Only where a fallback exists: without one a caller has nothing to answer with meanwhile.
        self.late: LateCalls | None = (
            LateCalls() if late_after is not None and fallback is not None else None
        )
        self._sleep = sleep
        self._clock = clock
        self._failed: tuple[float, str] | None = None  # when the primary last gave up, and why

    @property
    def name(self) -> str:
        return summarizer_name(self.primary)

    @property
    def keeps_originals(self) -> bool:
        """Whether a fallback fold loses more than the configured summarizer would (Claude, not offline)."""
        return self.fallback is not None and summarizer_name(self.fallback) != self.name

    def rewrite(
        self,
        previous: str,
        utterances: Sequence[Utterance],
        token_limit: int,
        context: SummaryContext | None = None,
    ) -> Summarized | None:
        """The configured summarizer alone (no fallback): None when it fails.

        For rewriting offline segments from their originals: an offline
        result would add nothing, so a failure leaves them for later.
        """
        return self._primary(
            previous, utterances, token_limit, context, self.attempts, "rewrite by"
        ).written

    def write(
        self,
        previous: str,
        utterances: Sequence[Utterance],
        token_limit: int,
        patient: bool = True,
        offline_because: str = "",
        context: SummaryContext | None = None,
        *,
        late_key: str | None = None,
        wait: float | None = None,
    ) -> Summarized:
        """Summarize within ``token_limit``; raise only if the fallback fails too.

        Args:
            patient: False for a caller who is waiting (see the class docstring).
            offline_because: non-empty to skip the configured summarizer
                altogether; the reason is reported as the error.
            context: read-only surroundings, for summarizers that read them.
            late_key: the conversation, for a caller that can take a late
                result (a fold); None waits for the call to its end.
            wait: seconds an impatient caller can still wait.
        """
        if self.fallback is not None:
            if offline_because:
                return self._fall_back(previous, utterances, token_limit, offline_because, context)
            if not patient and self._failed and self._clock() - self._failed[0] < self.cooldown:
                age = self._clock() - self._failed[0]
                return self._fall_back(
                    previous,
                    utterances,
                    token_limit,
                    f"{self.name} failed {age:.0f} s ago ({self._failed[1]}); not retried while a caller waits",
                    context,
                )
        tries = self.attempts if patient else 1
        late = None
        if self.late is not None and late_key is not None and self.late_after is not None:
            patience = self.late_after if wait is None else max(0.0, min(self.late_after, wait))
            late = (late_key, patience, patient)
        outcome = self._primary(
            previous,
            utterances,
            token_limit,
            context,
            tries,
            "summarizer",
            reraise=self.fallback is None,
            late=late,
        )
        if outcome.written is not None:
            return outcome.written
        if outcome.late is not None:
            log.warning(
                "summarizer %s is slow (%s); %s folds this batch meanwhile",
                self.name,
                outcome.error,
                summarizer_name(self.fallback),
            )
            written = self._fall_back(previous, utterances, token_limit, outcome.error, context)
            return Summarized(written.text, written.made_by, written.error, outcome.late)
        if outcome.busy:
            return self._fall_back(previous, utterances, token_limit, outcome.error, context)
        log.warning(
            "summarizer %s gave up; %s folds this batch instead",
            self.name,
            summarizer_name(self.fallback),
        )
        return self._fall_back(
            previous, utterances, token_limit, f"{self.name} failed: {outcome.error}", context
        )

    def _primary(
        self,
        previous: str,
        utterances: Sequence[Utterance],
        token_limit: int,
        context: SummaryContext | None,
        tries: int,
        what: str,
        reraise: bool = False,
        late: tuple[str, float, bool] | None = None,
    ) -> _Outcome:
        """Up to ``tries`` calls of the configured summarizer with backoff: its result, or the last error.

        ``reraise``: with no fallback, the summarizer's own exception goes to the caller.
        ``late``: (conversation, seconds to wait, patient) to run the call in
        the background and stop waiting after that long; the outcome then
        carries the call still running.
        """
        error = ""
        for attempt in range(1, tries + 1):
            try:
                if late is None:
                    text = summarize_with(self.primary, previous, utterances, token_limit, context)
                else:
                    text = self._waited(previous, utterances, token_limit, context, *late)
                self._failed = None
                return _Outcome(Summarized(self.bounded(text, token_limit), self.name))
            except _Busy as busy:
                # Busy is not failed either: nothing was asked, so no cooldown
                # sends the next readers offline for a minute.
                return _Outcome(None, str(busy), busy=True)
            except _Overdue as overdue:
                # Slow is not failed: no cooldown, so the next reader joins this call (late.py).
                error = f"{self.name} did not answer within {overdue.waited:g} s; its reply replaces this text if it comes"
                return _Outcome(
                    None,
                    error,
                    Late(overdue.future, frozenset(u.seq for u in utterances), token_limit),
                )
            except (
                Exception
            ) as exc:  # a summarizer's bug must not lose the batch nor end the worker
                if reraise:
                    raise
                error = _describe(exc)
                log.warning(
                    "%s %s failed (try %d of %d): %s", what, self.name, attempt, tries, error
                )
                if not getattr(exc, "retryable", True) or attempt == tries:
                    break
                self._sleep(self.backoff * 2 ** (attempt - 1))
        self._failed = (self._clock(), error)
        return _Outcome(None, error)

    def _waited(
        self,
        previous: str,
        utterances: Sequence[Utterance],
        token_limit: int,
        context: SummaryContext | None,
        key: str,
        patience: float,
        patient: bool,
    ) -> str:
        """The call run in the background (late.py) and waited for at most ``patience`` seconds."""
        assert self.late is not None
        request = (key, previous, tuple((u.seq, u.text) for u in utterances), token_limit)
        future = self.late.start(
            key,
            request,
            lambda: summarize_with(self.primary, previous, utterances, token_limit, context),
        )
        if future is None:
            if not patient:
                raise _Busy(
                    f"{self.late.in_flight} {self.name} calls are still running late; "
                    "no other is started while a caller waits"
                )
            return summarize_with(
                self.primary, previous, utterances, token_limit, context
            )  # as before: waited to its end
        try:
            return future.result(timeout=patience)
        except FutureTimeout:
            raise _Overdue(future, patience) from None

    def _fall_back(
        self,
        previous: str,
        utterances: Sequence[Utterance],
        token_limit: int,
        reason: str,
        context: SummaryContext | None = None,
    ) -> Summarized:
        assert self.fallback is not None
        text = summarize_with(self.fallback, previous, utterances, token_limit, context)
        return Summarized(self.bounded(text, token_limit), summarizer_name(self.fallback), reason)

    def bounded(self, text: str, limit: int) -> str:
        """``text`` within ``limit`` tokens (the budget is a hard limit, whoever wrote it)."""
        text = text.strip()
        if self.counter.count(text) <= limit:
            return text
        # The budget is a hard limit: cut at a sentence end if one is near,
        # else at the token boundary.
        text = self.counter.fit(text, limit)
        if self.counter.count(text) > limit:
            text = self.counter.truncate(text, limit)
        return text


def build_writer(
    choice: str,
    counter: TokenCounter,
    *,
    attempts: int = 3,
    backoff: float = 1.0,
    environ: dict[str, str] | None = None,
    process: bool = False,
    late_after: float | None = LATE_AFTER,
    **claude_options: object,
) -> SummaryWriter:
    """The daemon's summary writer.

    Args:
        choice: "auto" (Claude when ANTHROPIC_API_KEY is set, else offline),
            "claude" (refused without a key) or "offline".
        process: run the offline summarizer in a child process
            (process.py), with the same summarizer in this
            process as its fallback.
        late_after: seconds a fold waits for Claude before folding offline
            (its late reply then replaces the offline text); None: waited for
            to the end of the SDK's timeout.
        claude_options: ClaudeConfig fields (model, max_tokens, timeout,
            max_retries).
    """
    if choice not in SUMMARIZER_CHOICES:
        raise ValueError(
            f"summarizer must be one of {', '.join(SUMMARIZER_CHOICES)}, got {choice!r}"
        )
    offline = ExtractiveSummarizer(counter)
    env = os.environ if environ is None else environ
    if choice == "offline" or (choice == "auto" and not env.get("ANTHROPIC_API_KEY", "").strip()):
        if process:
            from chd.core.summaries.process import ProcessSummarizer

            # One try: a child that failed is replaced on the next batch, and
            # the fallback is the very same summarizer, so waiting buys nothing.
            return SummaryWriter(
                ProcessSummarizer(local=offline, counter=counter), counter, offline, attempts=1
            )
        return SummaryWriter(offline, counter)
    # Imported here: the SDK takes a while to import and offline daemons never need it.
    from chd.core.summaries.claude import ClaudeConfig, ClaudeSummarizer

    config = ClaudeConfig.from_env(env, **claude_options)
    if config is None:
        raise ValueError("the claude summarizer needs ANTHROPIC_API_KEY in the environment")
    return SummaryWriter(
        ClaudeSummarizer(config, counter),
        counter,
        offline,
        attempts=attempts,
        backoff=backoff,
        late_after=late_after,
    )


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What the configured summarizer gave: a result, or the last error and maybe a call still running."""

    written: Summarized | None
    error: str = ""
    late: Late | None = None
    busy: bool = False  # no call was made (the caps on late calls): not a failure


class _Busy(Exception):
    """The caps on calls running late (late.py) refused a new call: none was made."""


class _Overdue(Exception):
    """A call outlived the caller's patience; it goes on in the background."""

    def __init__(self, future: Future[str], waited: float) -> None:
        super().__init__(f"no answer within {waited:g} s")
        self.future = future
        self.waited = waited


def _describe(exc: BaseException) -> str:
    message = str(exc).strip() or "no message"
    if len(message) > 300:
        message = message[:297] + "..."
    return f"{type(exc).__name__}: {message}"
