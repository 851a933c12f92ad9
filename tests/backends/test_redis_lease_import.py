"""`chd import` into a Redis whose lone `chd serve` holds the read lease: the daemon's next read has it."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import grpc

from chd.backends.redis_backend import RedisBackend
from chd.backends.redis_read_lease import LEASE_KEY
from chd.v1 import daemon_pb2_grpc
from tests.backends.backend_kinds import append_next
from tests.conftest import DaemonProcess, query, run_chd
from tests.redis_support import running_redis, wait_for


def _texts(stub: daemon_pb2_grpc.DaemonStub, conversation_id: str) -> list[str]:
    reply = query(stub, "Get all utterances", {"conversation_id": conversation_id})
    return [u["text"] for u in reply.result["utterances"]]


def test_an_import_into_a_conversation_the_holder_has_read_is_in_its_next_retrieve(
    tmp_path: Path,
) -> None:
    """The daemon read the conversation empty from its cache's tenure; after `chd import`, it reads the import."""
    for server in running_redis(
        tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always"
    ):
        source_url = server.url.rsplit("/", 1)[0] + "/3"
        source = RedisBackend(source_url)
        try:
            source.transact("moved", append_next("the ferry leaves at six"))
            source.transact("moved", append_next("the bridge opens at seven"))
        finally:
            source.close()
        exported = run_chd("export", "--backend", "redis", "--redis-url", source_url)
        assert exported.returncode == 0, exported.stderr
        dump = tmp_path / "dump.jsonl"
        dump.write_text(exported.stdout, encoding="utf-8")
        daemon = DaemonProcess("--backend", "redis", "--redis-url", server.url)
        try:
            with ExitStack() as stack:
                stub = daemon_pb2_grpc.DaemonStub(
                    stack.enter_context(grpc.insecure_channel(daemon.target))
                )
                with server.client() as client:
                    wait_for(
                        lambda: (client.get(LEASE_KEY) or b"").startswith(b"sole:"),
                        "the daemon's lease",
                        10,
                    )
                    assert _texts(stub, "moved") == []
                    client.config_resetstat()
                    assert _texts(stub, "moved") == []
                    assert "cmdstat_hmget" not in client.info(
                        "commandstats"
                    )  # answered from the lease
                imported = run_chd(
                    "import", str(dump), "--backend", "redis", "--redis-url", server.url
                )
                assert imported.returncode == 0, imported.stderr
                assert _texts(stub, "moved") == [
                    "the ferry leaves at six",
                    "the bridge opens at seven",
                ]
        finally:
            daemon.kill()
