"""What GetPurpose and GetInstructions return.

The guide is data (``GUIDE``) so that docs and the RPC answer can be produced
from the same source.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemon.intents import data_fields

__all__ = ["PURPOSE", "INSTRUCTIONS", "GUIDE", "OperationGuide", "render_instructions"]

PURPOSE = (
    "Maintain rolling buffer of recent conversation utterances with automatic "
    "summarization of older conversations"
)


@dataclass(frozen=True, slots=True)
class OperationGuide:
    operation: str
    what: str
    forms: tuple[str, ...]
    example: str
    returns: str


GUIDE: tuple[OperationGuide, ...] = (
    OperationGuide(
        "store",
        "Append one utterance to the conversation's rolling buffer. Everything after "
        "the colon is stored verbatim, even words like 'remove' or 'summarize'. The "
        "speaker comes from the phrase or metadata.speaker (default user). Without "
        "metadata.turn_number a user utterance opens a new turn and assistant/system "
        "utterances join the current one. When the buffer passes buffer_size or "
        "max_tokens the oldest utterances are evicted and folded into the summary.",
        (
            "Add utterance: <text>",
            "Add user utterance: '<text>'",
            "Add assistant utterance: <text>",
            "Store: <text>   /   Record: <text>   /   Remember <text>",
        ),
        "query=\"Add user utterance: 'What's the weather today?'\" "
        "metadata={conversation_id: 'c1', turn_number: 5}",
        "result.utterance {seq, speaker, text, turn_number, utterance_index, timestamp, "
        "tokens, conversation_id}, result.evicted [seq...]",
    ),
    OperationGuide(
        "retrieve",
        "Read utterances (oldest first) and/or the running summary. Filters combine: "
        "speaker (in the phrase or metadata.speaker), turns, seq, last N. A topic "
        "search is ranked by relevance (BM25) blended with recency and each hit has "
        "a score.",
        (
            "Get all utterances",
            "Get the last 5 utterances",
            "Find utterances about <topic>   (metadata.speaker filters by speaker)",
            "Get utterance 12",
            "Get utterances in turns 3 to 6",
            "Get the last 3 utterances with summary",
            "Get summary",
            "Get context within 2000 tokens   (summary + newest utterances that fit, as one text)",
            "Get archived utterances   /   Find archived utterances about <topic>",
        ),
        "query='Find utterances about weather' metadata={speaker: 'user'}",
        "result.utterances [...], with the summary: result.summary, summary_tokens, "
        "summary_through_seq, summary_pending; context: result.context, tokens, token_limit. "
        "Responses with the summary fold queued evictions first and name the summarizer "
        "(metadata.summarizer, summarizer_error when the offline fallback wrote it)",
    ),
    OperationGuide(
        "remove",
        "Delete utterances. A remove must name its target; 'remove utterances' alone "
        "is refused. A remove also forgets summarized content: summary segments made "
        "from removed utterances are dropped (or rebuilt from the archive); "
        "'clear the conversation' deletes the buffer, the summary, the queue and the "
        "archive. Seq numbers are never reused.",
        (
            "Remove oldest utterance   /   Remove the oldest 3 utterances",
            "Remove before turn 4",
            "Remove utterance 12",
            "Clear the conversation",
        ),
        "query='Remove before turn 4' metadata={conversation_id: 'c1'}",
        "result.removed [seq...], result.summary_segments_dropped, summary_segments_rebuilt",
    ),
    OperationGuide(
        "summarize",
        "Summarize the whole conversation (running summary plus the buffer) within a "
        "token limit (data.token_limit, default summary_token_limit). Read-only.",
        (
            "Summarize conversation",
            "Summarize the conversation in 200 tokens",
        ),
        "query='Summarize conversation' data={token_limit: 500}",
        "result.summary, result.tokens (never above the limit), result.token_limit",
    ),
)


def render_instructions() -> str:
    lines = [
        "chd, the Conversation History Daemon: " + PURPOSE + ".",
        "",
        "Send Query(query, metadata, data). metadata.conversation_id (default "
        "'default') isolates conversations. Every response has operation, result, "
        "and metadata with items_affected and tokens_used.",
        "",
        "Programs that already know what they want can skip the language: set "
        "data.operation to store, retrieve, remove or summarize and pass the "
        "parameters as data fields. A field given in two places with different "
        "values is refused, not guessed.",
        "",
    ]
    for guide in GUIDE:
        lines.append(f"{guide.operation.upper()}: {guide.what}")
        lines.append("  Forms:")
        lines.extend(f"    {form}" for form in guide.forms)
        lines.append(f"  data fields: {', '.join(data_fields(guide.operation))}")
        lines.append(f"  Example: {guide.example}")
        lines.append(f"  Returns: {guide.returns}")
        lines.append("")
    lines.append(
        "Errors: INVALID_ARGUMENT for a query that is not understood or a bad field "
        "(the message says which and shows the supported forms), NOT_FOUND for a seq "
        "that is not in the buffer, RESOURCE_EXHAUSTED for an utterance over the size "
        "limits. A failed query changes nothing."
    )
    return "\n".join(lines)


INSTRUCTIONS = render_instructions()
