"""Optional: Claude classifies the queries the rule parser is not sure of.

Used only when the daemon runs with the query classifier enabled *and*
ANTHROPIC_API_KEY is set (ANTHROPIC_BASE_URL is honoured by the SDK). Claude
is given one tool per operation, whose input schema lists that operation's
parameters, plus ``not_understood``; it must call exactly one. Its choice
becomes a ParsedQuery that passes the same checks as the rules' (see
daemon/core/language/understanding.py for the limits on a classified remove). Any failure
— network, timeout, an unknown tool, a store whose text is not verbatim in
the query — leaves the query refused as the rules refused it: the
classifier can only turn a refusal into an answer, never into an error of
its own.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Protocol, cast

from chd.core.language.guide import GUIDE, PARAMETERS
from chd.core.language.intents import EVICTION_POLICIES, field_sources
from chd.core.language.parser import NotUnderstood, ParsedQuery
from chd.core.utterance import SPEAKERS

if TYPE_CHECKING:  # the SDK is imported when a classifier is made, not with the parser
    import anthropic
    from anthropic.types import MessageParam, ToolChoiceAnyParam, ToolParam

__all__ = [
    "QueryClassifier",
    "ClaudeClassifier",
    "DEFAULT_MODEL",
    "MIN_CONFIDENCE",
    "tool_definitions",
    "classifier_from_environment",
]

log = logging.getLogger(__name__)

DEFAULT_MODEL = "claude-haiku-4-5"
# Below this self-reported confidence the classification is not used.
MIN_CONFIDENCE = 0.7
_REFUSE_TOOL = "not_understood"

_INTEGER = {"type": "integer", "minimum": 0}
_SCHEMAS: dict[str, dict[str, Any]] = {
    "text": {"type": "string"},
    "topic": {"type": "string"},
    "speaker": {"type": "string", "enum": list(SPEAKERS)},
    "since": {"type": "string", "format": "date-time"},
    "seqs": {"type": "array", "items": {"type": "integer", "minimum": 1}},
    "eviction_policy": {"type": "string", "enum": list(EVICTION_POLICIES)},
    **{
        name: {"type": "boolean"}
        for name in ("include_summary", "summary_only", "all", "reset", "important")
    },
}
# Set by the core, never by a classification.
_HIDDEN = {"at_most"}

_SYSTEM = (
    "You route requests sent to chd, a conversation history daemon, to exactly one tool. "
    "Each tool is one operation; fill only the parameters the request states, never invent "
    "values. For store, the text parameter must be copied verbatim from the request. If the "
    "request is not something the daemon does, or it is unclear which utterances it means, "
    "call not_understood. Always give your confidence between 0 and 1."
)


class QueryClassifier(Protocol):
    """Turns a query the rules refused into a ParsedQuery, or re-raises the refusal."""

    def classify(self, text: str, refusal: NotUnderstood) -> ParsedQuery: ...


def tool_definitions() -> list[dict[str, Any]]:
    """The Messages API ``tools``: one per operation, plus not_understood."""
    tools = []
    for guide in GUIDE:
        properties: dict[str, Any] = {}
        for name in field_sources(guide.operation):
            if name in _HIDDEN:
                continue
            schema = dict(_SCHEMAS.get(name, _INTEGER))
            schema["description"] = PARAMETERS[guide.operation].get(name, name)
            properties[name] = schema
        properties["confidence"] = {"type": "number", "minimum": 0, "maximum": 1}
        required = ["confidence"] + (["text"] if guide.operation == "store" else [])
        tools.append(
            {
                "name": guide.operation,
                "description": f"{guide.what} Example phrasings: {'; '.join(guide.forms[:4])}",
                "input_schema": {"type": "object", "properties": properties, "required": required},
            }
        )
    tools.append(
        {
            "name": _REFUSE_TOOL,
            "description": "The request is not a daemon operation, or it is ambiguous.",
            "input_schema": {
                "type": "object",
                "properties": {"reason": {"type": "string"}},
                "required": ["reason"],
            },
        }
    )
    return tools


class ClaudeClassifier:
    """A QueryClassifier over the Messages API with tool use, through the anthropic SDK."""

    def __init__(
        self,
        client: anthropic.Anthropic | None = None,
        model: str = DEFAULT_MODEL,
        timeout: float = 10.0,
        max_retries: int = 1,
    ) -> None:
        if client is None:
            import anthropic

            # Reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL. A short timeout and
            # one retry: the caller is waiting for an answer to its query.
            client = anthropic.Anthropic(timeout=timeout, max_retries=max_retries)
        self._client = client
        self.model = model
        self._tools = tool_definitions()
        self._operations = {tool["name"]: tool for tool in self._tools}

    def classify(self, text: str, refusal: NotUnderstood) -> ParsedQuery:
        import anthropic

        try:
            choice: ToolChoiceAnyParam = {"type": "any", "disable_parallel_tool_use": True}
            asked: list[MessageParam] = [{"role": "user", "content": text}]
            message = self._client.messages.create(
                model=self.model,
                max_tokens=512,
                system=_SYSTEM,
                # Plain JSON dicts (tests and docs read them as such) of ToolParam's shape.
                tools=cast("list[ToolParam]", self._tools),
                tool_choice=choice,
                messages=asked,
            )
        except anthropic.AnthropicError as error:
            log.warning("query classifier unavailable (%s); the rules' refusal stands", error)
            raise refusal from None
        calls = [block for block in message.content if block.type == "tool_use"]
        if not calls or calls[0].name == _REFUSE_TOOL or calls[0].name not in self._operations:
            raise refusal
        call = calls[0]
        fields = dict(call.input)
        confidence = fields.pop("confidence", 0.0)
        if not isinstance(confidence, (int, float)) or confidence < MIN_CONFIDENCE:
            raise refusal
        allowed = self._operations[call.name]["input_schema"]["properties"]
        if set(fields) - set(allowed):
            log.warning("classifier sent unknown parameters %s", sorted(set(fields) - set(allowed)))
            raise refusal
        said = fields.get("text")
        if call.name == "store" and (not isinstance(said, str) or said not in text):
            # A classified store must keep the caller's words; a paraphrase is refused.
            raise refusal
        return ParsedQuery(call.name, fields, round(float(confidence), 2))


def classifier_from_environment(
    enabled: bool, model: str = DEFAULT_MODEL
) -> ClaudeClassifier | None:
    """The classifier if it is enabled and ANTHROPIC_API_KEY is set, else None (the rules alone)."""
    if not enabled:
        return None
    if not os.environ.get("ANTHROPIC_API_KEY"):
        log.warning(
            "the query classifier is enabled but ANTHROPIC_API_KEY is not set; using the rules alone"
        )
        return None
    log.info("query classifier on (model %s)", model)
    return ClaudeClassifier(model=model)
