"""Bearer-token authentication, and refusing to expose an unauthenticated daemon."""

from __future__ import annotations

import grpc
import pytest
from conftest import DaemonProcess, run_chd
from ops_support import ask, channel_to, code_of, health_status, running

from chd.service.auth import BearerAuthInterceptor
from chd.v1 import daemon_pb2, daemon_pb2_grpc

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def guarded():
    with running(auth_token=TOKEN) as server, channel_to(server) as channel:
        yield channel


class TestBearerToken:
    """With a token configured, every RPC but health needs `authorization: Bearer <token>`."""

    def test_the_right_token_is_accepted(self, guarded):
        """A query carrying the token is answered."""
        assert ask(guarded, "Add utterance: hello", token=TOKEN).operation == "store"

    def test_a_missing_token_is_unauthenticated(self, guarded):
        """A query without metadata is refused with UNAUTHENTICATED and a message saying what is needed."""
        with pytest.raises(grpc.RpcError) as refused:
            ask(guarded, "Get the last 5 utterances")
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "Bearer" in refused.value.details()

    @pytest.mark.parametrize(
        "header", [f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", TOKEN, "Bearer "]
    )
    def test_a_wrong_token_or_scheme_is_unauthenticated(self, guarded, header):
        """Near-miss tokens and other schemes are all refused."""
        stub = daemon_pb2_grpc.DaemonStub(guarded)
        code = code_of(
            stub.Query,
            daemon_pb2.QueryRequest(query="Get the last 5 utterances"),
            metadata=(("authorization", header),),
            timeout=5,
        )
        assert code == grpc.StatusCode.UNAUTHENTICATED

    def test_purpose_and_instructions_need_the_token_too(self, guarded):
        """GetPurpose and GetInstructions are refused without the token."""
        stub = daemon_pb2_grpc.DaemonStub(guarded)
        assert (
            code_of(stub.GetPurpose, daemon_pb2.GetPurposeRequest(), timeout=5)
            == grpc.StatusCode.UNAUTHENTICATED
        )
        assert (
            code_of(stub.GetInstructions, daemon_pb2.GetInstructionsRequest(), timeout=5)
            == grpc.StatusCode.UNAUTHENTICATED
        )

    def test_health_is_open_without_the_token(self, guarded):
        """Load balancers probe health without knowing the secret."""
        assert health_status(guarded) == "SERVING"

    def test_a_refused_query_changes_nothing(self, guarded):
        """A store without the token stores nothing."""
        ask(
            guarded,
            "Add utterance: kept",
            metadata={"conversation_id": "auth-nothing"},
            token=TOKEN,
        )
        with pytest.raises(grpc.RpcError):
            ask(
                guarded,
                "Add utterance: intruder",
                metadata={"conversation_id": "auth-nothing"},
                token="wrong",
            )
        got = ask(
            guarded,
            "Get the last 10 utterances",
            metadata={"conversation_id": "auth-nothing"},
            token=TOKEN,
        )
        assert [u["text"] for u in got.result["utterances"]] == ["kept"]

    def test_an_empty_token_is_rejected_when_building_the_interceptor(self):
        """An empty token would accept anyone, so it is refused outright."""
        with pytest.raises(ValueError):
            BearerAuthInterceptor("")


class TestCliWithToken:
    """`chd query` sends the token from --auth-token or CHD_AUTH_TOKEN."""

    def test_chd_query_with_the_token_succeeds_and_without_it_exits_64_plus_16(self):
        """Exit 0 with the token; 80 (64 + UNAUTHENTICATED) without."""
        process = DaemonProcess("--auth-token", TOKEN)
        try:
            ok = run_chd(
                "query", "Add utterance: hi", "--target", process.target, "--auth-token", TOKEN
            )
            assert ok.returncode == 0, ok.stderr
            refused = run_chd("query", "Add utterance: hi", "--target", process.target)
            assert refused.returncode == 64 + grpc.StatusCode.UNAUTHENTICATED.value[0]
            assert "UNAUTHENTICATED" in refused.stderr
        finally:
            process.kill()


class TestExposure:
    """A daemon reachable from other machines must authenticate its callers unless told otherwise."""

    def test_serving_on_all_interfaces_without_a_token_refuses_to_start(self):
        """`chd serve --host 0.0.0.0` exits 2 naming the host key, before binding anything."""
        refused = run_chd("serve", "--host", "0.0.0.0", "--port", "0")
        assert refused.returncode == 2
        assert "'host'" in refused.stderr and "--insecure" in refused.stderr

    @pytest.mark.parametrize("extra", [["--auth-token", "t"], ["--insecure"]])
    def test_a_token_or_insecure_allows_a_public_host(self, extra):
        """The same configuration is valid with a token, or with an explicit --insecure."""
        shown = run_chd("config", "--host", "0.0.0.0", *extra)
        assert shown.returncode == 0, shown.stderr

    @pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
    def test_loopback_hosts_need_no_token(self, host):
        """Loopback addresses are only reachable from this machine."""
        assert run_chd("config", "--host", host).returncode == 0
