"""``chd mcp`` over stdio, driven by the MCP SDK's own client against a real subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from chd.client import Client as ChdClient
from tests.conftest import DaemonProcess
from tests.mcp_support import answer, refusal, run, with_stdio
from tests.redis_support import shared_redis_url
from tests.test_ops_tls import Pki, pki  # noqa: F401  (the fixture: a CA, server and client certificates)

TOOLS = {"remember", "recall", "forget", "summarize", "context", "query"}


def _errors(errlog: Path) -> str:
    return errlog.read_text() if errlog.exists() else ""


class TestTools:
    def test_every_tool_is_listed_with_a_description_and_a_conversation_id(
        self, tmp_path: Path
    ) -> None:
        """Each tool tells an agent what it does and takes conversation_id; resources are templates."""

        async def body(client: Client) -> None:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == TOOLS
            for tool in tools.values():
                assert tool.description and len(tool.description) > 40, tool.name
                assert "conversation_id" in tool.input_schema["properties"], tool.name
                assert tool.output_schema is not None, tool.name
            assert tools["remember"].input_schema["required"] == ["text"]
            assert tools["query"].input_schema["required"] == ["query"]
            assert tools["forget"].annotations.destructive_hint is True
            assert tools["recall"].annotations.read_only_hint is True
            templates = {
                t.uri_template for t in (await client.list_resource_templates()).resource_templates
            }
            assert templates == {
                "chd://conversations/{conversation_id}/summary",
                "chd://conversations/{conversation_id}/recent",
            }
            assert client.instructions and "remember" in client.instructions

        run(with_stdio((), tmp_path / "stderr", body))

    def test_remember_recall_summarize_context_and_forget_a_conversation(
        self, tmp_path: Path
    ) -> None:
        """The five memory tools end to end: seqs and turns come back as ints, forget reaches the summary too."""

        async def body(client: Client) -> None:
            stored = answer(
                await client.call_tool(
                    "remember",
                    {"text": "What is the weather in Paris today?", "conversation_id": "trip"},
                )
            )
            assert stored["operation"] == "store"
            assert stored["result"]["utterance"]["seq"] == 1 and isinstance(
                stored["result"]["utterance"]["seq"], int
            )
            assert stored["result"]["utterance"]["turn_number"] == 1
            answer(
                await client.call_tool(
                    "remember",
                    {
                        "text": "Sunny, 24 degrees.",
                        "speaker": "assistant",
                        "conversation_id": "trip",
                    },
                )
            )
            answer(
                await client.call_tool(
                    "remember", {"text": "Book the 9:15 train to Lyon.", "conversation_id": "trip"}
                )
            )

            newest = answer(await client.call_tool("recall", {"conversation_id": "trip"}))[
                "result"
            ]["utterances"]
            assert [u["seq"] for u in newest] == [1, 2, 3]
            found = answer(
                await client.call_tool("recall", {"conversation_id": "trip", "topic": "weather"})
            )
            assert (
                found["result"]["utterances"][0]["seq"] == 1 and found["result"]["ranked"] is True
            )
            turn = answer(
                await client.call_tool(
                    "recall", {"conversation_id": "trip", "turn_from": 1, "turn_to": 1}
                )
            )
            assert [u["seq"] for u in turn["result"]["utterances"]] == [1, 2]
            said = answer(
                await client.call_tool(
                    "recall", {"conversation_id": "trip", "speaker": "assistant"}
                )
            )
            assert [u["text"] for u in said["result"]["utterances"]] == ["Sunny, 24 degrees."]

            summary = answer(
                await client.call_tool("summarize", {"conversation_id": "trip", "token_limit": 60})
            )
            assert summary["result"]["utterances_covered"] == 3
            assert 0 < summary["result"]["tokens"] <= 60 and "Paris" in summary["result"]["summary"]
            context = answer(
                await client.call_tool("context", {"conversation_id": "trip", "token_limit": 200})
            )
            assert "Book the 9:15 train" in context["result"]["context"]
            assert context["result"]["token_limit"] == 200

            removed = answer(
                await client.call_tool("forget", {"conversation_id": "trip", "seq": 2})
            )
            assert removed["result"]["removed"] == [2]
            left = answer(await client.call_tool("recall", {"conversation_id": "trip"}))["result"][
                "utterances"
            ]
            assert [u["seq"] for u in left] == [1, 3]
            cleared = answer(
                await client.call_tool("forget", {"conversation_id": "trip", "all": True})
            )
            assert cleared["result"]["removed"] == [1, 3]

        run(with_stdio((), tmp_path / "stderr", body))

    def test_forget_follows_the_languages_safety_rules(self, tmp_path: Path) -> None:
        """A forget that does not say what to delete, or says all and more, is refused and deletes nothing."""

        async def body(client: Client) -> None:
            for text in ("one", "two"):
                answer(await client.call_tool("remember", {"text": text, "conversation_id": "c"}))
            nothing = refusal(await client.call_tool("forget", {"conversation_id": "c"}))
            assert nothing.startswith("INVALID_ARGUMENT: remove needs to know what to delete")
            both = refusal(
                await client.call_tool("forget", {"conversation_id": "c", "all": True, "seq": 1})
            )
            assert "takes no other selector" in both
            sides = refusal(
                await client.call_tool("forget", {"conversation_id": "c", "oldest": 1, "newest": 1})
            )
            assert "oldest or newest, not both" in sides
            missing = refusal(await client.call_tool("forget", {"conversation_id": "c", "seq": 9}))
            assert missing.startswith("NOT_FOUND: ")
            # The language refuses the same vague remove with what to write instead.
            vague = refusal(
                await client.call_tool(
                    "query", {"query": "Remove utterances", "conversation_id": "c"}
                )
            )
            assert (
                vague.startswith("INVALID_ARGUMENT: ")
                and "'the oldest 3'" in vague
                and "Nothing was changed" in vague
            )
            kept = answer(await client.call_tool("recall", {"conversation_id": "c"}))["result"][
                "utterances"
            ]
            assert [u["text"] for u in kept] == ["one", "two"]

        run(with_stdio((), tmp_path / "stderr", body))
        errors = _errors(tmp_path / "stderr")
        assert "Traceback" not in errors
        # chd's messages may quote what the caller wrote: not logged at the default level.
        assert "Remove utterances" not in errors

    def test_query_speaks_the_daemon_interface_with_metadata_and_data(self, tmp_path: Path) -> None:
        """The query tool is the Daemon Interface: sentences, metadata, data.operation, one conversation_id."""

        async def body(client: Client) -> None:
            stored = answer(
                await client.call_tool(
                    "query",
                    {
                        "query": "Add utterance: Rain is expected tomorrow.",
                        "conversation_id": "q",
                        "metadata": {"speaker": "assistant"},
                    },
                )
            )
            assert stored["result"]["utterance"]["speaker"] == "assistant"
            last = answer(
                await client.call_tool(
                    "query", {"query": "Get the last 1 utterances", "conversation_id": "q"}
                )
            )
            assert last["operation"] == "retrieve" and last["metadata"]["conversation_id"] == "q"
            assert last["metadata"]["confidence"] > 0.5
            stats = answer(
                await client.call_tool(
                    "query", {"query": "", "conversation_id": "q", "data": {"operation": "stats"}}
                )
            )
            assert stats["result"]["utterance_count"] == 1
            clash = refusal(
                await client.call_tool(
                    "query",
                    {
                        "query": "Get summary",
                        "conversation_id": "q",
                        "metadata": {"conversation_id": "other"},
                    },
                )
            )
            assert "differs from conversation_id" in clash
            unknown = refusal(
                await client.call_tool(
                    "query",
                    {
                        "query": "",
                        "conversation_id": "q",
                        "data": {"operation": "retrieve", "lastn": 2},
                    },
                )
            )
            assert unknown.startswith("INVALID_ARGUMENT: data.lastn is not a parameter of retrieve")

        run(with_stdio((), tmp_path / "stderr", body))

    def test_conversations_are_separate_and_resources_show_them(self, tmp_path: Path) -> None:
        """Each conversation_id has its own seqs; .../recent and .../summary read one conversation."""

        async def body(client: Client) -> None:
            answer(await client.call_tool("remember", {"text": "in a", "conversation_id": "a"}))
            b = answer(await client.call_tool("remember", {"text": "in b", "conversation_id": "b"}))
            assert b["result"]["utterance"]["seq"] == 1
            recent = await client.read_resource("chd://conversations/a/recent")
            assert recent.contents[0].text == '#1 [turn 1] user: "in a"'  # type: ignore[union-attr]
            summary = await client.read_resource("chd://conversations/a/summary")
            assert summary.contents[0].text == ""  # type: ignore[union-attr]  # nothing has left the buffer
            instructions = await client.read_resource("chd://instructions")
            assert "Get the last" in instructions.contents[0].text  # type: ignore[union-attr]

        run(with_stdio((), tmp_path / "stderr", body))

    def test_the_summary_resource_holds_what_left_the_buffer(self, tmp_path: Path) -> None:
        """With a small buffer, evicted utterances are folded and the summary resource shows them."""

        async def body(client: Client) -> None:
            for n in range(6):
                answer(
                    await client.call_tool(
                        "remember", {"text": f"Note {n} about the Louvre.", "conversation_id": "s"}
                    )
                )
            summary = await client.read_resource("chd://conversations/s/summary")
            assert "Louvre" in summary.contents[0].text  # type: ignore[union-attr]

        run(with_stdio(("--buffer-size", "4", "--eviction-batch", "2"), tmp_path / "stderr", body))


class TestBackends:
    @pytest.mark.parametrize("kind", ["disk", "redis"])
    def test_memories_outlive_the_mcp_server_on_durable_storage(
        self, tmp_path: Path, kind: str
    ) -> None:
        """Remembered in one `chd mcp`, recalled by the next one over the same storage."""
        if kind == "disk":
            storage = ("--backend", "disk", "--data-dir", str(tmp_path / "data"))
        else:
            storage = ("--backend", "redis", "--redis-url", shared_redis_url(tmp_path))

        async def remember(client: Client) -> None:
            answer(
                await client.call_tool(
                    "remember", {"text": f"kept on {kind}", "conversation_id": f"d-{kind}"}
                )
            )

        async def recall(client: Client) -> list[str]:
            found = answer(await client.call_tool("recall", {"conversation_id": f"d-{kind}"}))
            return [u["text"] for u in found["result"]["utterances"]]

        run(with_stdio(storage, tmp_path / "stderr", remember))
        assert run(with_stdio(storage, tmp_path / "stderr", recall)) == [f"kept on {kind}"]


class TestTarget:
    def test_target_fronts_a_running_daemon_with_its_token(self, tmp_path: Path) -> None:
        """`chd mcp --target` stores in the daemon it fronts, sending auth_token; refusals keep chd's message."""
        daemon = DaemonProcess("--auth-token", "t0ken")
        try:

            async def body(client: Client) -> None:
                answer(
                    await client.call_tool("remember", {"text": "via gRPC", "conversation_id": "g"})
                )
                vague = refusal(await client.call_tool("forget", {"conversation_id": "g"}))
                assert vague.startswith("INVALID_ARGUMENT: remove needs to know what to delete")
                missing = refusal(
                    await client.call_tool("forget", {"conversation_id": "g", "seq": 5})
                )
                assert missing.startswith("NOT_FOUND: ")

            run(
                with_stdio(
                    ("--target", daemon.target, "--auth-token", "t0ken"), tmp_path / "stderr", body
                )
            )
            with ChdClient(daemon.target, token="t0ken") as direct:
                assert [u.text for u in direct.last(5, conversation="g")] == ["via gRPC"]
        finally:
            daemon.kill()

    def test_a_wrong_token_for_the_target_is_an_unauthenticated_tool_error(
        self, tmp_path: Path
    ) -> None:
        daemon = DaemonProcess("--auth-token", "right")
        try:

            async def body(client: Client) -> str:
                return refusal(await client.call_tool("remember", {"text": "x"}))

            message = run(
                with_stdio(
                    ("--target", daemon.target, "--auth-token", "wrong"), tmp_path / "stderr", body
                )
            )
            assert message == "UNAUTHENTICATED: the bearer token is not valid"
        finally:
            daemon.kill()

    def test_target_over_tls_trusting_the_ca(self, tmp_path: Path, pki: Pki) -> None:
        """--target-tls-ca connects to a TLS daemon; the name checked is --target-tls-server-name."""
        daemon = DaemonProcess("--tls-cert", pki.server_cert, "--tls-key", pki.server_key)
        try:

            async def body(client: Client) -> None:
                answer(
                    await client.call_tool(
                        "remember", {"text": "over TLS", "conversation_id": "tls"}
                    )
                )

            target = (
                "--target",
                f"localhost:{daemon.port}",
                "--target-tls-ca",
                pki.ca,
                "--target-tls-server-name",
                "localhost",
            )
            run(with_stdio(target, tmp_path / "stderr", body))
        finally:
            daemon.kill()


class TestStdioHygiene:
    def test_stdout_carries_only_json_rpc_and_arguments_outside_the_schema_are_tool_errors(
        self,
    ) -> None:
        """A raw session: every stdout line is a JSON-RPC message (logs go to stderr); a bad speaker is an error result."""
        import json
        import subprocess

        from tests.conftest import ROOT, chd_command, chd_env

        messages = [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "remember", "arguments": {"text": "raw", "speaker": "robot"}},
            },
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "remember", "arguments": {"text": "raw"}},
            },
        ]
        proc = subprocess.Popen(
            [*chd_command(), "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=chd_env(),
            cwd=ROOT,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
            proc.stdin.flush()
            # Every line is parsed: a stray print would fail here, as it would break a host.
            replies = {}
            while len(replies) < 3:
                reply = json.loads(proc.stdout.readline())
                replies[reply["id"]] = reply
            rest, stderr = proc.communicate(timeout=30)  # closes stdin: the host is done
            assert proc.returncode == 0 and rest == ""
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        assert set(replies) == {1, 2, 3}
        refused = replies[2]["result"]
        assert refused["isError"] is True and "speaker" in refused["content"][0]["text"]
        assert "Traceback" not in refused["content"][0]["text"]
        assert replies[3]["result"]["structuredContent"]["result"]["utterance"]["seq"] == 1
        assert "storage: memory backend" in stderr  # the logs went to stderr
