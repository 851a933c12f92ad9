"""The query language as data: the one source of docs/query-language.md and GetInstructions.

``daemon.instructions`` renders this as the GetInstructions text and as the
Markdown document; a test regenerates the document and fails on any
difference, and another runs every example below against the demo
conversation and checks the effect it claims, so the two texts can neither
drift from each other nor from what the daemon does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Example",
    "OperationGuide",
    "GUIDE",
    "DEMO_CONVERSATION",
    "PARAMETERS",
    "NOT_IN_TEXT",
    "SOURCES_RULE",
    "CONFIDENCE_RULE",
    "REASONS_RULE",
    "ERRORS_RULE",
    "MAX_INSTRUCTION_CHARS",
    "CallForm",
    "CALLS",
    "CALLS_RULE",
]

# The longest instruction the rules read (issue 14). The longest documented
# form is under 80 characters, and a search topic of a few sentences still
# fits. Past this a query that is not a store is refused before any rule
# runs: an utterance of any length is stored through a store phrasing or
# data.text, and a long topic is given as data.topic.
MAX_INSTRUCTION_CHARS = 2000


# What a stats answer holds, in its order (tests/test_query_docs.py checks
# both lists against real answers): the second only when the configured
# summarizer can reply late (Claude).
STATS_FIELDS = (
    "utterance_count",
    "by_speaker",
    "important_count",
    "tokens",
    "turn_count",
    "first_turn",
    "last_turn",
    "oldest_seq",
    "newest_seq",
    "next_seq",
    "summary_tokens",
    "summary_segments",
    "summary_through_seq",
    "summary_coverage",
    "summary_offline_only_utterances",
    "summary_awaiting_rewrite",
    "summary_rewrite_ranges",
    "summary_originals_dropped",
    "queue_length",
    "queue_tokens",
    "buffer_fill",
    "token_fill",
    "settings",
)
STATS_CLAUDE_FIELDS = ("summary_late_results",)


@dataclass(frozen=True, slots=True)
class Example:
    """A query and its effect on the demo conversation.

    ``expect`` keys: ``operation``; ``seqs`` (seqs of result.utterances, in
    order); ``removed``; ``stored`` (fields of result.utterance); ``result``
    (fields of result); ``left`` (seqs left in the buffer); ``error`` (a gRPC
    status name).
    """

    query: str
    expect: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True, slots=True)
class OperationGuide:
    operation: str
    what: str
    forms: tuple[str, ...]
    examples: tuple[Example, ...]
    returns: str


@dataclass(frozen=True, slots=True)
class CallForm:
    """A function-call spelling of an operation: ``get_last_n(5)``, ``summarize(token_limit=100)``.

    Positional arguments fill ``positional`` in order (a name starting with
    ``*`` takes all the rest, as a list); keyword arguments name any of the
    operation's parameters, or ``n`` for the first positional one. ``fixed``
    are the fields the name itself says; ``defaults`` apply when no argument
    gives that field.
    """

    name: str
    operation: str
    positional: tuple[str, ...] = ()
    fixed: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)


# (speaker, text): stored in this order with automatic turns, seqs 1-8, turns 1-4.
DEMO_CONVERSATION: tuple[tuple[str, str], ...] = (
    ("user", "What's the weather in Paris today?"),
    ("assistant", "Paris is sunny, 24 degrees."),
    ("user", "And tomorrow?"),
    ("assistant", "Rain is expected in Paris tomorrow."),
    ("user", "Book a table for two at 8pm."),
    ("assistant", "Booked: Chez Marie, 8pm, two people."),
    ("user", "What is our budget for the trip?"),
    ("assistant", "The budget is 1200 euros."),
)

# What each parameter means; where it may come from is read from intents.
PARAMETERS: dict[str, dict[str, str]] = {
    "store": {
        "text": "the utterance, stored verbatim",
        "speaker": "user (default), assistant or system",
        "turn_number": "the turn; without it user utterances open a new turn, others join the current one",
        "timestamp": "when it was said, RFC 3339 with a zone (imported history); at most 300 s ahead of the "
        "daemon's clock; default now. Times need not increase: time filters test each utterance's own",
        "idempotency_key": "a string of 1-128 characters, e.g. a UUID per store; a store sent again with a key "
        "the conversation still holds answers that utterance instead of storing it twice (a different text, "
        "speaker or turn with the same key is refused)",
        "utterances": "store-many: a list of {text, speaker, turn_number, timestamp} objects (text required, "
        "the others as for one store), stored in order in one commit, all or none, with one response "
        "(result.utterances, result.evicted); instead of text, speaker, turn_number and timestamp. At most "
        "1000 utterances and 4,000,000 characters of text per request (INVALID_ARGUMENT naming the limit); "
        "one idempotency_key stands for the whole batch (docs/protocol.md)",
    },
    "retrieve": {
        "topic": "rank by relevance to these words (BM25 blended with recency); each hit has a score",
        "limit": "at most this many topic hits (default 20); result.matches counts them all",
        "last_n": "keep the newest n of the filtered utterances",
        "first_n": "keep the oldest n of the filtered utterances",
        "last_turns": "only the newest k turns present",
        "first_turns": "only the oldest k turns present",
        "speaker": "only this speaker's utterances (metadata.speaker filters too, as in the spec)",
        "turn_from": "only turns >= this",
        "turn_to": "only turns <= this",
        "seq": "only this utterance (NOT_FOUND if it is not in the buffer)",
        "seqs": "only these utterances",
        "since": "only utterances at or after this RFC 3339 time (in the text, a time without zone is UTC)",
        "until": "only utterances before this RFC 3339 time (with since: 'in May 2023' is since 2023-05-01, until 2023-06-01)",
        "within_seconds": "only utterances of the last n seconds",
        "older_than_seconds": "only utterances older than n seconds",
        "day": "only utterances of this calendar day or week, resolved when the retrieve runs against the "
        "daemon's clock: today, yesterday, monday ... sunday (the latest before today), last week, "
        "this week (weeks start on Monday), day before yesterday, YYYY-MM-DD, or --MM-DD (the latest "
        "such date); after since, after, before or until it is a span ('since yesterday': yesterday "
        "on; 'until friday' includes Friday)",
        "timezone": "where days begin for day: a UTC offset (+02:00) or a zone name (Europe/Paris); "
        "default UTC (metadata.timezone works too, read only when day is given); names in any case",
        "include_summary": "also return the running summary",
        "summary_only": "return only the running summary",
        "context": "the running summary plus the newest utterances that fit token_limit, as one "
        "text to paste into a prompt (takes no other filter)",
        "token_limit": "with context: the token budget of that text (default summary_token_limit + max_tokens)",
        "archived": "read the archive of folded utterances (chd serve --archive-evicted) instead of the buffer",
        "where": "with topic: search only these of buffer, pending, archive, summary (default: all, one "
        "ranked list); refused without a topic, with archived naming another place, or with a window or "
        "seqs naming another than buffer",
    },
    "remove": {
        "oldest": "the oldest n (of the filtered) utterances in the buffer",
        "newest": "the newest n (of the filtered) utterances in the buffer",
        "before_turn": "utterances of turns < N (and summary segments made only of them)",
        "after_turn": "utterances of turns > N",
        "turn_from": "utterances of turns >= N",
        "turn_to": "utterances of turns <= N",
        "last_turns": "utterances of the newest k turns",
        "first_turns": "utterances of the oldest k turns",
        "seq": "one utterance (NOT_FOUND if it is gone)",
        "seqs": "these utterances",
        "speaker": "only this speaker's utterances",
        "all": "everything: buffer, summary and queue (takes no other selector)",
        "at_most": "refuse, removing nothing, if more than this many would go",
        "within_seconds": "utterances stored in the last N seconds",
        "older_than_seconds": "utterances stored more than N seconds ago",
    },
    "summarize": {
        "token_limit": "the summary's token budget (default: the conversation's summary_token_limit)",
        "turn_from": "summarize only turns >= this",
        "turn_to": "summarize only turns <= this",
        "last_n": "summarize only the newest n utterances of the buffer",
        "last_turns": "summarize only the newest k turns present",
        "first_turns": "summarize only the oldest k turns present",
    },
    "configure": {
        "buffer_size": "utterances kept in the buffer",
        "max_tokens": "tokens kept in the buffer (the token budget)",
        "summary_token_limit": "token budget of the running summary",
        "eviction_policy": "fifo (oldest first, the default) or importance (important ones last)",
        "eviction_batch": "how many utterances leave together once the buffer overflows",
        "reset": "drop this conversation's overrides first (the daemon's defaults apply again)",
    },
    "mark": {
        "seq": "the utterance to mark",
        "important": "true to mark (default), false to unmark",
    },
    "stats": {},
}

# Parameters the rules never read from the query text: a store's text is
# verbatim (so a turn number in it is just text), and at_most is only set to
# 1 by singular phrasings; where is a data field of issue 27's one search.
NOT_IN_TEXT: frozenset[tuple[str, str]] = frozenset(
    {
        ("store", "turn_number"),
        ("store", "timestamp"),
        ("store", "idempotency_key"),
        ("store", "utterances"),
        ("remove", "at_most"),
        ("retrieve", "where"),
        ("retrieve", "timezone"),
    }
)

GUIDE: tuple[OperationGuide, ...] = (
    OperationGuide(
        "store",
        "Append one utterance to the conversation's rolling buffer. A quoted span or a separator "
        "(:, -, \u2014, \u2013, ->, =>, a line break) marks where the utterance starts; it is stored "
        "exactly as given, even words like 'remove' or 'summarize'. The instruction around it may "
        "name the verb, the speaker, the destination and the kind of message in any order, before "
        "or after the utterance ('Note the following from the assistant \u2014 <text>', "
        "\"'<text>' \u2014 that's from the user, keep it\", 'note that the user told us: <text>'). "
        "Every word of the instruction must be understood: otherwise the store is refused "
        "(INVALID_ARGUMENT naming the unclear words), never guessed; quote the utterance or send it "
        "in data.text. The speaker comes from the phrase or metadata.speaker (default user). When "
        "the buffer passes buffer_size or max_tokens, utterances are evicted (by the eviction "
        "policy) and folded into the running summary.",
        (
            "Add utterance: <text>",
            "Add user utterance: '<text>'",
            "Add assistant utterance: <text>",
            "Please store this message from the system: <text>",
            "Record: <text>",
            "Remember that <text>",
            "Assistant: <text>",
            'The user said "<text>"',
            "Into the history, as the user: '<text>'",
            "'<text>' \u2014 that's from the assistant, keep it",
            "Here is the assistant's answer, '<text>', add it",
            "what the assistant answered was: <text>",
        ),
        (
            Example(
                "Add user utterance: 'What's the weather today?'",
                {
                    "operation": "store",
                    "stored": {
                        "seq": 9,
                        "speaker": "user",
                        "turn_number": 5,
                        "text": "What's the weather today?",
                    },
                },
                metadata={"turn_number": 5},
            ),
            Example(
                "Add utterance: Remove all my files please",
                {
                    "operation": "store",
                    "stored": {"text": "Remove all my files please"},
                    "left": [1, 2, 3, 4, 5, 6, 7, 8, 9],
                },
                note="stored as written; nothing is removed",
            ),
            Example(
                "Could you store this from the assistant: Sure, done.",
                {"operation": "store", "stored": {"speaker": "assistant", "text": "Sure, done."}},
            ),
            Example(
                "Save this for later: the gate code is 4411",
                {
                    "operation": "store",
                    "stored": {"speaker": "user", "text": "the gate code is 4411"},
                },
                note="the instruction's words are not part of the utterance",
            ),
            Example(
                "Save this for my boss: the gate code is 4411",
                {"error": "INVALID_ARGUMENT", "left": [1, 2, 3, 4, 5, 6, 7, 8]},
                note="'boss' is not understood, so where the utterance starts would be a guess",
            ),
            Example(
                "",
                {"operation": "store", "left": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]},
                data={
                    "operation": "store",
                    "utterances": [
                        {"text": "Any news on the trip?", "speaker": "user"},
                        {"text": "The train leaves at 9:15.", "speaker": "assistant"},
                    ],
                },
                note="store-many: seqs 9 and 10 (turn 5) in one commit; a bad item refuses both",
            ),
            Example(
                "",
                {"error": "INVALID_ARGUMENT", "left": [1, 2, 3, 4, 5, 6, 7, 8]},
                data={
                    "operation": "store",
                    "utterances": [{"text": "Fine."}, {"text": "And you?", "speaker": "bot"}],
                },
                note="speaker 'bot' of data.utterances[1] is refused, so 'Fine.' is not stored either",
            ),
        ),
        "result.utterance {seq, speaker, text, turn_number, utterance_index, timestamp, tokens, "
        "important, conversation_id}; result.evicted [seq...]; a store of data.utterances: "
        "result.utterances [utterance...] in the batch's order (utterance_index absent for one that "
        "went straight to the summary queue)",
    ),
    OperationGuide(
        "retrieve",
        "Read utterances (in conversation order) and/or the running summary. Filters combine: "
        "speaker, turns, seqs, time; then the newest/oldest n of what they chose. With a topic "
        "the candidates are ranked by relevance (BM25 over the buffer, blended with recency), "
        "best first, each with a score; the running summary is searched too and returned as "
        "result.summary_hit when it matches.",
        (
            "Find utterances about <topic>",
            "Search for 'budget meeting'",
            "What did the assistant say about Paris in turns 3 to 6?",
            "Did anyone mention the budget?",
            "Find the top 3 utterances about Paris",
            "Get the last 5 utterances",
            "Show me the three most recent messages",
            "Get the first 2 utterances",
            "Get the assistant's messages",
            "Get utterance 12",
            "Get utterances 3, 5 and 7",
            "Get utterances in turns 3 to 6",
            "Show everything since turn 4",
            "Get the last 2 turns",
            "Show the first two turns",
            "Nothing but the assistant's lines",
            "Messages where the budget was mentioned",
            "What was said in the last 10 minutes?",
            "Show the messages older than an hour",
            "Get messages since 2026-01-31T14:00:00Z",
            "What did the user say about the garden in May 2023?",
            "What was said yesterday?",
            "Find utterances about the garden on 3 May 2023",
            "Get messages until 2026-01-31T14:00:00Z",
            "Get the last 3 utterances with the summary",
            "Get summary",
            "Get context within 2000 tokens",
            "Get archived utterances",
            "last 5",
        ),
        (
            Example(
                "Find utterances about Paris",
                {"operation": "retrieve", "seqs": [2, 1, 4], "result": {"matches": 3}},
                note="best first; each hit carries its score and where it lives; an answer right after "
                "a question on the topic gains from it",
            ),
            Example(
                "Find utterances about weather",
                {"operation": "retrieve", "seqs": [1]},
                metadata={"speaker": "user"},
                note="metadata.speaker filters, as in the spec's example",
            ),
            Example(
                "What did the assistant say about Paris in turns 2 to 4?",
                {"operation": "retrieve", "seqs": [4]},
            ),
            Example("Get the last three utterances", {"operation": "retrieve", "seqs": [6, 7, 8]}),
            Example(
                "get_last_n(3)",
                {"operation": "retrieve", "seqs": [6, 7, 8]},
                note="the spec's call form",
            ),
            Example(
                "find_utterances(topic='Paris', limit=1)",
                {"operation": "retrieve", "seqs": [2], "result": {"matches": 3}},
            ),
            Example(
                "Get utterances in turns 2 to 3", {"operation": "retrieve", "seqs": [3, 4, 5, 6]}
            ),
            Example(
                "Show me the user's messages since turn 3",
                {"operation": "retrieve", "seqs": [5, 7]},
            ),
            Example("Get utterance 6", {"operation": "retrieve", "seqs": [6]}),
            Example(
                "Get summary",
                {"operation": "retrieve", "result": {"summary": "", "summary_through_seq": 0}},
                note="empty until something is evicted",
            ),
            Example(
                "get_summary()",
                {"operation": "retrieve", "result": {"summary": "", "summary_through_seq": 0}},
            ),
            Example(
                "Get context within 40 tokens",
                {"operation": "retrieve", "seqs": [7, 8]},
                note="the summary (empty here) and the newest utterances that fit, oldest first",
            ),
        ),
        "result.utterances [utterance..., with score when ranked]; with a topic result.ranked, "
        "result.matches and maybe result.summary_hit {text, score, turn_from, turn_to}; with the "
        "summary: result.summary, summary_tokens, summary_through_seq, summary_pending; with context: "
        "result.context (the text), tokens, token_limit, summary, utterances",
    ),
    OperationGuide(
        "remove",
        "Delete utterances. Every word of a remove must be understood, and a remove must say "
        "which utterances: 'remove messages', 'remove 3 messages' (from which end?) and removes "
        "by topic are refused, not guessed. A singular phrasing over a set ('the assistant's "
        "message') removes at most one utterance and is refused if there are more. 'before turn "
        "N' and turn ranges also drop summary segments made only of those turns; 'clear the "
        "conversation' deletes the buffer, the summary and the queue. Seq numbers are never reused.",
        (
            "Remove oldest utterance",
            "Remove the oldest 3 utterances",
            "Delete the last message",
            "Remove before turn 4",
            "Remove everything after turn 6",
            "Remove turns 3 to 5",
            "Delete the utterances older than an hour",
            "Remove the last turn",
            "Scrap the first two turns",
            "Delete every turn before turn 3",
            "Strike the entry numbered 5",
            "Remove utterance 12",
            "Delete messages 3 and 4",
            "Remove everything the assistant said",
            "Remove the user's messages before turn 3",
            "Clear the conversation",
        ),
        (
            Example("Remove oldest utterance", {"operation": "remove", "removed": [1]}),
            Example("Remove the newest two messages", {"operation": "remove", "removed": [7, 8]}),
            Example("Remove before turn 3", {"operation": "remove", "removed": [1, 2, 3, 4]}),
            Example("remove_before_turn(3)", {"operation": "remove", "removed": [1, 2, 3, 4]}),
            Example("Scrap the first two turns", {"operation": "remove", "removed": [1, 2, 3, 4]}),
            Example("Delete utterances 2 and 5", {"operation": "remove", "removed": [2, 5]}),
            Example(
                "Remove everything the assistant said after turn 2",
                {"operation": "remove", "removed": [6, 8]},
            ),
            Example("Clear the conversation", {"operation": "remove", "left": []}),
            Example(
                "Remove 3 messages",
                {"error": "INVALID_ARGUMENT"},
                note="refused: the oldest 3 or the newest 3?",
            ),
            Example(
                "Forget what I said about Paris",
                {"error": "INVALID_ARGUMENT"},
                note="refused: find them first, then remove by seq",
            ),
            Example(
                "Remove the assistant's message",
                {"error": "INVALID_ARGUMENT", "left": [1, 2, 3, 4, 5, 6, 7, 8]},
                note="refused: the assistant has 4 messages; nothing is removed",
            ),
        ),
        "result.removed [seq...], result.summary_segments_dropped",
    ),
    OperationGuide(
        "summarize",
        "Summarize the conversation (running summary plus the buffer), or only a turn range, "
        "within a token limit (default: the conversation's summary_token_limit). Read-only: "
        "the stored summary is not changed.",
        (
            "Summarize conversation",
            "Summarize the conversation in 200 tokens",
            "Give me a 100-token summary",
            "Summarize turns 3 to 6",
            "Recap everything since turn 4",
            "Summarize the last 10 messages",
            "Give me an overview of the last 2 turns, 60 tokens max",
            "A synopsis of the first two turns",
            "What's the gist?",
        ),
        (
            Example(
                "Summarize conversation",
                {"operation": "summarize", "result": {"utterances_covered": 8}},
                data={"token_limit": 500},
            ),
            Example(
                "Summarize turns 2 to 3 in 50 tokens",
                {"operation": "summarize", "result": {"utterances_covered": 4, "token_limit": 50}},
            ),
            Example(
                "Summarize the last 3 messages",
                {"operation": "summarize", "result": {"utterances_covered": 3}},
            ),
            Example(
                "summarize(token_limit=100)",
                {"operation": "summarize", "result": {"utterances_covered": 8, "token_limit": 100}},
            ),
        ),
        "result.summary, result.tokens (never above the limit), result.token_limit, "
        "result.utterances_covered",
    ),
    OperationGuide(
        "configure",
        "Set or read this conversation's limits (the budget manager's controls). Values stay "
        "with the conversation in the backend. Lowering a limit applies at once: utterances "
        "that no longer fit are evicted into the summary, and a summary over a lowered "
        "summary_token_limit is shortened. With nothing to set, the settings are returned.",
        (
            "Set the token budget to 4000",
            "Set buffer size to 50 and the summary token limit to 300",
            "buffer_size = 50",
            "Limit the buffer to 10 utterances",
            "Use the importance eviction policy",
            "Switch to FIFO eviction",
            "Set the eviction batch to 2",
            "What is the token budget?",
            "Show the settings",
            "Reset the settings",
        ),
        (
            Example(
                "Set the token budget to 4000",
                {"operation": "configure", "result": {"settings": {"max_tokens": 4000}}},
            ),
            Example(
                "Set the buffer size to 5",
                {
                    "operation": "configure",
                    "result": {"evicted": [1, 2, 3]},
                    "left": [4, 5, 6, 7, 8],
                },
                note="evicted at once and folded into the summary",
            ),
            Example(
                "Use the importance eviction policy",
                {
                    "operation": "configure",
                    "result": {"settings": {"eviction_policy": "importance"}},
                },
            ),
        ),
        "result.settings (effective), result.overrides (this conversation's), result.changed, "
        "result.evicted [seq...], result.summary_tokens, result.summary_shortened",
    ),
    OperationGuide(
        "mark",
        "Mark an utterance as important, or unmark it (the frontal cortex's control). With the "
        "importance eviction policy, important utterances are evicted last.",
        (
            "Mark utterance 12 as important",
            "Flag message 7 as important",
            "Pin utterance 7",
            "Unmark utterance 12",
            "Utterance 12 is no longer important",
        ),
        (
            Example(
                "Mark utterance 8 as important",
                {
                    "operation": "mark",
                    "result": {"changed": True},
                    "stored": {"seq": 8, "important": True},
                },
            ),
            Example(
                "Mark the budget as important",
                {"error": "INVALID_ARGUMENT"},
                note="refused: say which utterance by seq",
            ),
        ),
        "result.utterance (with important), result.changed",
    ),
    OperationGuide(
        "stats",
        "Counts, tokens, turns, summary size and queue length of the conversation, with its "
        "effective settings.",
        (
            "Stats",
            "Show statistics",
            "How many utterances are stored?",
            "How many tokens are used?",
            "How big is the summary?",
        ),
        (
            Example(
                "How many utterances are stored?",
                {
                    "operation": "stats",
                    "result": {"utterance_count": 8, "turn_count": 4, "queue_length": 0},
                },
            ),
        ),
        "result."
        + ", ".join(STATS_FIELDS)
        + "; with Claude configured also "
        + ", ".join(STATS_CLAUDE_FIELDS)
        + " (the daemon's late Claude replies: applied, dropped, failed, in_flight)",
    ),
)

# The spec names get_last_n(5) and get_summary(); every operation has such a spelling.
CALLS: tuple[CallForm, ...] = (
    CallForm("add_utterance", "store", ("text", "speaker")),
    CallForm("store", "store", ("text", "speaker")),
    CallForm("add_user_utterance", "store", ("text",), {"speaker": "user"}),
    CallForm("add_assistant_utterance", "store", ("text",), {"speaker": "assistant"}),
    CallForm("add_system_utterance", "store", ("text",), {"speaker": "system"}),
    CallForm("get_last_n", "retrieve", ("last_n",)),
    CallForm("get_first_n", "retrieve", ("first_n",)),
    CallForm("get_last_turns", "retrieve", ("last_turns",)),
    CallForm("get_utterance", "retrieve", ("seq",)),
    CallForm("get_utterances", "retrieve", ("*seqs",)),
    CallForm("get_turns", "retrieve", ("turn_from", "turn_to")),
    CallForm("find_utterances", "retrieve", ("topic", "limit")),
    CallForm("search", "retrieve", ("topic", "limit")),
    CallForm("retrieve", "retrieve"),
    CallForm("get_summary", "retrieve", (), {"summary_only": True}),
    CallForm("get_context", "retrieve", ("token_limit",), {"context": True}),
    CallForm("get_archived", "retrieve", ("topic",), {"archived": True}),
    CallForm("remove_oldest", "remove", ("oldest",), defaults={"oldest": 1}),
    CallForm("remove_newest", "remove", ("newest",), defaults={"newest": 1}),
    CallForm("remove_before_turn", "remove", ("before_turn",)),
    CallForm("remove_after_turn", "remove", ("after_turn",)),
    CallForm("remove_turns", "remove", ("turn_from", "turn_to")),
    CallForm("remove_utterance", "remove", ("seq",)),
    CallForm("remove_utterances", "remove", ("*seqs",)),
    CallForm("remove", "remove"),
    CallForm("clear_conversation", "remove", (), {"all": True}),
    CallForm("summarize", "summarize", ("token_limit",)),
    CallForm("summarize_turns", "summarize", ("turn_from", "turn_to", "token_limit")),
    CallForm("configure", "configure"),
    CallForm("get_settings", "configure"),
    CallForm("reset_settings", "configure", (), {"reset": True}),
    CallForm("set_buffer_size", "configure", ("buffer_size",)),
    CallForm("set_max_tokens", "configure", ("max_tokens",)),
    CallForm("set_token_budget", "configure", ("max_tokens",)),
    CallForm("set_summary_token_limit", "configure", ("summary_token_limit",)),
    CallForm("set_eviction_policy", "configure", ("eviction_policy",)),
    CallForm("set_eviction_batch", "configure", ("eviction_batch",)),
    CallForm("mark_important", "mark", ("seq",), {"important": True}),
    CallForm("unmark_important", "mark", ("seq",), {"important": False}),
    CallForm("mark", "mark", ("seq", "important")),
    CallForm("unmark", "mark", ("seq",), {"important": False}),
    CallForm("stats", "stats"),
    CallForm("get_stats", "stats"),
)

CALLS_RULE = (
    "Every operation can also be written as a function call, as the spec's get_last_n(5) and "
    "get_summary(): positional arguments in the order shown, keyword arguments by parameter "
    "name (or n for the first one), values as numbers, \"strings\" or 'strings', true/false, "
    "null, or [lists]. get_last_n(5), get_last_n(n=5), summarize(token_limit=100), "
    'remove_before_turn(4), find_utterances(topic="weather", limit=3), '
    'retrieve(speaker="user", last_n=2). A call is understood whole or refused, never guessed; '
    "a call's text is an instruction, so a long utterance is stored with 'Add utterance: <text>'."
)

SOURCES_RULE = (
    "A parameter may come from the query text, from metadata or from data (each operation's "
    "table says which). When two sources give different values the query is refused with "
    "INVALID_ARGUMENT naming both: none of them silently wins. Programs that already know what "
    "they want can skip the language: set data.operation to an operation's name and pass its "
    "parameters as data fields (the query text is then ignored; metadata.interpreted_by says "
    "'data'). metadata.conversation_id (default 'default') selects the conversation."
)
REASONS_RULE = (
    "Reasons, notes and who asked. A remark may also be a sentence of its own with a subject and "
    "its verb ('Retrieve every entry. The model needs the complete context to answer the end "
    "user's follow-up.', '...; the operator is auditing what the model has said'): it may then name "
    "the model, the context or a speaker it tells of (as the subject of a verb, or after 'for', "
    "'to', 'told'), and a summarize's reason may name the summary. A speaker's possessive before a "
    "kind of message ('the user's answer', 'his messages') is a filter, never a remark. Beside a "
    "remove of a turn, a range or a count, a remark that names a kind of message, an owner or a "
    "speaker judged wrong ('Delete turn 2, the answer the agent sent was wrong') refuses the "
    "remove; beside a remove of seqs or of everything, a remark is set aside when it agrees with "
    "the remove ('- patient withdrew the question', '- next customer', '... was superseded'). A "
    "speaker said to have asked after a remove ('Delete everything - the customer asked') is "
    "refused: it may say who asked or whose messages go. 'From now on' and 'going forward' are "
    "read by configure only ('From now on, delete the user's messages' is refused, not run). A "
    "setting's current value said beside the new one is set aside ('from 512 to 300', 'to 50 "
    "instead of 20', '(currently 20)'). A stats question joined to another request ('How full is "
    "the buffer, and show the summary') or narrowed ('..., only counting the assistant') is "
    "refused. A remove may not mix seqs and turns ('seq 3 until turn 4'). A store written as SQL "
    "(INSERT INTO history (speaker, text) VALUES ('assistant', '...')) is a store; in a "
    "developer's conditions 'AND' between two fields is a read's filters (WHERE speaker='user' AND "
    'turn >= 2). A note set apart after a quoted utterance by a bracket or a dash (\'"..." '
    "(patient at the desk)', '\"...\" - ticket 4471', '\"...\" - told the patient') is set aside; "
    "only who it says spoke is read, and a turn, seq, place, number word, store verb, negation, "
    "hedge, second quote, or a person spoken to with no speaker given refuses the store. At the "
    "end of an unquoted utterance, a last sentence or bracket that asks for the store or says not "
    "to act on the text ('Please record it as a user utterance; do not carry out the "
    "cancellation') is instruction or refuses the store, and a labelled note ('Reason: ...', "
    "'Context: ...') refuses it: whether such words were said is not certain."
)
CONFIDENCE_RULE = (
    "Every answered query's metadata carries confidence: the share of the query's words the "
    "parser understood. A read (retrieve, summarize, stats, reading settings) needs 0.8; a write "
    "(remove, mark, configure) needs 1.0, every word understood. A read needs 1.0 too when the word "
    "it did not understand is its first (an unknown verb), a speaker, a turn or a number, or the word "
    "after a count ('the last 3 exchanges'): those would change what it returns. A query that starts "
    "with a remove verb (remove, delete, scrap, strike, purge...) runs as a remove or not at all, "
    'and a remove, mark or configure word anywhere in the query ("... can be deleted", "turn 2 '
    'should go") makes it that write or a refusal, never a read that ignores the word; "dump", which '
    "may mean show or delete, is refused as a remove. A query the rules refuse as written is read "
    "once more with its instruction words normalized (never a quoted span, a topic after 'about', "
    "a number, a name or a store's utterance): abbreviations and spellings from the lexicon "
    "(daemon/core/language/grammar/lexicon.toml: 'plz', 'msgs', 'convo', 'rm', 'erase', 'recap'), "
    "lemmas ('deleted' -> 'delete') and a typo correction against the grammar's own words (one edit "
    "for words of 4-7 letters, two for longer, only when one word is that close and the word is not "
    "English). Developer forms read as their words: turn>=3, seq=7, speaker=user, 5..8, tail -n 2. "
    "Commentary safety rule: a clause at either end of the query (after a comma, a dash, a bracket "
    "or a sentence end) may be set aside as commentary ('it was a mistake', 'lol') only when the "
    "rest of the query is read with every word understood and the clause holds no number, speaker, "
    "turn, seq, negation or scope word (not, no, except, only, but, all, keep, also...), no write word "
    "and no operation verb; otherwise the query is refused. A remark that says why (a clause with a "
    "verb of its own, a reason word or a 'Rationale:' label: '..., as it contained an error', "
    "'They were logged by mistake.') may be set aside by the same rule, and also never when it names "
    "a speaker, what is wanted (summary, settings, context), a verb that asks, or takes the request "
    "back ('the reply can stay', 'disregard this', 'the wrong conversation'); a read's remark must "
    "start with a pronoun or a reason word. A store's instruction is read clause by clause under the "
    "same rule, never setting aside a clause that names a speaker, a turn, a store or the content. "
    "A spoken correction ('the last two no wait the last three') replaces only the phrase it repeats. "
    "Questions and how-to requests ('Is the buffer size 5?', 'How do I delete turn 2?') never run a "
    "write or a counted read; 'and' between two selections of a remove, a setting named without a "
    "value, a topic with an exclusion, and a summary with a topic are refused. A read never ignores a negation or a "
    "lexicon word as a stray word. Words after a store's quoted utterance are instruction when they "
    "are instruction words, a note when they say the content is to be kept as is, set aside by the "
    "same rule when they are commentary, and otherwise refuse the store: they are never stored as said. "
    "A read never ignores an order, time or count word either ('after', 'older', 'first', 'four'). "
    "Where a stored utterance starts and ends must be certain: quotes of other languages bound it "
    "(\u201e\u2026\u201c, \u00ab\u2026\u00bb, \u2039\u2026\u203a, \u300c\u2026\u300d); a quote mark the rules cannot pair, a "
    "speaker label that may be part of the text ('Add: user: hello'), store words inside a text "
    "given before its instruction, or an end that mixes instruction and other words is refused, "
    "never stored as a guess. "
    "Below that the query is refused "
    "with INVALID_ARGUMENT and the closest supported forms; when the rules read the query but for "
    "words the commentary rule could set aside (a write: but for none), the message ends with a line "
    "'did_you_mean: [...]', a JSON list of one or two function calls (remove(seq=4), "
    'retrieve(speaker="user", last_n=2)) that, sent back as the query, do what the rules read. '
    "Labelled forms read as their words: 'Operation: remove. Target: seq 6.', 'op=summarize', and a "
    'JSON object alone or after a verb ({"op": "store", "speaker": "user", "text": "..."}, '
    "'Retrieve utterances {\"turn_from\": 3}'). If the daemon runs with the query "
    "classifier enabled and ANTHROPIC_API_KEY set, such a query is classified by Claude into the "
    "same operations instead (metadata.interpreted_by says 'classifier'); a classified remove "
    "deletes at most one utterance."
)
ERRORS_RULE = (
    "Errors: INVALID_ARGUMENT for a query that is not understood, ambiguous, or has a bad field "
    "(the message says which and what to write instead); NOT_FOUND for a seq that is not in the "
    "buffer; RESOURCE_EXHAUSTED for an utterance over the size limits. A failed query changes nothing. "
    f"A query other than a store is read up to {MAX_INSTRUCTION_CHARS:,} characters and refused "
    "(INVALID_ARGUMENT) past that: a store's utterance may be of any length, and a longer topic goes "
    "in data.topic ('Find utterances' with data.topic). Outside quotes, a run of whitespace or "
    "control characters reads as one space. Error messages quote at most about the first 80 "
    "characters of what the caller sent, and say how long the whole was."
)
