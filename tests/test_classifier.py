"""The optional Claude classifier, through the real anthropic SDK against a fake Messages API."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import grpc
import pytest

from chd.core.errors import InvalidRequest
from chd.core.history import ConversationHistory
from chd.core.language.classifier import ClaudeClassifier, tool_definitions
from chd.core.settings import Settings
from chd.v1 import daemon_pb2_grpc
from tests.conftest import DaemonProcess, query
from tests.demo_conversation import seed_demo
from tests.fake_anthropic import FakeAnthropic, Reply, Stall, Status, ToolUse, refused_url

ODD_QUERY = "Fetch whatever the bot blurted regarding precipitation"  # "blurted" is no rule's word
# A call the test did not script fails (the SDK retries it at once) instead of classifying anything.
UNSCRIPTED = Status(500, "the test queued no reply", retry_after_ms=10)


def _tool_call(name: str, tool_input: dict[str, object]) -> ToolUse:
    """Claude calling a tool after a text block, so the classifier must look past content[0]."""
    return ToolUse(name, tool_input, preamble="I'll route this request.")


def _key_sent(headers: dict[str, str]) -> str | None:
    """The API key as the SDK sent it (x-api-key, or a bearer token in newer SDKs)."""
    if "x-api-key" in headers:
        return headers["x-api-key"]
    auth = headers.get("authorization", "")
    return auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(reply=lambda body: UNSCRIPTED) as server:
        yield server


def _classifier(api: FakeAnthropic, **options: float) -> ClaudeClassifier:
    client = anthropic.Anthropic(
        api_key="sk-ant-test",
        base_url=api.base_url,
        timeout=options.get("timeout", 5.0),
        max_retries=int(options.get("max_retries", 1)),
    )
    return ClaudeClassifier(client=client)


@pytest.fixture
def history(api: FakeAnthropic) -> ConversationHistory:
    history = ConversationHistory(settings=Settings(), classifier=_classifier(api))
    seed_demo(history)
    return history


class TestClassifierUse:
    """Claude is asked only about queries the rules refused, and its answer is checked."""

    def test_rules_answer_common_phrasings_without_calling_claude(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """A query the rules understand never reaches the API."""
        history.query("Find utterances about Paris")
        history.query("Remove oldest utterance")
        assert api.requests == []

    def test_low_confidence_query_is_classified_into_a_retrieve(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """The tool call becomes the intent; metadata says who interpreted it."""
        api.script(
            _tool_call("retrieve", {"topic": "rain", "speaker": "assistant", "confidence": 0.9})
        )
        outcome = history.query(ODD_QUERY)
        assert [u["seq"] for u in outcome.result["utterances"]] == [4]
        assert outcome.metadata["interpreted_by"] == "classifier"
        assert outcome.metadata["confidence"] == 0.9

    def test_request_carries_the_query_the_tools_and_forced_tool_choice(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """What is sent is the real Messages API request shape."""
        api.script(_tool_call("stats", {"confidence": 0.95}))
        history.query(ODD_QUERY)
        request, headers = api.requests[0].body, api.requests[0].headers
        assert request["messages"] == [{"role": "user", "content": ODD_QUERY}]
        assert request["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
        names = {tool["name"] for tool in request["tools"]}
        assert names == {
            "store",
            "retrieve",
            "remove",
            "summarize",
            "configure",
            "mark",
            "stats",
            "not_understood",
        }
        assert _key_sent(headers) == "sk-ant-test"
        assert "anthropic-version" in headers

    def test_not_understood_tool_keeps_the_rules_refusal(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """Claude saying it does not know leaves the query refused with the closest forms."""
        api.script(_tool_call("not_understood", {"reason": "unclear"}))
        with pytest.raises(InvalidRequest, match="Closest supported forms"):
            history.query(ODD_QUERY)

    def test_low_self_reported_confidence_is_not_used(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """A classification below the classifier's threshold is treated as a refusal."""
        api.script(_tool_call("retrieve", {"topic": "rain", "confidence": 0.3}))
        with pytest.raises(InvalidRequest):
            history.query(ODD_QUERY)

    def test_text_reply_without_tool_use_keeps_the_refusal(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """A reply with no tool_use block classifies nothing."""
        api.script(Reply("I am not sure what you mean."))
        with pytest.raises(InvalidRequest):
            history.query(ODD_QUERY)

    def test_unknown_parameter_is_refused(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """Parameters outside the tool's schema are not passed on."""
        api.script(_tool_call("retrieve", {"topic": "rain", "colour": "blue", "confidence": 0.9}))
        with pytest.raises(InvalidRequest):
            history.query(ODD_QUERY)


class TestClassifierSafety:
    """A classification is a guess, so it may not delete much or rewrite what is stored."""

    def test_classified_remove_of_one_utterance_is_applied(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """A guessed remove that hits one utterance goes through."""
        api.script(_tool_call("remove", {"seq": 3, "confidence": 0.9}))
        outcome = history.query("Expunge entry three, pretty please with sugar")
        assert outcome.result["removed"] == [3]

    def test_classified_remove_of_several_utterances_is_refused(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """A guessed remove matching more than one utterance removes nothing."""
        api.script(_tool_call("remove", {"speaker": "assistant", "confidence": 0.99}))
        with pytest.raises(InvalidRequest, match="at most 1"):
            history.query("Expunge the bot's chatter")
        assert len(history.backend.read("default").utterances) == 8

    def test_classified_clear_is_refused(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """Clearing the conversation needs the explicit phrase, never a guess."""
        api.script(_tool_call("remove", {"all": True, "confidence": 0.99}))
        with pytest.raises(InvalidRequest, match="Clear the conversation"):
            history.query("Make it all go poof")
        assert len(history.backend.read("default").utterances) == 8

    def test_classified_store_must_keep_the_callers_words(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """A store whose text is a paraphrase is refused; a verbatim one is stored."""
        api.script(_tool_call("store", {"text": "The user likes tea.", "confidence": 0.9}))
        with pytest.raises(InvalidRequest):
            history.query("Don't lose this \u2014 I like tea")
        api.script(_tool_call("store", {"text": "I like tea", "confidence": 0.9}))
        outcome = history.query("Don't lose this \u2014 I like tea")
        assert outcome.result["utterance"]["text"] == "I like tea"

    def test_unclear_store_instructions_are_refused_without_asking_claude(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """'Jot this down somewhere: ...' has a word the store rules cannot place; no guess may store it."""
        api.script(_tool_call("store", {"text": "I like tea", "confidence": 0.9}))
        with pytest.raises(InvalidRequest, match="'somewhere'"):
            history.query("Jot this down somewhere: I like tea")
        assert api.requests == []
        assert len(history.backend.read("default").utterances) == 8

    def test_ambiguous_queries_are_refused_without_asking_claude(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """'Remove 3 messages' is understood as ambiguous; no classification may override that."""
        with pytest.raises(InvalidRequest, match="oldest 3"):
            history.query("Remove 3 messages")
        assert api.requests == []


class TestClassifierFailures:
    """An unreachable or failing API leaves the rules' refusal; it never becomes another error."""

    def test_overloaded_then_success_is_retried_by_the_sdk(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        """HTTP 529 then a reply: the SDK retries and the query is answered."""
        api.script(Status(529, "Overloaded", retry_after_ms=10))
        api.script(_tool_call("stats", {"confidence": 0.9}))
        assert history.query(ODD_QUERY).operation == "stats"
        assert len(api.requests) == 2

    def test_server_error_keeps_the_refusal(self, api: FakeAnthropic) -> None:
        """HTTP 500 with no retries left: INVALID_ARGUMENT with the closest forms."""
        history = ConversationHistory(classifier=_classifier(api, max_retries=0))
        api.script(Status(500, "Internal server error"))
        with pytest.raises(InvalidRequest, match="Closest supported forms"):
            history.query(ODD_QUERY)

    def test_timeout_keeps_the_refusal(self, api: FakeAnthropic) -> None:
        """A reply slower than the client's timeout is a refusal, not a hang."""
        history = ConversationHistory(classifier=_classifier(api, timeout=0.3, max_retries=0))
        api.script(Stall(1.5, then=_tool_call("stats", {"confidence": 0.9})))
        with pytest.raises(InvalidRequest):
            history.query(ODD_QUERY)

    def test_refused_connection_keeps_the_refusal(self) -> None:
        """No server at all: the query is still answered with the rules' refusal."""
        client = anthropic.Anthropic(api_key="k", base_url=refused_url(), max_retries=0, timeout=2)
        history = ConversationHistory(classifier=ClaudeClassifier(client=client))
        with pytest.raises(InvalidRequest, match="Closest supported forms"):
            history.query(ODD_QUERY)


class TestClassifierTools:
    """The tool schemas are derived from the intents, so they cannot drift from the checks."""

    def test_every_tool_schema_lists_only_real_parameters(self) -> None:
        """Each operation's tool has its parameters plus confidence, never at_most."""
        from chd.core.language.intents import field_sources

        for tool in tool_definitions():
            if tool["name"] == "not_understood":
                continue
            properties = set(tool["input_schema"]["properties"])
            assert properties - {"confidence"} == set(field_sources(tool["name"])) - {"at_most"}


class TestClassifierThroughTheDaemon:
    """`chd serve --query-classifier` with ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL set."""

    def _ask(self, daemon: DaemonProcess) -> grpc.RpcError | object:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = daemon_pb2_grpc.DaemonStub(channel)
            try:
                return query(stub, ODD_QUERY)
            except grpc.RpcError as error:
                return error

    def test_daemon_process_classifies_through_the_sdk(
        self, api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The real daemon reads the key and base URL from its environment."""
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-proc")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
        daemon = DaemonProcess("--query-classifier")
        try:
            api.script(_tool_call("stats", {"confidence": 0.9}))
            response = self._ask(daemon)
            assert response.operation == "stats"  # type: ignore[union-attr]
            assert response.metadata["interpreted_by"] == "classifier"  # type: ignore[union-attr]
            assert _key_sent(api.requests[0].headers) == "sk-ant-proc"
        finally:
            daemon.terminate()

    def test_key_without_the_flag_does_not_enable_it(
        self, api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The classifier is opt-in: a key in the environment alone changes nothing."""
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-proc")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
        daemon = DaemonProcess()
        try:
            error = self._ask(daemon)
            assert isinstance(error, grpc.RpcError)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert api.requests == []
        finally:
            daemon.terminate()


class TestCheckableClassifiedRemoves:
    """Issue 25: a classified remove naming exact seqs or a turn range the query holds deletes what it names."""

    def test_named_seqs_are_all_removed(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        api.script(_tool_call("remove", {"seqs": [3, 4], "confidence": 0.95}))
        outcome = history.query("Expunge entries 3 and 4, pretty please with sugar")
        assert outcome.result["removed"] == [3, 4]

    def test_a_turn_range_written_in_words_is_removed(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        api.script(_tool_call("remove", {"turn_from": 1, "turn_to": 2, "confidence": 0.95}))
        outcome = history.query("Expunge exchanges one through two, pretty please with sugar")
        assert outcome.result["removed"] == [1, 2, 3, 4]

    def test_seqs_the_query_does_not_hold_keep_the_one_utterance_limit(
        self, history: ConversationHistory, api: FakeAnthropic
    ) -> None:
        api.script(_tool_call("remove", {"seqs": [3, 4], "confidence": 0.95}))
        with pytest.raises(InvalidRequest, match="at most 1"):
            history.query("Expunge entry 3 and the next, pretty please with sugar")
        assert len(history.backend.read("default").utterances) == 8
