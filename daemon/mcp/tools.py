"""The MCP tools and resources, each one query to an ``Answerer``.

Every tool takes ``conversation_id`` and sends ``data.operation`` with its
arguments as the data fields (``query`` sends the sentence itself), so the
core checks them exactly as it checks a gRPC query: a remove that does not
say what to delete is refused by the same code whichever way it came. A
refusal comes back as an MCP tool error carrying chd's message; anything
else that goes wrong is logged here and reported in one line, never as a
traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ConfigDict, Field

import chd
from chd.client import Answer
from chd.mcp.answerer import Answerer, Refused

__all__ = ["build_server", "RECENT_UTTERANCES", "RECALL_DEFAULT"]

log = logging.getLogger(__name__)

RECENT_UTTERANCES = 20  # what chd://conversations/{id}/recent shows
RECALL_DEFAULT = 10  # recall with no selector: the newest ten

SERVER_INSTRUCTIONS = """\
chd is a conversation memory: per conversation_id it keeps the recent utterances \
(user, assistant, system, grouped into turns) and folds older ones into a running summary \
that fits a token budget. Store what is said with `remember`, read it back with `recall` \
(newest, by turn, by topic), get a prompt-ready `context` (summary plus newest utterances \
within a token budget), `summarize`, and `forget` what must go (also from the summary). \
`query` takes chd's own language for anything else (the resource chd://instructions lists \
every form). Errors say what was not understood and what to write instead; nothing is \
changed by a refused call."""

Conversation = Annotated[
    str,
    Field(
        description="Which conversation (1-256 characters). Conversations are fully separate: seqs, turns, "
        "buffer and summary are per conversation.",
        min_length=1,
        max_length=256,
    ),
]
Speaker = Literal["user", "assistant", "system"]
SpeakerFilter = Annotated[Speaker | None, Field(description="Only what this speaker said.")]
TurnNumber = Annotated[
    int | None, Field(description="A turn number (1 = the first user utterance's turn).")
]
# A tool answers with a CallToolResult it builds itself, so a refusal is an
# is_error result holding chd's message alone (raising ToolError would have
# the SDK prefix it and log it, query text and all, at INFO); the dict is
# the output schema of a success: {"operation", "result", "metadata"}.
Result = Annotated[CallToolResult, dict[str, Any]]


def build_server(answerer: Answerer) -> MCPServer:
    """An MCP server whose tools and resources are answered by ``answerer``."""
    server = MCPServer(
        name="chd",
        title="chd, the Conversation History Daemon",
        instructions=SERVER_INSTRUCTIONS,
        version=chd.__version__,
    )

    def ask(
        tool: str,
        conversation_id: str,
        data: Mapping[str, Any],
        text: str = "",
        metadata: Mapping[str, Any] | None = None,
    ) -> CallToolResult:
        fields = {
            key: value for key, value in data.items() if value is not None and value is not False
        }
        return _tool_result(
            tool,
            lambda: answerer.query(
                text, {**(metadata or {}), "conversation_id": conversation_id}, fields
            ),
        )

    @server.tool(
        annotations=ToolAnnotations(
            title="Remember an utterance",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
        )
    )
    def remember(
        text: Annotated[str, Field(description="The utterance, stored verbatim.")],
        conversation_id: Conversation = "default",
        speaker: Annotated[
            Speaker,
            Field(
                description="Who said it. A user utterance opens a new turn; "
                "assistant and system utterances join the current one."
            ),
        ] = "user",
        turn_number: Annotated[
            int | None,
            Field(description="Put it in this turn instead of tracking turns automatically.", ge=0),
        ] = None,
    ) -> Result:
        """Store one utterance in a conversation's memory.

        Returns the stored utterance (seq, turn_number, tokens, timestamp) and the seqs of older
        utterances it moved out of the buffer into the running summary.
        """
        metadata: dict[str, Any] = {"speaker": speaker}
        if turn_number is not None:
            metadata["turn_number"] = turn_number
        return ask(
            "remember", conversation_id, {"operation": "store", "text": text}, metadata=metadata
        )

    @server.tool(annotations=ToolAnnotations(title="Recall utterances", read_only_hint=True))
    def recall(
        conversation_id: Conversation = "default",
        topic: Annotated[
            str | None,
            Field(
                description="Find what the conversation said about this (words or a phrase), "
                "wherever it is kept: the buffer, utterances waiting to be summarized, the archive "
                "(when the daemon keeps one) and the summary's segments; one list, best match "
                "first, each hit with its score and where it lives."
            ),
        ] = None,
        where: Annotated[
            list[Literal["buffer", "pending", "archive", "summary"]]
            | Literal["buffer", "pending", "archive", "summary"]
            | None,
            Field(
                description="With topic: search only these places, one or a list "
                "(default: all of them)."
            ),
        ] = None,
        last_n: Annotated[
            int | None, Field(description="The newest n utterances, oldest first.", ge=0)
        ] = None,
        turn_from: TurnNumber = None,
        turn_to: TurnNumber = None,
        speaker: SpeakerFilter = None,
        limit: Annotated[
            int | None, Field(description="At most this many topic matches.", ge=1)
        ] = None,
        day: Annotated[
            str | None,
            Field(
                description="Only this calendar day or week, by the daemon's clock: today, "
                "yesterday, monday ... sunday (the latest before today), last week, this week, "
                "YYYY-MM-DD; after since/after/before/until it is a span ('since yesterday')."
            ),
        ] = None,
        timezone: Annotated[
            str | None,
            Field(description="Where days begin for day: +02:00 or Europe/Paris (default UTC)."),
        ] = None,
    ) -> Result:
        """Read utterances back from a conversation; the filters combine with AND.

        With topic: one ranked search over everything the conversation still holds: buffer
        hits (with utterance_index), pending and archived utterances (archived: true), and
        summary segments (where "summary", with seq_from/seq_to and turn_from/turn_to), each
        with "where" and "score", best first; result.summary_hit scores the whole summary.
        Without topic: the buffer's utterances in order; with no argument but conversation_id,
        the newest 10. turn_from/turn_to select whole turns (give both equal for one turn).
        """
        data: dict[str, Any] = {
            "operation": "retrieve",
            "topic": topic,
            "last_n": last_n,
            "turn_from": turn_from,
            "turn_to": turn_to,
            "speaker": speaker,
            "limit": limit,
            "where": where,
            "day": day,
            "timezone": timezone,
        }
        if all(value is None for key, value in data.items() if key not in ("operation", "speaker")):
            data["last_n"] = RECALL_DEFAULT
        return ask("recall", conversation_id, data)

    @server.tool(
        annotations=ToolAnnotations(
            title="Forget utterances",
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=True,
        )
    )
    def forget(
        conversation_id: Conversation = "default",
        seq: Annotated[int | None, Field(description="The utterance with this seq.", ge=1)] = None,
        seqs: Annotated[
            list[int] | None, Field(description="The utterances with these seqs.")
        ] = None,
        oldest: Annotated[
            int | None, Field(description="The oldest n (of what the other selectors chose).", ge=1)
        ] = None,
        newest: Annotated[
            int | None, Field(description="The newest n (of what the other selectors chose).", ge=1)
        ] = None,
        before_turn: Annotated[
            int | None, Field(description="Every utterance before this turn.", ge=0)
        ] = None,
        after_turn: Annotated[
            int | None, Field(description="Every utterance after this turn.", ge=0)
        ] = None,
        turn_from: TurnNumber = None,
        turn_to: TurnNumber = None,
        speaker: SpeakerFilter = None,
        # The core's refusal of a forget without a selector names these two,
        # so the tool has them: an agent is never told to use what it lacks.
        within_seconds: Annotated[
            int | None, Field(description="Utterances stored in the last n seconds.", ge=1)
        ] = None,
        older_than_seconds: Annotated[
            int | None, Field(description="Utterances stored more than n seconds ago.", ge=1)
        ] = None,
        all: Annotated[
            bool,
            Field(
                description="Clear the whole conversation: buffer, summary queue, archive "
                "and summary. Takes no other selector."
            ),
        ] = False,
    ) -> Result:
        """Delete utterances for good, from the buffer and from the running summary.

        Say exactly what to delete; the selectors combine with AND. With no selector nothing is
        deleted and the call is refused, as is `all` with another selector, or oldest with newest.
        Returns the removed seqs. Seqs are never reused.
        """
        return ask(
            "forget",
            conversation_id,
            {
                "operation": "remove",
                "seq": seq,
                "seqs": seqs,
                "oldest": oldest,
                "newest": newest,
                "before_turn": before_turn,
                "after_turn": after_turn,
                "turn_from": turn_from,
                "turn_to": turn_to,
                "speaker": speaker,
                "within_seconds": within_seconds,
                "older_than_seconds": older_than_seconds,
                "all": all,
            },
        )

    @server.tool(
        annotations=ToolAnnotations(title="Summarize the conversation", read_only_hint=True)
    )
    def summarize(
        conversation_id: Conversation = "default",
        token_limit: Annotated[
            int | None,
            Field(
                description="Longest summary in tokens (default: the "
                "conversation's summary_token_limit).",
                ge=1,
            ),
        ] = None,
    ) -> Result:
        """Summarize the whole conversation: the running summary plus everything still in the buffer.

        Returns the summary text, its tokens (never above token_limit) and how many utterances it covers.
        """
        return ask(
            "summarize", conversation_id, {"operation": "summarize", "token_limit": token_limit}
        )

    @server.tool(annotations=ToolAnnotations(title="Context for a prompt", read_only_hint=True))
    def context(
        conversation_id: Conversation = "default",
        token_limit: Annotated[
            int | None, Field(description="Token budget of the whole context.", ge=1)
        ] = None,
    ) -> Result:
        """What to put in a prompt: the running summary plus the newest utterances that fit token_limit.

        result.context is the text to paste; result.utterances the utterances it includes.
        """
        return ask(
            "context",
            conversation_id,
            {"operation": "retrieve", "context": True, "token_limit": token_limit},
        )

    @server.tool(
        annotations=ToolAnnotations(
            title="Query in chd's language", read_only_hint=False, destructive_hint=True
        )
    )
    def query(
        query: Annotated[
            str,
            Field(
                description='A sentence such as "Get the last 5 utterances", "What did '
                'the assistant say about Paris?" or "Remove utterance 12"; the resource '
                "chd://instructions lists every form. May be empty when data has an "
                "operation."
            ),
        ],
        conversation_id: Conversation = "default",
        metadata: Annotated[
            dict[str, Any] | None,
            Field(description='Request metadata, e.g. {"speaker": "assistant"} for a store.'),
        ] = None,
        data: Annotated[
            dict[str, Any] | None,
            Field(
                description='Data fields, e.g. {"token_limit": 40}; '
                'with "operation" the sentence is not parsed.'
            ),
        ] = None,
    ) -> Result:
        """chd's Daemon Interface itself: one query in its natural language, answered as over gRPC.

        Writes must be fully understood; an ambiguous remove is refused with what to write instead.
        """
        given = (metadata or {}).get("conversation_id")
        if given is not None and given != conversation_id:
            return _error(
                f"INVALID_ARGUMENT: metadata.conversation_id {given!r} differs from "
                f"conversation_id {conversation_id!r}; give it once"
            )
        return _tool_result(
            "query",
            lambda: answerer.query(
                query, {**(metadata or {}), "conversation_id": conversation_id}, dict(data or {})
            ),
        )

    @server.resource(
        "chd://conversations/{conversation_id}/summary",
        mime_type="text/plain",
        description="The running summary of what has left the conversation's buffer.",
    )
    def summary_resource(conversation_id: str) -> str:
        answer = _asked(
            "summary resource",
            lambda: answerer.query(
                "",
                {"conversation_id": conversation_id},
                {"operation": "retrieve", "summary_only": True},
            ),
            ResourceError,
        )
        return answer.result.get("summary", "")

    @server.resource(
        "chd://conversations/{conversation_id}/recent",
        mime_type="text/plain",
        description=f"The conversation's newest {RECENT_UTTERANCES} utterances, one a line: "
        '#seq [turn N] speaker: "text" (the text a JSON string).',
    )
    def recent_resource(conversation_id: str) -> str:
        answer = _asked(
            "recent resource",
            lambda: answerer.query(
                "",
                {"conversation_id": conversation_id},
                {"operation": "retrieve", "last_n": RECENT_UTTERANCES},
            ),
            ResourceError,
        )
        # The text as a JSON string: a newline in an utterance cannot forge
        # another "#seq [turn] speaker:" line for the model reading this.
        return "\n".join(
            f"#{u['seq']} [turn {u['turn_number']}] {u['speaker']}: {json.dumps(u['text'], ensure_ascii=False)}"
            for u in answer.result.get("utterances", [])
        )

    @server.resource(
        "chd://instructions",
        mime_type="text/plain",
        description="Every form of chd's query language (GetInstructions), for the query tool.",
    )
    def instructions_resource() -> str:
        return _asked("instructions", answerer.instructions, ResourceError)

    for (
        tool
    ) in server._tool_manager.list_tools():  # the SDK has no public way to configure validation
        _strict_arguments(tool)
    return server


def _strict_arguments(tool: Any) -> None:
    """Refuse arguments a tool does not have, and values of another type, instead of the SDK's defaults.

    By default an unknown argument is dropped and "yes" or 1 is read as
    true: forget {"speaker": "user", "turn_form": 3} (a typo) deleted every
    user utterance, and forget {"all": "yes"} cleared the conversation. The
    query language refuses both (protocol.md: a typo never silently does
    something else), so the tools do too. A JSON value sent inside a string
    ("[1, 2]", "true"), which some hosts do, is still read as that value.
    """
    meta = tool.fn_metadata
    base = meta.arg_model
    strict = type(
        base.__name__,
        (base,),
        {"model_config": ConfigDict(**base.model_config, extra="forbid", strict=True)},
    )
    meta.arg_model = strict
    tool.parameters = strict.model_json_schema(by_alias=True)


def _tool_result(tool: str, ask: Callable[[], Answer]) -> CallToolResult:
    """A success with the answer as structured content (and as JSON text), or chd's refusal as a tool error."""
    try:
        answer = _asked(tool, ask, ToolError)
    except ToolError as error:
        return _error(str(error))
    structured = {
        "operation": answer.operation,
        "result": answer.result,
        "metadata": answer.metadata,
    }
    text = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def _asked(what: str, ask: Callable[[], Any], error: type[Exception]) -> Any:
    """``ask()``, its refusal as ``error`` with chd's message, anything else logged and told in one line."""
    try:
        return ask()
    except Refused as refused:
        raise error(str(refused)) from None
    except Exception:
        # A bug, or a backend failing in a way it does not translate: the
        # trace goes to the log (stderr), never to the model.
        log.exception("%s failed", what)
        raise error(f"INTERNAL: chd failed to answer {what}; the server logged why") from None
