"""Issue 25, fifth pass: classes the tuning corpora (a, c, d, e) still refused, each with its counter-case.

What a rule sets aside must never be what narrows, negates or changes the
request; a store's text must be exactly what was quoted.
"""

from __future__ import annotations

from typing import Any

import pytest

from chd.core.errors import InvalidRequest
from chd.core.language.parser import parse


@pytest.mark.parametrize(
    ("query", "operation", "fields"),
    [
        # Time windows without "the" and with glued units.
        ("get utts from last 10m", "retrieve", {"within_seconds": 600}),
        ("show msgs from last 2 hrs", "retrieve", {"within_seconds": 7200}),
        ("Messages of last 10 minutes, show me.", "retrieve", {"within_seconds": 600}),
        # Ranges said with until/till, a second noun, or to the end.
        ("Show me the seq 2 until 5.", "retrieve", {"seqs": [2, 3, 4, 5]}),
        ("From seq 5 until seq 7 delete everything.", "remove", {"seqs": [5, 6, 7]}),
        ("From turn 3 until the end, everything delete.", "remove", {"turn_from": 3}),
        ("Remove turn 3 to the end of the conversation", "remove", {"turn_from": 3}),
        # Non-native questions about speech.
        (
            "What said the assistant in turn 2?",
            "retrieve",
            {"turn_from": 2, "turn_to": 2, "speaker": "assistant"},
        ),
        ("What user was saying?", "retrieve", {"speaker": "user"}),
        ("Which messages said the assistant", "retrieve", {"speaker": "assistant"}),
        (
            "What said the assistant (turn 2)",
            "retrieve",
            {"turn_from": 2, "turn_to": 2, "speaker": "assistant"},
        ),
        # Narrative remarks beside a write whose target is complete.
        ("Delete seq 7 — patient withdrew the question.", "remove", {"seq": 7}),
        # An orchestrator's reason in a sentence of its own: who and why, not which messages.
        (
            "Provide all records from turn 2. Reason: the end user is referring back to what was "
            "said about tomorrow.",
            "retrieve",
            {"turn_from": 2, "turn_to": 2},
        ),
        (
            "List the assistant's messages only; the operator is auditing what the model has said.",
            "retrieve",
            {"speaker": "assistant"},
        ),
        (
            "Summarize the conversation so far. The summary will be injected into the context of "
            "the next model call.",
            "summarize",
            {},
        ),
        (
            "Show the last 3 messages. The summary will be needed too.",
            "retrieve",
            {"last_n": 3, "include_summary": True},
        ),
        (
            "Please delete the record with sequence number 6; the booking confirmation it "
            "contains was superseded.",
            "remove",
            {"seq": 6},
        ),
        ("Wipe the whole conversation — next customer.", "remove", {"all": True}),
        (
            "Could you wipe this whole conversation? The customer asked for their data to be erased.",
            "remove",
            {"all": True},
        ),
        ("Set max tokens to 6000 — we keep hitting it.", "configure", {"max_tokens": 6000}),
        # The summary alone, in other words.
        (
            "Show only the stored summary, without any utterances.",
            "retrieve",
            {"summary_only": True},
        ),
        (
            "get stored summary only, no utterances, don't regenerate it",
            "retrieve",
            {"summary_only": True},
        ),
        ("How full is the buffer? (checking in on it)", "stats", {}),
        ("Can you pull up the last couple of messages real quick?", "retrieve", {"last_n": 2}),
        (
            "Please limit the summary to 300 tokens from now on.",
            "configure",
            {"summary_token_limit": 300},
        ),
        # Notes set apart after a quoted utterance: only who spoke is read.
        (
            'Add user utterance: "My insurance card number changed." (patient at the desk)',
            "store",
            {"text": "My insurance card number changed.", "speaker": "user"},
        ),
        (
            'Log customer message: "The app crashes when I upload a photo." — ticket 4471',
            "store",
            {"text": "The app crashes when I upload a photo.", "speaker": "user"},
        ),
        (
            'Store reply from assistant: "Dr. Weber has a free slot." — told the patient',
            "store",
            {"text": "Dr. Weber has a free slot.", "speaker": "assistant"},
        ),
        (
            'Add: "Is the lab open on Saturday?" - caller asked, I answered on the phone',
            "store",
            {"text": "Is the lab open on Saturday?", "speaker": "user"},
        ),
        (
            "Please store the text which I put in data, it is from user.",
            "store",
            {"speaker": "user"},
        ),
        (
            "Could you record the bot's answer for me? It's in the data field.",
            "store",
            {"speaker": "assistant"},
        ),
        (
            "Please clear the entire conversation history, including the summary; the session has ended.",
            "remove",
            {"all": True},
        ),
        (
            "Please remove the single oldest utterance from the buffer to free space for new context.",
            "remove",
            {"oldest": 1},
        ),
        (
            "Kindly do the needful and add system message 'Answer in French when possible.'",
            "store",
            {"text": "Answer in French when possible.", "speaker": "system"},
        ),
        ("show me the first exchange", "retrieve", {"turn_from": 1, "turn_to": 1}),
        # The value a setting has now, said beside the new one.
        ("set buffer size to 50 (currently 20)", "configure", {"buffer_size": 50}),
        (
            "change the summary limit from 512 to 300 tokens",
            "configure",
            {"summary_token_limit": 300},
        ),
        # Square brackets right after the name of a message quote it.
        (
            "Add a user utterance [Could you move the reservation to 9pm instead?] to the buffer.",
            "store",
            {"text": "Could you move the reservation to 9pm instead?", "speaker": "user"},
        ),
        ("Add: [INFO] server started", "store", {"text": "[INFO] server started"}),
        # Notes that the text is exact, and where the turn is given.
        (
            "Please append the assistant's latest response to the history. The exact text is "
            "provided in data.text; do not paraphrase it.",
            "store",
            {"speaker": "assistant"},
        ),
        (
            "Write the assistant message in data.text into the conversation memory; the turn "
            "number is set in the metadata.",
            "store",
            {"speaker": "assistant"},
        ),
        # Non-native: a second "number" in a list of seqs, a foreign word glossed in English.
        ("Message number 5 and number 6, show please.", "retrieve", {"seqs": [5, 6]}),
        ("Make a resumo (summary) of all the conversation, please.", "summarize", {}),
        # "What the user was saying: <text>" reports the text; "on this call" is where.
        (
            "What the user was saying: remove all",
            "store",
            {"text": "remove all", "speaker": "user"},
        ),
        ("Get the last 4 messages on this call", "retrieve", {"last_n": 4}),
        ("Delete turn 2, it was a mistake", "remove", {"turn_from": 2, "turn_to": 2}),
        ("Delete turn 2 — that was a mistake", "remove", {"turn_from": 2, "turn_to": 2}),
        (
            "The customer asks: can I pay later?",
            "store",
            {"text": "can I pay later?", "speaker": "user"},
        ),
        (
            "Forget it, I'll walk. -> add it, from the agent",
            "store",
            {"text": "Forget it, I'll walk.", "speaker": "assistant"},
        ),
        # The caller's own wish, and one message with a remark about it.
        ("The turn 2, I want that you delete it.", "remove", {"turn_from": 2, "turn_to": 2}),
        ("Last message, remove it — typed it wrong.", "remove", {"newest": 1}),
        ("Drop everything before turn 4 — new patient at the desk.", "remove", {"before_turn": 4}),
        (
            'Add utterance: "I can help." — said by the assistant',
            "store",
            {"text": "I can help.", "speaker": "assistant"},
        ),
        (
            "Delete all utterances before turn 3. The earlier weather discussion is no longer "
            "relevant.",
            "remove",
            {"before_turn": 3},
        ),
        (
            '{"op": "get", "filter": {"speaker": "assistant", "turn": 2}}',
            "retrieve",
            {"turn_from": 2, "turn_to": 2, "speaker": "assistant"},
        ),
        # The old value's unit goes with it.
        ("Set the buffer size to 30 (currently 4000 tokens)", "configure", {"buffer_size": 30}),
        (
            "What did the user say about the call",
            "retrieve",
            {"speaker": "user", "topic": "the call"},
        ),
        ("Add: Thanks; keep it up.", "store", {"text": "Thanks; keep it up."}),
        # A developer's SQL: INSERT is a store; AND between conditions on two fields is a read's filters.
        (
            "INSERT INTO history (speaker, text) VALUES ('assistant', 'A pass costs 62 euros.')",
            "store",
            {"speaker": "assistant", "text": "A pass costs 62 euros."},
        ),
        (
            "insert into h (role, content, turn) values ('user', 'hi (there); and bye', 5);",
            "store",
            {"speaker": "user", "text": "hi (there); and bye", "turn_number": 5},
        ),
        (
            "SELECT text FROM utterances WHERE speaker='user' AND turn >= 2",
            "retrieve",
            {"turn_from": 2, "speaker": "user"},
        ),
        # Corpus g: a long last sentence asking for the store is instruction; an arrow points
        # back at a bracketed text; a misspelt owner is corrected, not dropped; "on this
        # ticket" is where, not a topic.
        (
            "Clinic front desk here. Patient says — I need to move my appointment to Thursday. "
            "Please store that as the patient's (user) message.",
            "store",
            {"text": "I need to move my appointment to Thursday.", "speaker": "user"},
        ),
        (
            "[I already tried restarting the app twice.] <- that's from the caller, add it to the "
            "conversation as user.",
            "store",
            {"text": "I already tried restarting the app twice.", "speaker": "user"},
        ),
        (
            "Show me the assistent's reply from turn 3.",
            "retrieve",
            {"turn_from": 3, "turn_to": 3, "speaker": "assistant"},
        ),
        (
            "Before I call back, show me the last 4 messages on this ticket.",
            "retrieve",
            {"last_n": 4},
        ),
        # A long last sentence that only reports speech stays part of the text.
        (
            "Add: I talked to support. The user said it would be fixed by Monday, which is fine.",
            "store",
            {
                "text": "I talked to support. The user said it would be fixed by Monday, which is fine."
            },
        ),
    ],
)
def test_read_as_meant(query: str, operation: str, fields: dict[str, Any]) -> None:
    parsed = parse(query)
    assert (parsed.operation, parsed.fields) == (operation, fields)


@pytest.mark.parametrize(
    "query",
    [
        # A remark that narrows or takes the write back is no remark.
        "Delete turn 2 — only the user's message",
        "Delete seq 7 — the reply can stay.",
        # A reason that asks for something more is no reason.
        "Delete turn 1 to make room for a new summary",
        # A note that names a turn or seq, negates or hedges the store, or asks for another.
        'Add: "hello" — seq 4',
        'Add user utterance: "hello" — not the assistant',
        'Add: "hello" (do not save this one)',
        'Add assistant utterance: "hello" (the patient said it)',
        # Stats beside another request.
        "How full is the buffer, and show the summary",
        # An INSERT whose values do not fit its columns; a second statement after it.
        "insert into utterances (text) values ('a', 'b')",
        "INSERT INTO history (speaker, text) VALUES ('assistant', 'x'); DELETE FROM history",
        # A bracket before a separator is a tag; words after a bracket that are not all
        # instruction may be the text's own.
        "Add user message [urgent]: the server is down",
        "Add user message [hello] the server is down",
        # A gloss is read only for a word that is not English ("Paris (summary)" stays Paris).
        "Delete the Paris (summary)",
        # Two conditions on one key are no conjunction of filters.
        "get seq=3 and seq=5",
        # Outside review of this pass: a remark naming whose message, or which kind, beside a
        # remove of a turn may narrow it; a policy for the future is no remove now.
        "Delete turn 2, the answer the agent sent was wrong",
        "Delete turn 2, the user has requested deletion of his messages",
        "Delete turn 3, the user retracted his answer",
        "Delete turn 2, the user was wrong",
        "Show turns 1-2. The model needs only the user's questions.",
        "From now on, delete the user's messages",
        "Going forward, remove the assistant's utterances",
        "From now on summary must be maximum 256 tokens",
        # A request followed by who asked is no store, and no remove of that speaker's messages.
        "Remove turn 2 - caller asked",
        "Delete everything — the customer asked",
        # An inverted question before a separator is no reported store.
        "What said the assistant in turn 2 - ticket 4471",
        "What said the user: clear everything",
        # Notes: whom it was said to with no speaker, both named, a second quote, a turn in
        # words, a destination.
        '"Your card is blocked." — reply to the customer',
        '"Refund please" — agent typing for the customer',
        '"Refund please" — and also "cancel my order"',
        'Add: "I also need a receipt." (turn three)',
        'Add: "I also need a receipt." — to the archive',
        'Add: "hi" (in conversation sales)',
        # The summary without messages, and a filter on the messages left out.
        "Get the summary and don't include the user's messages",
        "Get the summary without any messages about the weather",
        # Stats joined to a read, or narrowed.
        "How full is the buffer and what did the assistant say?",
        "How full is the buffer; the user asked for the summary too",
        "How many utterances are there, only counting the assistant",
        "How full is the buffer? (checking before the busy hour)",
        # Seqs and turns in one remove.
        "Remove seq 3 until turn 4",
        # Corpus g: a caller's note after an unquoted text (labelled, bracketed with store words,
        # or a request to store it and not act on it) refuses rather than being stored with it.
        "Store the following user utterance. Utterance: Can we move the dinner to 9pm instead? "
        "Reason: the end user changed their plans and the model will need this.",
        "Add user utterance: Is it going to be cold in the evening? (The end user is deciding "
        "whether to bring a jacket; no action is needed beyond storing it.)",
        "The end user wrote: Cancel the dinner reservation. Please record it as a user "
        "utterance; do not carry out the cancellation, as that is handled by another agent.",
        "Persist this entry in the conversation memory. Purpose: the model must be able to "
        "quote its own earlier answer later. Entry: A taxi will pick you up at 7:30pm.",
        # Second review: beside a remove of a turn, a range or a count, any speaker in a remark
        # may narrow it; a reason that keeps context may contradict a smaller buffer; an old
        # value beside a correction; "or" between selections; a remove set aside with a read.
        "Please get rid of turns 1 and 2, not relevant for this patient.",
        "Delete all entries before turn 3. Reason: the end user has moved on.",
        "Delete turn 2, the assistant answered wrong",
        "Delete turn 2 — the bit the customer typed",
        "Delete the last 2 — user sent them by mistake",
        "Set the buffer size to 3. The operator wants the context kept verbatim.",
        "Set the buffer size to 20 instead of 30 — no wait, 40",
        "Delete the user's messages or turn 2",
        "DELETE FROM history WHERE speaker='user' OR turn=2",
        "Delete the operator's messages",
        "Delete the everythings's messages",
        "Summarize the conversation. The old messages can then be removed.",
        "SELECT * FROM history WHERE speaker='user' AND text LIKE '%card%'",
        "[I want a refund] <- from the caller",
        # Second review, stores: a request or a question as the text, a person spoken to,
        # a labelled note after a dash, two labelled texts, the customer's own request.
        "Remove the last 3 — the assistant wrote them",
        '"I can help." — told the patient',
        "Add user utterance: Please cancel — Reason: I'm sick",
        "Store this. Reason: compliance. Message: Hello. Entry: Bye.",
        "Add user utterance: I want a refund (please log that in my file, and never act on "
        "anything without asking me first)",
        "Add: Hi there. Do not act on the refund until the manager approves it, thanks.",
        # A quoted span after the last separator is a text, never the instruction (review of
        # issue 31: this stored "Content (verbatim)").
        "Content (verbatim) – „Save me”",
        # Third review: a reported command after a separator is never run; only plain reasons
        # beside a remove of a turn or a count; a reason that needs the context beside a cut;
        # a slash between selections; an old value before a correction; a person told.
        "What was the user saying: remove all",
        "What was the customer saying - delete everything",
        "Delete turn 2, the second one was wrong",
        "Delete turn 2, she typed it by mistake",
        "Delete the last 2 - the bottom one was a mistake",
        "Set the token budget to 20. The model needs the complete context.",
        "Delete the user's messages / turn 2",
        "Set the buffer size to 2, was 30 — no wait 6",
        '"I can help." — the customer was told',
        "Add assistant utterance: Noted. I will record it.",
        "SELECT * WHERE LOWER(text) LIKE '%hi%'",
        # Fourth review: a question or a report before a separator never runs what follows;
        # the speaker who asked is no filter; a remark opening with a noun that finds fault;
        # more spellings of "or"; a bare remove as a text-first store's text; a person told,
        # spoken for or who heard; a labelled comment; a text condition set aside with its bracket.
        "What did the user say: remove all",
        "What did the assistant reply: delete turn 2",
        "What was the user saying; remove all",
        "What was the user saying. Remove all.",
        "The user asked me to delete turn 2",
        "Agent asked me to delete everything",
        "The customer says delete turn 2",
        "Delete turn 2, the apology was wrong",
        "Delete turn 2 — wrong expiry claim",
        "Delete the oldest 3 — GPT was wrong",
        "Delete messages 3 to 5 — the customer typed by mistake",
        "Delete the user's messages/turn 2",
        "Delete the user's messages; turn 2",
        "Delete all — keep the assistant's",
        "The customer was told: Go to settings.",
        "Message for the customer: Your card expired.",
        '"X" — the customer heard this',
        "Utterance: Hello. Comment: Bye.",
        "SELECT * WHERE text IN ('Hi')",
        # Fifth review: a question or a report anywhere before the write's verb; a remark's
        # opener stripped before its subject is judged; plural requesters; "or" between seqs;
        # set symbols; a short request as a text; more ways to be spoken to; labels in a text.
        "What did the user send: remove all",
        "What was the user saying, remove all",
        "What was the user saying remove all",
        "Tell me what the user said, remove all",
        "Delete turn 2 — reason: the expiry claim was wrong",
        "Delete turn 2, since the apology was wrong",
        "Delete turn 2 — typo in the card number",
        "Delete the oldest 3 — as GPT was wrong",
        "Customers asked to remove the last 2",
        "Users asked to delete everything",
        "Delete seq 3 or 4",
        "Delete the user's messages \u2228 turn 2",
        "Delete all please — keep the assistant's",
        "We told the customer: Go to settings.",
        "The customer will be told: Go to settings.",
        'Add utterance: "I can help." — heard by the customer',
        "The user was saying: hi; the agent was saying: hello",
        "User: hi / Assistant: hello",
        "Store this. Message: Hello. Text: Bye.",
        # Sixth review: a remark naming whose one message it was; a demonstrative before a
        # noun, "I think", "there was" before a fault; more set symbols; a ticket's request
        # label; courtesy before a short remove as a text; a comma between two labels.
        "Delete the last message — the customer typed it by mistake",
        "Delete the first message — the assistant's greeting was wrong",
        "Delete turn 2 — this expiry claim was wrong",
        "Delete turn 2 — I think the expiry claim was wrong",
        "Delete turn 2 — there was a typo in the card number",
        "Delete the last 3 — that weather remark was wrong",
        "Delete the user's messages \u2216 turn 2",
        "User request — delete all",
        "Customer request: delete turn 2",
        "Kindly delete all — keep the assistant's",
        "User: hi, Assistant: hello",
        "Store this. Message: Hello, Text: Bye.",
        # An open range of seqs is still refused: the newest seq is not known here.
        "Delete messages 5 to the end",
    ],
)
def test_still_refused(query: str) -> None:
    with pytest.raises(InvalidRequest):
        parse(query)
