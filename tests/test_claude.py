"""The Claude summarizer: the real anthropic SDK against a fake Messages API on 127.0.0.1."""

from __future__ import annotations

from typing import Iterator

import grpc
import pytest

from tests.conftest import DaemonProcess
from chd.core.summaries.claude import SYSTEM_PROMPT, ClaudeConfig, ClaudeSummarizer, merge_prompt
from chd.core.summaries.extractive import ExtractiveSummarizer
from chd.core.summaries.writer import SummaryWriter, build_writer
from chd.core.tokens import default_counter
from chd.core.utterance import Utterance
from chd.v1 import daemon_pb2, daemon_pb2_grpc
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
    config = ClaudeConfig(api_key="sk-test", model=MODEL, max_tokens=300, timeout=timeout,
                          max_retries=max_retries, base_url=base_url)
    return ClaudeSummarizer(config, COUNTER)


def writer(summarizer: ClaudeSummarizer, attempts: int = 1) -> SummaryWriter:
    return SummaryWriter(summarizer, COUNTER, ExtractiveSummarizer(COUNTER), attempts=attempts, backoff=0.01)


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


class TestClaudeSummarizer:
    """Normal, too long, failing, slow and unreachable Messages APIs."""

    def test_a_normal_reply_becomes_the_summary(self, api):
        outcome = writer(claude(api.base_url)).write(PREVIOUS, evicted(), 200)
        assert outcome.text == REPLY and outcome.made_by == f"claude:{MODEL}" and outcome.error == ""
        (request,) = api.requests
        assert request.path == "/v1/messages"
        assert request.body["model"] == MODEL and request.body["max_tokens"] == 300
        assert request.body["system"] == SYSTEM_PROMPT
        assert request.prompt == merge_prompt(PREVIOUS, evicted(), 200)
        assert "sk-test" in (request.headers.get("x-api-key", "") + request.headers.get("authorization", ""))

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
        api.script(Reply("The user booked a train and then the assistant", stop_reason="max_tokens"))
        outcome = writer(claude(api.base_url)).write(PREVIOUS, evicted(), 200)
        assert len(api.requests) == 2 and outcome.text == REPLY

    def test_overloaded_then_server_error_then_success_is_retried_by_the_sdk(self, api):
        api.script(Status(529, "Overloaded", retry_after_ms=10), Status(500, "Internal", retry_after_ms=10))
        outcome = writer(claude(api.base_url, max_retries=2)).write(PREVIOUS, evicted(), 200)
        assert outcome.text == REPLY and outcome.error == ""
        assert [r.headers["x-stainless-retry-count"] for r in api.requests] == ["0", "1", "2"]

    def test_a_lasting_outage_falls_back_to_the_offline_summary_after_every_retry(self, api):
        api.script(*[Status(529, "Overloaded", retry_after_ms=5)] * 4)
        outcome = writer(claude(api.base_url, max_retries=1), attempts=2).write(PREVIOUS, evicted(), 200)
        assert len(api.requests) == 4  # 2 attempts x (1 try + 1 SDK retry)
        assert outcome.made_by == "extractive"
        assert outcome.error.startswith(f"claude:{MODEL} failed: SummarizerError: HTTP 529 overloaded_error")
        assert "Ada" in outcome.text and "seat 42" in outcome.text

    def test_a_timeout_falls_back_to_the_offline_summary(self, api):
        api.script(Stall(5))
        outcome = writer(claude(api.base_url, timeout=0.3, max_retries=0)).write(PREVIOUS, evicted(), 200)
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
        assert "sk-env" in (api.requests[0].headers.get("x-api-key", "") + api.requests[0].headers.get("authorization", ""))


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

    FLAGS = ("--buffer-size", "4", "--eviction-batch", "2", "--anthropic-model", MODEL,
             "--summarizer-timeout", "5", "--log-level", "WARNING")

    def converse(self, stores: int, last: str, data: dict | None = None, flags: tuple[str, ...] = ()):
        """Start a daemon, store ``stores`` facts, send ``last``; return (answer, stderr log)."""
        daemon = DaemonProcess(*self.FLAGS, *flags)
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                for i in range(stores):
                    _query(stub, f"Add utterance: Fact {i}: the budget line {i} is {i * 100} euros.")
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
        assert "HTTP 529 overloaded_error" in meta.get("summarizer_error", "") + meta.get("fold_error", "")
        assert meta.get("summary_fallback_segments", 0) + meta.get("summary_pending_verbatim", 0) >= 1
        assert "HTTP 529 overloaded_error" in log

    def test_summarize_with_a_token_limit_holds_it_whatever_claude_returns(self, claude_env):
        claude_env.reply = lambda body: " ".join(f"Point {i} of the talk." for i in range(300))
        answer, _log = self.converse(3, "Summarize conversation", {"token_limit": 30})
        assert answer.result["tokens"] <= 30
        assert COUNTER.count(answer.result["summary"]) <= 30
        assert answer.metadata["summarizer"] == f"claude:{MODEL}"
