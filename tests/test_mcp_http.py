"""``chd mcp --http`` (Streamable HTTP) with the SDK's client, with and without the bearer token;
and errors that are not chd's refusals, in-process."""

from __future__ import annotations

import ssl
from collections.abc import Iterator, Mapping
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from chd.client import Answer
from chd.mcp import build_server
from chd.mcp.answerer import Refused
from tests.mcp_support import HttpMcp, answer, refusal, run
from tests.test_ops_tls import Pki, pki  # noqa: F401  (the fixture: a CA, server and client certificates)


@pytest.fixture
def open_mcp() -> Iterator[HttpMcp]:
    server = HttpMcp()
    yield server
    assert server.stop() == 0, server.log


@pytest.fixture
def guarded_mcp() -> Iterator[HttpMcp]:
    server = HttpMcp("--auth-token", "s3cret")
    yield server
    assert server.stop() == 0, server.log


async def _remember_and_recall(url: str, headers: Mapping[str, str] | None = None) -> list[str]:
    async with httpx2.AsyncClient(headers=dict(headers or {})) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            answer(
                await client.call_tool("remember", {"text": "over HTTP", "conversation_id": "web"})
            )
            vague = refusal(await client.call_tool("forget", {"conversation_id": "web"}))
            assert vague.startswith("INVALID_ARGUMENT: remove needs to know what to delete")
            recent = await client.read_resource("chd://conversations/web/recent")
            assert recent.contents[0].text == '#1 [turn 1] user: "over HTTP"'  # type: ignore[union-attr]
            found = answer(await client.call_tool("recall", {"conversation_id": "web"}))
            return [u["text"] for u in found["result"]["utterances"]]


class TestHttp:
    def test_tools_and_resources_work_over_streamable_http(self, open_mcp: HttpMcp) -> None:
        """Without auth_token on loopback, the SDK's client needs no header."""
        assert open_mcp.url.startswith("http://127.0.0.1:") and open_mcp.url.endswith("/mcp")
        assert run(_remember_and_recall(open_mcp.url)) == ["over HTTP"]

    def test_the_right_bearer_token_is_let_in(self, guarded_mcp: HttpMcp) -> None:
        assert run(_remember_and_recall(guarded_mcp.url, {"Authorization": "Bearer s3cret"})) == [
            "over HTTP"
        ]

    @pytest.mark.parametrize(
        "header, problem",
        [
            (None, "requires an Authorization: Bearer <token> header"),
            ("Bearer wrong", "the bearer token is not valid"),
            ("Basic czNjcmV0", "must use the Bearer scheme"),
        ],
    )
    def test_a_missing_or_wrong_token_is_refused_with_401(
        self, guarded_mcp: HttpMcp, header: str | None, problem: str
    ) -> None:
        """Refused before the MCP session manager sees the request, as gRPC refuses UNAUTHENTICATED."""
        headers = {"Authorization": header} if header else {}
        response = httpx2.post(
            guarded_mcp.url,
            headers=headers,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
        )
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert problem in response.json()["error_description"]

    def test_the_sdk_client_without_the_token_cannot_connect(self, guarded_mcp: HttpMcp) -> None:
        with pytest.raises(Exception):  # noqa: B017 (the SDK raises its transport's own error types)
            run(_remember_and_recall(guarded_mcp.url))

    def test_a_non_loopback_address_needs_a_token_or_insecure(self) -> None:
        from tests.conftest import run_chd

        done = run_chd("mcp", "--http", "0.0.0.0:0")
        assert done.returncode == 2
        assert (
            "reachable from other machines; set auth_token (or tls_client_ca) or pass --insecure"
            in done.stderr
        )


class TestHttps:
    def test_tls_cert_and_key_serve_https_and_a_client_ca_asks_for_certificates(
        self, pki: Pki
    ) -> None:
        """The gRPC daemon's TLS keys mean the same for --http: HTTPS, and with tls_client_ca mutual TLS."""
        server = HttpMcp(
            "--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--tls-client-ca", pki.ca
        )
        try:
            assert server.url.startswith("https://127.0.0.1:")

            trusted = ssl.create_default_context(cafile=pki.ca)
            trusted.load_cert_chain(pki.client_cert, pki.client_key)

            async def body() -> list[str]:
                async with httpx2.AsyncClient(verify=trusted) as http:
                    async with Client(
                        streamable_http_client(server.url, http_client=http)
                    ) as client:
                        found = answer(await client.call_tool("remember", {"text": "over HTTPS"}))
                        return [found["result"]["utterance"]["text"]]

            assert run(body()) == ["over HTTPS"]
            with pytest.raises(httpx2.HTTPError):
                httpx2.post(
                    server.url, json={}, verify=ssl.create_default_context(cafile=pki.ca)
                )  # no client certificate
        finally:
            assert server.stop() == 0, server.log


class _Broken:
    """An answerer whose storage fails in a way nobody translated (a bug)."""

    def query(self, text: str, metadata: Mapping[str, Any], data: Mapping[str, Any]) -> Answer:
        raise RuntimeError("secret internals /var/lib/chd")

    def instructions(self) -> str:
        raise Refused("UNAVAILABLE", "the storage backend failed")

    def close(self) -> None:
        pass


class TestErrors:
    def test_an_unexpected_error_is_one_line_never_a_traceback(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The model reads INTERNAL and that the server logged it; the log has the trace, the result has none."""

        async def body() -> tuple[str, str]:
            async with Client(build_server(_Broken())) as client:
                result = await client.call_tool("remember", {"text": "x"})
                with pytest.raises(Exception) as resource:
                    await client.read_resource("chd://instructions")
                return refusal(result), str(resource.value)

        tool_text, resource_text = run(body())
        assert tool_text == "INTERNAL: chd failed to answer remember; the server logged why"
        assert "secret" not in tool_text and "Traceback" not in tool_text
        assert "UNAVAILABLE: the storage backend failed" in resource_text
        assert any(record.exc_info for record in caplog.records if record.name == "chd.mcp.tools")
