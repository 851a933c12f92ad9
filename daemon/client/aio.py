"""``AsyncClient``: chd over grpc.aio, for asyncio code (the same methods as ``Client``, awaited)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import grpc

from chd.client import calls
from chd.client.calls import DEFAULT_CONVERSATION, Call
from chd.client.channel import TLS, auth_metadata, open_aio_channel
from chd.client.errors import error_for
from chd.client.results import (
    Answer,
    Context,
    Removed,
    SearchHit,
    Stored,
    StoredMany,
    Summary,
    Utterance,
)
from chd.client.retry import again, backoff
from chd.client.sync import DEFAULT_TARGET, DEFAULT_TIMEOUT
from chd.client.wire import request, struct_to_plain
from chd.v1 import daemon_pb2, daemon_pb2_grpc

__all__ = ["AsyncClient"]

T = TypeVar("T")


class AsyncClient:
    """``Client`` for asyncio: every method is a coroutine; an async context manager.

    Same arguments, results, exceptions and retry rules as ``Client``. Make
    it inside the event loop that uses it (grpc.aio channels belong to one loop).
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        token: str | None = None,
        tls: TLS | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = 3,
    ) -> None:
        self.target = target
        self.timeout = calls.seconds(timeout)
        self.retries = retries
        self._metadata = auth_metadata(token)
        self._channel = open_aio_channel(target, tls)
        self._stub = daemon_pb2_grpc.DaemonStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- the Daemon Interface ------------------------------------------------

    async def query(
        self,
        text: str = "",
        /,
        *,
        conversation: str = DEFAULT_CONVERSATION,
        metadata: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **fields: Any,
    ) -> Answer:
        """Any query, in the language of ``instructions()``; ``data`` as a mapping, keyword arguments or both.

        ``client.query("Get the last 5 utterances")``, or the fields instead of
        the sentence: ``client.query(operation="store", text="Hi")`` (``text``
        is positional-only, so ``text=`` is the data field). A conversation_id
        in ``metadata`` wins over ``conversation``.
        """
        return await self._run(
            calls.query(text, conversation, metadata, calls.merged_data(data, fields)), timeout
        )

    async def purpose(self, *, timeout: float | None = None) -> str:
        return (
            await self._unary(self._stub.GetPurpose, daemon_pb2.GetPurposeRequest(), True, timeout)
        ).purpose

    async def instructions(self, *, timeout: float | None = None) -> str:
        """Every query form, with an example for each operation."""
        return (
            await self._unary(
                self._stub.GetInstructions, daemon_pb2.GetInstructionsRequest(), True, timeout
            )
        ).instructions

    # --- typed operations ----------------------------------------------------

    async def store(
        self,
        text: str,
        *,
        speaker: str = "user",
        turn: int | None = None,
        conversation: str = DEFAULT_CONVERSATION,
        timeout: float | None = None,
    ) -> Stored:
        """Store ``text`` verbatim; ``turn`` None lets the daemon track turns."""
        return await self._run(calls.store(text, speaker, turn, conversation), timeout)

    async def store_many(
        self,
        utterances: Sequence[Mapping[str, Any]],
        *,
        conversation: str = DEFAULT_CONVERSATION,
        timeout: float | None = None,
    ) -> StoredMany:
        """Store several utterances in one commit, all or none, in order.

        Each is a mapping with ``text`` and optionally ``speaker``,
        ``turn_number`` (or ``turn``, as for ``store``) and ``timestamp`` (RFC
        3339, or a timezone-aware ``datetime``). One idempotency key covers
        the batch, so a retried batch is stored once. An item that is not a
        mapping raises TypeError; a naive datetime, or both ``turn`` and
        ``turn_number``, ValueError; each naming the item.
        """
        return await self._run(calls.store_many(utterances, conversation), timeout)

    async def last(
        self,
        n: int,
        *,
        speaker: str | None = None,
        conversation: str = DEFAULT_CONVERSATION,
        timeout: float | None = None,
    ) -> list[Utterance]:
        """The newest ``n`` utterances, oldest first."""
        return await self._run(calls.last(n, speaker, conversation), timeout)

    async def search(
        self,
        topic: str,
        *,
        limit: int | None = None,
        speaker: str | None = None,
        conversation: str = DEFAULT_CONVERSATION,
        timeout: float | None = None,
    ) -> list[SearchHit]:
        """Utterances about ``topic``, best first."""
        return await self._run(calls.search(topic, limit, speaker, conversation), timeout)

    async def turns(
        self,
        first: int,
        last: int | None = None,
        *,
        conversation: str = DEFAULT_CONVERSATION,
        timeout: float | None = None,
    ) -> list[Utterance]:
        """The utterances of turns ``first`` to ``last`` (inclusive; just ``first`` if None)."""
        return await self._run(calls.turns(first, last, conversation), timeout)

    async def summary(
        self, *, conversation: str = DEFAULT_CONVERSATION, timeout: float | None = None
    ) -> Summary:
        """The running summary of what left the buffer."""
        return await self._run(calls.summary(conversation), timeout)

    async def summarize(
        self,
        token_limit: int | None = None,
        *,
        conversation: str = DEFAULT_CONVERSATION,
        timeout: float | None = None,
    ) -> Summary:
        """A summary of the whole conversation (summary so far plus the buffer) within ``token_limit``."""
        return await self._run(calls.summarize(token_limit, conversation), timeout)

    async def context(
        self,
        token_limit: int | None = None,
        *,
        conversation: str = DEFAULT_CONVERSATION,
        timeout: float | None = None,
    ) -> Context:
        """The summary plus the newest utterances that fit ``token_limit`` tokens, as one text."""
        return await self._run(calls.context(token_limit, conversation), timeout)

    async def remove(
        self,
        *,
        seq: int | None = None,
        seqs: list[int] | None = None,
        oldest: int | None = None,
        newest: int | None = None,
        before_turn: int | None = None,
        after_turn: int | None = None,
        turn_from: int | None = None,
        turn_to: int | None = None,
        speaker: str | None = None,
        all: bool = False,
        at_most: int | None = None,
        conversation: str = DEFAULT_CONVERSATION,
        timeout: float | None = None,
    ) -> Removed:
        """Delete what the selectors name (they combine with AND), from the summary too.

        The daemon's rules for a remove apply: with no selector it refuses
        (``NotUnderstood``), ``all=True`` takes no other selector, and
        ``at_most`` refuses a remove that would delete more.
        """
        return await self._run(
            calls.remove(
                conversation,
                seq=seq,
                seqs=seqs,
                oldest=oldest,
                newest=newest,
                before_turn=before_turn,
                after_turn=after_turn,
                turn_from=turn_from,
                turn_to=turn_to,
                speaker=speaker,
                all=all,
                at_most=at_most,
            ),
            timeout,
        )

    async def configure(
        self,
        *,
        buffer_size: int | None = None,
        max_tokens: int | None = None,
        summary_token_limit: int | None = None,
        eviction_policy: str | None = None,
        reset: bool = False,
        conversation: str = DEFAULT_CONVERSATION,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Set this conversation's limits (none given: read them); returns ``settings``, ``changed``, ..."""
        return await self._run(
            calls.configure(
                conversation,
                buffer_size=buffer_size,
                max_tokens=max_tokens,
                summary_token_limit=summary_token_limit,
                eviction_policy=eviction_policy,
                reset=reset,
            ),
            timeout,
        )

    async def mark(
        self,
        seq: int,
        important: bool = True,
        *,
        conversation: str = DEFAULT_CONVERSATION,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Mark utterance ``seq`` important (kept longest by the ``importance`` eviction policy)."""
        return await self._run(calls.mark(seq, important, conversation), timeout)

    async def stats(
        self, *, conversation: str = DEFAULT_CONVERSATION, timeout: float | None = None
    ) -> dict[str, Any]:
        """Counts, tokens, turns, fill ratios, summary size and queue length."""
        return await self._run(calls.stats(conversation), timeout)

    # --- sending -------------------------------------------------------------

    async def _run(self, call: Call[T], timeout: float | None) -> T:
        response = await self._unary(
            self._stub.Query, request(call.text, call.metadata, call.data), call.retry, timeout
        )
        answer = Answer(
            response.operation, struct_to_plain(response.result), struct_to_plain(response.metadata)
        )
        return call.read(answer)

    async def _unary(self, method: Any, message: Any, retry: bool, timeout: float | None) -> Any:
        until = time.monotonic() + calls.seconds(self.timeout if timeout is None else timeout)
        attempt = 0
        while True:
            try:
                return await method(
                    message, timeout=max(until - time.monotonic(), 0.001), metadata=self._metadata
                )
            except grpc.RpcError as error:
                failure = error_for(error.code(), error.details() or error.code().name)
            attempt += 1
            if not again(failure, retry, attempt, self.retries, until):
                raise failure from None
            await asyncio.sleep(backoff(attempt))
