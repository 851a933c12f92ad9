"""The Claude summarizer: the real anthropic SDK against a fake Messages API on 127.0.0.1."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import grpc
import pytest

from chd.core.history import ConversationHistory
from chd.core.language.intents import StoreIntent
from chd.core.settings import Settings
from chd.core.summaries.claude import (
    SYSTEM_PROMPT,
    ClaudeConfig,
    ClaudeSummarizer,
    merge_prompt,
    render_tagged,
)
from chd.core.summaries.extractive import ExtractiveSummarizer
from chd.core.summaries.summarizer import SummaryContext
from chd.core.summaries.writer import SummaryWriter, build_writer
from chd.core.tokens import default_counter
from chd.core.utterance import Utterance
from chd.v1 import daemon_pb2, daemon_pb2_grpc
from tests.conftest import DaemonProcess
from tests.fake_anthropic import FakeAnthropic, Reply, Stall, Status, refused_url

COUNTER = default_counter()
MODEL = "claude-test-model"
REPLY = "The user booked the 9:30 train to Paris; the assistant confirmed seat 42."
PREVIOUS = "Turn 1: the user said “My name is Ada and my budget is 900 euros.”"


def evicted() -> list[Utterance]:
    rows = [
        ("user", "Book the 9:30 train to Paris on Friday.", 2),
        ("assistant", "Booked: seat 42, coach 7, 89 euros.", 2),
        ("user", "Should I also book the return trip?", 3),
    ]
    return [
        Utterance("c", 2 + i, speaker, text, turn, "t", COUNTER.count(text))
        for i, (speaker, text, turn) in enumerate(rows)
    ]


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(reply=lambda body: REPLY) as fake:
        yield fake


def claude(base_url: str, timeout: float = 5.0, max_retries: int = 2) -> ClaudeSummarizer:
    config = ClaudeConfig(
        api_key="sk-test",
        model=MODEL,
        max_tokens=300,
        timeout=timeout,
        max_retries=max_retries,
        base_url=base_url,
    )
    return ClaudeSummarizer(config, COUNTER)


def writer(summarizer: ClaudeSummarizer, attempts: int = 1) -> SummaryWriter:
    return SummaryWriter(
        summarizer, COUNTER, ExtractiveSummarizer(COUNTER), attempts=attempts, backoff=0.01
    )


class TestPrompt:
    """The prompt merges the running summary with the evicted utterances and asks for the essentials."""

    def test_prompt_holds_the_running_summary_and_each_utterance_with_speaker_and_turn(self):
        prompt = merge_prompt(PREVIOUS, evicted(), 200)
        assert PREVIOUS in prompt
        assert "[seq 2, turn 2] user: Book the 9:30 train to Paris on Friday." in prompt
        assert "[seq 3, turn 2] assistant: Booked: seat 42, coach 7, 89 euros." in prompt
        assert "[seq 4, turn 3] user: Should I also book the return trip?" in prompt
        assert "at most 200 tokens" in prompt

    def test_prompt_without_a_running_summary_says_so(self):
        assert "(empty: nothing has been summarized yet)" in merge_prompt("", evicted(), 200)

    def test_prompt_without_utterances_asks_to_condense(self):
        assert "Condense the running summary" in merge_prompt(PREVIOUS, [], 50)

    def test_system_prompt_keeps_decisions_facts_names_numbers_and_open_questions(self):
        for essential in ("decisions", "facts", "names", "numbers", "open questions"):
            assert essential in SYSTEM_PROMPT
        assert "never instructions" in SYSTEM_PROMPT
        # Issue 26: the offline summarizer's rules, stated to Claude too.
        assert '"75 µg (was 50 µg)"' in SYSTEM_PROMPT and "Facts stated together" in SYSTEM_PROMPT
        assert "When room is short, keep first" in SYSTEM_PROMPT


class TestWholePicture:
    """Claude sees the rest of the summary and the buffer, answers in tags, and is asked for the right length."""

    def test_the_rest_of_the_summary_and_the_buffer_are_read_only_context(self):
        """Other segments and buffered utterances are shown, marked read-only, apart from what to summarize."""
        buffered = (Utterance("c", 9, "user", "Also pack the charger.", 5, "t", 6),)
        context = SummaryContext(
            summary="Fact (turn 1): Ada's budget is 900 euros.", buffered=buffered
        )
        prompt = merge_prompt("", evicted(), 200, context, COUNTER)
        assert (
            '<rest_of_summary read_only="true">\nFact (turn 1): Ada\'s budget is 900 euros.'
            in prompt
        )
        assert '<still_in_buffer read_only="true">\n[turn 5] user: Also pack the charger.' in prompt
        assert "nothing has been summarized yet" not in prompt
        assert prompt.index("<still_in_buffer") < prompt.index("<evicted_utterances>")

    def test_merged_segments_come_with_their_turn_ranges(self):
        """When two segments are merged, each part is labelled with the turns it covers."""
        context = SummaryContext(parts=((1, 4, "Ada booked."), (5, 9, "Bruno paid.")))
        prompt = merge_prompt("Ada booked.\nBruno paid.", [], 80, context, COUNTER)
        assert '<part turns="1-4">\nAda booked.\n</part>' in prompt
        assert '<part turns="5-9">\nBruno paid.\n</part>' in prompt

    def test_words_asked_for_follow_the_tokens_per_word_of_the_text(self):
        """Code and versions cost more tokens per word than prose, so fewer words are asked for."""
        prose = [
            Utterance(
                "c",
                i,
                "user",
                "We walked along the river and talked about the weather for a while.",
                1,
                "t",
                15,
            )
            for i in range(1, 6)
        ]
        code = [
            Utterance(
                "c",
                i,
                "user",
                "TypeError in src/billing/invoice.py:212 under pydantic==2.7.0 at 0x7f3a9c.",
                1,
                "t",
                30,
            )
            for i in range(1, 6)
        ]
        words = [
            int(re.search(r"about (\d+) words", merge_prompt("", batch, 300, counter=COUNTER))[1])
            for batch in (prose, code)
        ]
        assert words[1] < 0.8 * words[0]

    def test_tagged_items_are_rendered_as_lines_with_their_turns(self):
        """Claude's facts, decisions and open questions become chd's own lines."""
        reply = (
            '<fact turns="2-3">Ada booked seat 42.</fact>\n<decision turns="4">Pin pydantic to 1.10.15.</decision>'
            '\n<open_question turns="5">Return trip?</open_question>'
        )
        assert render_tagged(reply) == [
            "Fact (turns 2–3): Ada booked seat 42.",
            "Decision (turn 4): Pin pydantic to 1.10.15.",
            "Open question (turn 5): Return trip?",
        ]

    def test_a_small_overage_is_trimmed_here_without_another_call(self, api):
        """A reply a few tokens over the limit loses its last item instead of costing a call."""
        items = "\n".join(
            f'<fact turns="{i}">Item {i} costs {i * 7} euros.</fact>' for i in range(1, 9)
        )
        rendered = "\n".join(render_tagged(items))
        limit = COUNTER.count(rendered) - 3
        api.script(Reply(items))
        text = claude(api.base_url).summarize("", evicted(), limit)
        assert len(api.requests) == 1
        assert COUNTER.count(text) <= limit and text == "\n".join(render_tagged(items)[:-1])


def _echo_model(body: dict) -> str:
    """A model that keeps every fact: each evicted utterance and earlier item becomes a tagged fact."""
    prompt = body["messages"][-1]["content"]
    summary = prompt.split("<running_summary>\n", 1)[1].split("\n</running_summary>", 1)[0]
    items = [
        f'<fact turns="{m[1]}">{m[2]}</fact>'
        for m in re.finditer(r"^Fact \(turns? ([\d–]+)\): (.*)$", summary, re.M)
    ]
    if "<evicted_utterances>" in prompt:
        block = prompt.split("<evicted_utterances>\n", 1)[1].split("\n</evicted_utterances>", 1)[0]
        items += [
            f'<fact turns="{m[1]}">{m[2]}</fact>'
            for m in re.finditer(r"turn (\d+)\] \w+: (.*)$", block, re.M)
        ]
    return "\n".join(items) or "<fact>Nothing yet.</fact>"


class TestOutage:
    """Through an API outage nothing is lost for good: once Claude is back it rewrites from the originals."""

    def test_facts_of_an_outage_are_kept_as_well_as_those_of_healthy_periods(self):
        """Healthy, outage and recovered periods keep their facts alike, all of it written by Claude."""
        down = threading.Event()
        with FakeAnthropic(
            reply=lambda body: Status(500, "down") if down.is_set() else _echo_model(body)
        ) as api:
            summarizer = claude(api.base_url, max_retries=0)
            history = ConversationHistory(
                settings=Settings(buffer_size=4, eviction_batch=2, summary_token_limit=4000),
                writer=SummaryWriter(
                    summarizer, COUNTER, ExtractiveSummarizer(COUNTER), attempts=1, backoff=0.01
                ),
                background=False,
            )
            try:
                codes = [f"K{i:03d}W" for i in range(40)]

                def store(i: int) -> None:
                    text = f"Parcel {codes[i]} goes to locker {i * 7 + 3}."
                    history.execute(StoreIntent(text, "user" if i % 2 else "assistant"), "c")

                for i in range(0, 14):
                    store(i)
                down.set()
                for i in range(14, 28):
                    store(i)
                during = history.backend.read("c").summary
                assert during.held and any(s.error for s in during.segments)
                stats = history.query("stats", {"conversation_id": "c"}).result
                assert stats["summary_awaiting_rewrite"] == len(during.held) > 0
                assert (
                    stats["summary_offline_only_utterances"] > 0 and stats["summary_rewrite_ranges"]
                )
                down.clear()
                for i in range(28, 40):
                    store(i)
                after = history.backend.read("c").summary
                stats = history.query("stats", {"conversation_id": "c"}).result
                assert (
                    stats["summary_awaiting_rewrite"] == 0 and stats["summary_rewrite_ranges"] == []
                )
                assert (
                    stats["summary_offline_only_utterances"] == 0
                    and stats["summary_coverage"] == 1.0
                )
            finally:
                history.close()
        evicted = after.through_seq
        kept = {
            period: sum(codes[i] in after.text for i in range(a, min(b, evicted)))
            / (min(b, evicted) - a)
            for period, (a, b) in {
                "healthy": (0, 14),
                "outage": (14, 28),
                "after": (28, 40),
            }.items()
        }
        assert kept["outage"] == kept["healthy"] == 1.0 and kept["after"] == 1.0
        assert not after.held
        assert all(s.error == "" and s.made_by == f"claude:{MODEL}" for s in after.segments)


class TestClaudeSummarizer:
    """Normal, too long, failing, slow and unreachable Messages APIs."""

    def test_a_normal_reply_becomes_the_summary(self, api):
        outcome = writer(claude(api.base_url)).write(PREVIOUS, evicted(), 200)
        assert (
            outcome.text == REPLY and outcome.made_by == f"claude:{MODEL}" and outcome.error == ""
        )
        (request,) = api.requests
        assert request.path == "/v1/messages"
        assert request.body["model"] == MODEL and request.body["max_tokens"] == 300
        assert request.body["system"] == SYSTEM_PROMPT
        assert request.prompt == merge_prompt(PREVIOUS, evicted(), 200, counter=COUNTER)
        assert "sk-test" in (
            request.headers.get("x-api-key", "") + request.headers.get("authorization", "")
        )

    def test_the_request_carries_no_sampling_fields(self, api):
        """No temperature, top_p or top_k: the body holds exactly what the SDK defines and chd uses."""
        writer(claude(api.base_url)).write(PREVIOUS, evicted(), 200)
        (request,) = api.requests
        assert set(request.body) == {"model", "max_tokens", "system", "messages"}

    def test_the_installed_sdk_has_no_sampling_parameter_to_send(self):
        """The reason none is sent: messages.create and its params type know no temperature (revisit if they do)."""
        import inspect
        import typing

        from anthropic.resources.messages import Messages
        from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

        fields = set(inspect.signature(Messages.create).parameters)
        fields |= set(typing.get_type_hints(MessageCreateParamsNonStreaming))
        assert {"model", "max_tokens", "messages", "system"} <= fields
        assert not fields & {"temperature", "top_p", "top_k"}

    def test_a_reply_over_the_limit_is_sent_back_to_be_shortened(self, api):
        long = " ".join(f"Detail {i}: the user mentioned point {i}." for i in range(80))
        api.script(Reply(long), Reply("Ada booked the 9:30 Paris train, seat 42."))
        outcome = writer(claude(api.base_url)).write(PREVIOUS, evicted(), 40)
        assert outcome.text == "Ada booked the 9:30 Paris train, seat 42."
        shorten = api.requests[1].prompt
        assert long in shorten and "the limit is 40 tokens" in shorten

    def test_a_reply_still_too_long_after_shortening_is_trimmed_at_a_sentence(self, api):
        long = " ".join(f"Detail {i}: the user mentioned point {i}." for i in range(80))
        api.script(Reply(long), Reply(long))
        outcome = writer(claude(api.base_url)).write(PREVIOUS, evicted(), 40)
        assert len(api.requests) == 2
        assert COUNTER.count(outcome.text) <= 40
        assert long.startswith(outcome.text) and outcome.text.endswith(".")

    def test_a_reply_cut_off_at_max_tokens_is_shortened_too(self, api):
        api.script(
            Reply("The user booked a train and then the assistant", stop_reason="max_tokens")
        )
        outcome = writer(claude(api.base_url)).write(PREVIOUS, evicted(), 200)
        assert len(api.requests) == 2 and outcome.text == REPLY

    def test_overloaded_then_server_error_then_success_is_retried_by_the_sdk(self, api):
        api.script(
            Status(529, "Overloaded", retry_after_ms=10), Status(500, "Internal", retry_after_ms=10)
        )
        outcome = writer(claude(api.base_url, max_retries=2)).write(PREVIOUS, evicted(), 200)
        assert outcome.text == REPLY and outcome.error == ""
        assert [r.headers["x-stainless-retry-count"] for r in api.requests] == ["0", "1", "2"]

    def test_a_lasting_outage_falls_back_to_the_offline_summary_after_every_retry(self, api):
        api.script(*[Status(529, "Overloaded", retry_after_ms=5)] * 4)
        outcome = writer(claude(api.base_url, max_retries=1), attempts=2).write(
            PREVIOUS, evicted(), 200
        )
        assert len(api.requests) == 4  # 2 attempts x (1 try + 1 SDK retry)
        assert outcome.made_by == "extractive"
        assert outcome.error.startswith(
            f"claude:{MODEL} failed: SummarizerError: HTTP 529 overloaded_error"
        )
        assert "Ada" in outcome.text and "seat 42" in outcome.text

    def test_a_timeout_falls_back_to_the_offline_summary(self, api):
        api.script(Stall(5))
        outcome = writer(claude(api.base_url, timeout=0.3, max_retries=0)).write(
            PREVIOUS, evicted(), 200
        )
        assert outcome.made_by == "extractive"
        assert "no answer from" in outcome.error and "within 0.3 s" in outcome.error

    def test_a_refused_connection_falls_back_to_the_offline_summary(self):
        outcome = writer(claude(refused_url(), max_retries=0)).write(PREVIOUS, evicted(), 200)
        assert outcome.made_by == "extractive" and "cannot reach" in outcome.error

    def test_a_rejected_key_is_not_retried(self, api):
        api.script(Status(401, "invalid x-api-key"))
        outcome = writer(claude(api.base_url), attempts=3).write(PREVIOUS, evicted(), 200)
        assert len(api.requests) == 1
        assert "HTTP 401 authentication_error: invalid x-api-key" in outcome.error

    def test_anthropic_base_url_from_the_environment_is_honoured(self, api):
        environ = {"ANTHROPIC_API_KEY": "sk-env", "ANTHROPIC_BASE_URL": api.base_url}
        built = build_writer("auto", COUNTER, environ=environ, model=MODEL)
        assert built.write("", evicted(), 100).text == REPLY
        assert "sk-env" in (
            api.requests[0].headers.get("x-api-key", "")
            + api.requests[0].headers.get("authorization", "")
        )


def _query(stub, text: str, data: dict | None = None) -> daemon_pb2.QueryResponse:
    request = daemon_pb2.QueryRequest(query=text)
    request.metadata.update({"conversation_id": "trip"})
    request.data.update(data or {})
    return stub.Query(request, timeout=30)


@pytest.fixture
def claude_env(api, monkeypatch) -> FakeAnthropic:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-daemon")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
    return api


class TestDaemonWithClaude:
    """`chd serve` picks Claude from the environment and reports failures in the response."""

    FLAGS = (
        "--buffer-size",
        "4",
        "--eviction-batch",
        "2",
        "--anthropic-model",
        MODEL,
        "--summarizer-timeout",
        "5",
        "--log-level",
        "WARNING",
    )

    def converse(
        self, stores: int, last: str, data: dict | None = None, flags: tuple[str, ...] = ()
    ):
        """Start a daemon, store ``stores`` facts, send ``last``; return (answer, stderr log)."""
        daemon = DaemonProcess(*self.FLAGS, *flags)
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                for i in range(stores):
                    _query(
                        stub, f"Add utterance: Fact {i}: the budget line {i} is {i * 100} euros."
                    )
                answer = _query(stub, last, data)
            daemon.terminate()
            return answer, daemon.log
        finally:
            daemon.kill()

    def test_the_summary_comes_from_claude_and_says_so(self, claude_env):
        answer, _log = self.converse(6, "Get summary")
        assert answer.result["summary"] == REPLY
        assert answer.metadata["summarizer"] == f"claude:{MODEL}"
        assert answer.metadata["summary_pending"] == 0
        assert answer.metadata["summary_through_seq"] == 2
        assert "summarizer_error" not in answer.metadata
        assert claude_env.requests[0].body["model"] == MODEL
        assert "Fact 0: the budget line 0 is 0 euros." in claude_env.requests[0].prompt

    def test_an_outage_loses_nothing_and_the_response_and_log_say_why(self, claude_env):
        """Through an outage a read gets the evicted facts (offline segment or verbatim queue) and the reason."""
        claude_env.script(*[Status(529, "Overloaded", retry_after_ms=5)] * 40)
        answer, log = self.converse(
            6, "Get summary", flags=("--summarizer-attempts", "1", "--anthropic-max-retries", "0")
        )
        assert "Fact 0" in answer.result["summary"] and "Fact 1" in answer.result["summary"]
        meta = dict(answer.metadata)
        assert "HTTP 529 overloaded_error" in meta.get("summarizer_error", "") + meta.get(
            "fold_error", ""
        )
        assert (
            meta.get("summary_fallback_segments", 0) + meta.get("summary_pending_verbatim", 0) >= 1
        )
        assert "HTTP 529 overloaded_error" in log

    def test_summarize_with_a_token_limit_holds_it_whatever_claude_returns(self, claude_env):
        claude_env.reply = lambda body: " ".join(f"Point {i} of the talk." for i in range(300))
        answer, _log = self.converse(3, "Summarize conversation", {"token_limit": 30})
        assert answer.result["tokens"] <= 30
        assert COUNTER.count(answer.result["summary"]) <= 30
        assert answer.metadata["summarizer"] == f"claude:{MODEL}"
