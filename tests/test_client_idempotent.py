"""A store whose reply is lost is retried by chd.client with its idempotency key and applied once (issue 29)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chd.client import Client, NotUnderstood
from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from tests.conftest import DaemonProcess
from tests.redis_support import shared_redis_url


class ReplyDroppingProxy:
    """A TCP proxy on 127.0.0.1 that loses the reply to the first request carrying ``marker``.

    Client bytes always reach the daemon. Once the client has sent
    ``marker`` (the stored text, which the request carries as is), the first
    daemon bytes that carry it back (the store's answer echoes its
    utterance) are not forwarded: the proxy closes both connections instead,
    so the daemon has committed the store and the client never hears of it.
    After that it forwards everything.
    """

    def __init__(self, target: str, marker: bytes) -> None:
        self.target_host, port = target.rsplit(":", 1)
        self.target_port = int(port)
        self.marker = marker
        self.dropped = 0
        self._sent_marker = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        _close(self._listener)  # shutdown wakes the accept thread; close alone leaves it blocked
        with self._lock:
            for sock in self._sockets:
                _close(sock)
        for thread in self._threads:
            thread.join(timeout=5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection((self.target_host, self.target_port))
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink, to_daemon in ((client, upstream, True), (upstream, client, False)):
                pump = threading.Thread(
                    target=self._pump, args=(source, sink, to_daemon, client, upstream), daemon=True
                )
                pump.start()
                self._threads.append(pump)

    def _pump(
        self,
        source: socket.socket,
        sink: socket.socket,
        to_daemon: bool,
        client: socket.socket,
        upstream: socket.socket,
    ) -> None:
        seen = b""  # the tail of what came before, so a marker split across reads is still found
        while True:
            try:
                chunk = source.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                _close(sink)
                return
            window = seen[-len(self.marker) :] + chunk
            seen = window
            if to_daemon and self.marker in window:
                self._sent_marker.set()
            elif not to_daemon and self.marker in window and self._sent_marker.is_set():
                with self._lock:
                    if self.dropped == 0:
                        self.dropped += 1
                        _close(client)
                        _close(upstream)
                        return
            try:
                sink.sendall(chunk)
            except OSError:
                _close(source)
                return


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _storage(kind: str, tmp_path: Path) -> tuple[str, ...]:
    if kind == "memory":
        return ()
    if kind == "disk":
        return ("--backend", "disk", "--data-dir", str(tmp_path / "data"))
    return ("--backend", "redis", "--redis-url", shared_redis_url(tmp_path))


@pytest.fixture(params=["memory", "disk", "redis"])
def daemon(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DaemonProcess]:
    started = DaemonProcess(*_storage(request.param, tmp_path))
    yield started
    started.kill()


class TestLostReply:
    def test_a_store_whose_reply_was_lost_is_retried_and_held_once(
        self, daemon: DaemonProcess
    ) -> None:
        """The proxy drops the first store's answer; the client's retry gets the same utterance back."""
        text = "Book the 9:15 train to Lyon, seat by the window."
        proxy = ReplyDroppingProxy(daemon.target, text.encode())
        try:
            with Client(proxy.address, timeout=30, retries=5) as chd:
                chd.store("First things first.", conversation="lost")
                stored = chd.store(text, conversation="lost")
                held = chd.last(10, conversation="lost")
        finally:
            proxy.close()
        assert proxy.dropped == 1
        assert stored.utterance.seq == 2 and stored.utterance.text == text
        assert [u.text for u in held] == ["First things first.", text]

    def test_the_query_path_of_a_store_is_retried_once_too(self, daemon: DaemonProcess) -> None:
        """client.query with data.operation store (the MCP remember tool's path) is keyed and retried."""
        text = "Remember: the hotel is near the Louvre."
        proxy = ReplyDroppingProxy(daemon.target, text.encode())
        try:
            with Client(proxy.address, timeout=30, retries=5) as chd:
                answer = chd.query(operation="store", text=text, conversation="lost-query")
                held = chd.last(10, conversation="lost-query")
        finally:
            proxy.close()
        assert proxy.dropped == 1
        assert answer.metadata.get("replayed") is True
        assert [u.text for u in held] == [text]


class TestKeys:
    def test_a_key_sent_twice_answers_the_same_utterance(self, daemon: DaemonProcess) -> None:
        """Same key, same text: the first utterance comes back, marked replayed, stored once."""
        with Client(daemon.target, timeout=10) as chd:
            meta = {"idempotency_key": "k-1"}
            first = chd.query(operation="store", text="hello", metadata=meta, conversation="keys")
            again = chd.query(operation="store", text="hello", metadata=meta, conversation="keys")
            assert again.result["utterance"] == first.result["utterance"]
            assert again.metadata["replayed"] is True and "replayed" not in first.metadata
            assert [u.text for u in chd.last(5, conversation="keys")] == ["hello"]

    def test_a_key_reused_with_another_text_is_refused(self, daemon: DaemonProcess) -> None:
        """A key names one store: another text under it is INVALID_ARGUMENT, and nothing is stored."""
        with Client(daemon.target, timeout=10) as chd:
            meta = {"idempotency_key": "k-2"}
            chd.query(operation="store", text="one", metadata=meta, conversation="reuse")
            with pytest.raises(NotUnderstood, match="idempotency_key 'k-2' was already used"):
                chd.query(operation="store", text="two", metadata=meta, conversation="reuse")
            assert [u.text for u in chd.last(5, conversation="reuse")] == ["one"]


class TestWindow:
    def test_a_key_is_answered_from_the_queue_and_forgotten_once_removed(self) -> None:
        """Folded into the archive it still answers (no buffer index); removed, it stores anew."""
        history = ConversationHistory(
            settings=Settings(buffer_size=2, eviction_batch=1, archive_evicted=True),
            background=False,
        )
        store = {"operation": "store", "text": "old news"}
        history.query("", {"idempotency_key": "q"}, store)
        for n in range(3):
            history.query("", {}, {"operation": "store", "text": f"filler {n}"})
        assert [u.seq for u in history.backend.read("default").utterances] == [3, 4]
        replay = history.query("", {"idempotency_key": "q"}, store)
        assert replay.metadata["replayed"] and replay.result["utterance"]["seq"] == 1
        assert "utterance_index" not in replay.result["utterance"]
        history.query("", {}, {"operation": "remove", "seq": 1})
        again = history.query("", {"idempotency_key": "q"}, store)
        assert "replayed" not in again.metadata and again.result["utterance"]["seq"] == 5

    def test_concurrent_sends_of_one_key_store_once(self) -> None:
        """Eight threads send one keyed store at once: one utterance, eight equal answers."""
        history = ConversationHistory(background=False)
        seqs: list[int] = []
        barrier = threading.Barrier(8)

        def send() -> None:
            barrier.wait()
            answer = history.query(
                "", {"idempotency_key": "race"}, {"operation": "store", "text": "once"}
            )
            seqs.append(answer.result["utterance"]["seq"])

        threads = [threading.Thread(target=send) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert seqs == [1] * 8
        assert len(history.backend.read("default").utterances) == 1


def test_a_key_sent_again_with_another_speaker_or_turn_is_refused_not_answered_with_the_first() -> (
    None
):
    """A retry must be the same store: a different speaker or named turn is refused (outside review)."""
    from chd.core.errors import InvalidRequest
    from chd.core.history import ConversationHistory

    history = ConversationHistory(background=False)
    try:
        first = history.query(
            "", {"idempotency_key": "k1"}, {"operation": "store", "text": "hello"}
        )
        assert first.result["utterance"]["speaker"] == "user"
        for metadata in ({"speaker": "assistant"}, {"turn_number": 50}):
            with pytest.raises(InvalidRequest, match="different (speaker|turn_number)"):
                history.query(
                    "",
                    {"idempotency_key": "k1", **metadata},
                    {"operation": "store", "text": "hello"},
                )
        again = history.query(
            "", {"idempotency_key": "k1"}, {"operation": "store", "text": "hello"}
        )
        assert (
            again.metadata["replayed"] is True
            and len(history.backend.read("default").utterances) == 1
        )
    finally:
        history.close()


def test_a_call_cancelled_by_a_stopping_daemon_is_retried_and_stored_once(
    history: ConversationHistory,
) -> None:
    """A daemon stopping cancels the calls it took (a child of ``chd serve --processes`` under
    SIGTERM, outside review of issue 31): the first store_many and the first store are carried out,
    then answered CANCELLED; chd.client sends each again with its key and each is held once."""
    import grpc

    from chd.service.server import build_server

    cancelled: list[str] = []

    def cancel_first_of_each_kind(_method: str, behavior: Any) -> Any:
        def guarded(request: Any, context: grpc.ServicerContext) -> Any:
            answer = behavior(request, context)  # stored: the cancel comes after the commit
            kind = "many" if "utterances" in str(request.data) else "one"
            if kind not in cancelled and "store" in str(request.data):
                cancelled.append(kind)
                context.abort(grpc.StatusCode.CANCELLED, "Cancelled")
            return answer

        return guarded

    server = build_server(history, "127.0.0.1", 0, observers=[cancel_first_of_each_kind])
    try:
        with Client(f"127.0.0.1:{server.port}", timeout=30) as chd:
            many = chd.store_many([{"text": "first"}, {"text": "second"}], conversation="cx")
            one = chd.store("third", conversation="cx")
            assert [u.seq for u in many.utterances] == [1, 2]
            assert one.utterance.seq == 3
            assert [u.text for u in chd.last(10, conversation="cx")] == ["first", "second", "third"]
        assert cancelled == ["many", "one"]
    finally:
        server.stop(grace=1)
