"""Several `chd serve --backend redis` replicas on one real redis-server."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import grpc
import pytest

from chd.backends import open_backend
from chd.backends.redis_backend import RedisBackend, conversation_key
from chd.v1 import daemon_pb2_grpc
from tests.conftest import DaemonProcess, query
from tests.fake_anthropic import FakeAnthropic
from tests.redis_support import RedisServer, running_redis, wait_for

# Every replica keeps the whole conversation in its buffer unless a test says otherwise.
ROOMY = ("--buffer-size", "2000", "--max-tokens", "1000000")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path_factory.mktemp("redis"))


@pytest.fixture
def replicas(redis_server: RedisServer) -> Iterator[Callable[..., DaemonProcess]]:
    """Starts `chd serve --backend redis` replicas on the test's Redis; kills them all at the end."""
    started: list[DaemonProcess] = []

    def start(*args: str) -> DaemonProcess:
        daemon = DaemonProcess("--backend", "redis", "--redis-url", redis_server.url, *args)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill()


@pytest.fixture(scope="module")
def three_replicas(redis_server: RedisServer) -> Iterator[list[DaemonProcess]]:
    """Three replicas shared by the tests that only store and read (started in parallel)."""
    started: list[DaemonProcess] = []
    lock = threading.Lock()

    def start() -> None:
        daemon = DaemonProcess("--backend", "redis", "--redis-url", redis_server.url, *ROOMY)
        with lock:
            started.append(daemon)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(started) == 3, "a replica did not start"
        yield started
    finally:
        for daemon in started:
            daemon.kill()


def stubs(daemons: list[DaemonProcess], stack: ExitStack) -> list[daemon_pb2_grpc.DaemonStub]:
    return [
        daemon_pb2_grpc.DaemonStub(stack.enter_context(grpc.insecure_channel(d.target)))
        for d in daemons
    ]


def store(stub: daemon_pb2_grpc.DaemonStub, conversation_id: str, text: str) -> int:
    reply = query(stub, f"Add user utterance: '{text}'", {"conversation_id": conversation_id})
    return int(reply.result["utterance"]["seq"])


@pytest.mark.parametrize("count", [2, 3])
def test_eight_threads_storing_through_several_replicas_give_seqs_one_to_800(
    three_replicas: list[DaemonProcess], redis_server: RedisServer, count: int
) -> None:
    """8 threads x 100 stores into one conversation, spread over the replicas: seqs 1..800 exactly."""
    daemons = three_replicas[:count]
    conversation = f"shared by {count}"
    acknowledged: list[int] = []
    errors: list[BaseException] = []
    with ExitStack() as stack:
        channels = stubs(daemons, stack)

        def writer(thread: int) -> None:
            try:
                for i in range(100):
                    acknowledged.append(
                        store(channels[(thread + i) % count], conversation, f"t{thread} n{i}")
                    )
            except BaseException as exc:  # reported below, not lost in the thread
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert sorted(acknowledged) == list(range(1, 801))
        backend = open_backend("redis", redis_url=redis_server.url)
        try:
            state = backend.read(conversation)
        finally:
            backend.close()
        assert [u.seq for u in state.utterances] == list(range(1, 801))
        assert [u.turn_number for u in state.utterances] == list(range(1, 801))
        texts = {u.text for u in state.utterances}
        assert texts == {f"t{t} n{i}" for t in range(8) for i in range(100)}


def test_a_replica_never_answers_from_a_state_another_replica_changed(
    three_replicas: list[DaemonProcess],
) -> None:
    """Search and reads in one replica see stores and removes made through another at once."""
    first, second = three_replicas[:2]
    with ExitStack() as stack:
        a, b = stubs([first, second], stack)
        meta = {"conversation_id": "seen"}
        store(a, "seen", "the zeppelin leaves at noon")
        # b indexes the conversation now, so a later hit must come from a fresh sync.
        assert query(b, "Find utterances about zeppelin", meta).result["utterances"]
        store(a, "seen", "the submarine leaves at dawn")
        hits = query(b, "Find utterances about submarine", meta).result["utterances"]
        assert [h["text"] for h in hits] == ["the submarine leaves at dawn"]
        query(a, "Remove utterance 1", meta)
        assert list(query(b, "Find utterances about zeppelin", meta).result["utterances"]) == []
        assert [
            int(u["seq"]) for u in query(b, "Get all utterances", meta).result["utterances"]
        ] == [2]


def test_a_fold_cut_short_by_sigkill_is_finished_by_a_replica_that_starts_later(
    replicas: Callable[..., DaemonProcess],
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The replica holding the fold lease dies mid-fold; a new replica recovers the queue and loses nothing."""
    conversation = "folded"
    small = (
        "--buffer-size",
        "4",
        "--eviction-batch",
        "2",
        "--fold-delay",
        "0",
        "--fold-lease",
        "1",
    )
    with FakeAnthropic(delay=120) as api:  # a model that never answers in time
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
        folding = replicas(*small, "--summarizer", "claude", "--summarizer-timeout", "120")
        monkeypatch.delenv("ANTHROPIC_API_KEY")
        monkeypatch.delenv("ANTHROPIC_BASE_URL")
        with grpc.insecure_channel(folding.target) as channel:
            stub = daemon_pb2_grpc.DaemonStub(channel)
            acknowledged = [store(stub, conversation, f"fact number {i}") for i in range(1, 8)]
        with redis_server.client() as client:
            lease = conversation_key(conversation, "lease")
            wait_for(
                lambda: client.exists(lease) == 1 and len(api.requests) > 0, "the fold to start"
            )
            folding.kill()
            backend = open_backend("redis", redis_url=redis_server.url)
            try:
                queued = backend.read(conversation).pending
                assert queued, "the killed fold must have left its batch queued"
                replicas(*small, "--summarizer", "offline")
                wait_for(
                    lambda: not backend.read(conversation).pending,
                    "another replica to fold the queue",
                )
                state = backend.read(conversation)
            finally:
                backend.close()
    assert acknowledged == list(range(1, 8))
    assert state.summary.through_seq >= max(u.seq for u in queued)
    kept = {u.seq for u in state.utterances}
    assert all(seq in kept or seq <= state.summary.through_seq for seq in acknowledged)


def test_the_fold_lease_is_held_by_one_replica_at_a_time_and_expires(
    redis_server: RedisServer,
) -> None:
    """A second holder is refused while the lease lives, and gets it once it has expired."""
    first = RedisBackend(redis_server.url, fold_lease=0.3)
    second = RedisBackend(redis_server.url, fold_lease=0.3)
    try:
        with first.lease("c") as held, second.lease("c") as also:
            assert (held, also) == (True, False)
        with second.lease("c") as after_release:
            assert after_release
        # A holder that never releases (a killed replica) blocks only until expiry.
        abandoned = first.lease("c")
        assert abandoned.__enter__()
        with second.lease("c") as during:
            assert not during
        with redis_server.client() as client:
            wait_for(
                lambda: client.exists(conversation_key("c", "lease")) == 0, "the lease to expire"
            )
        with second.lease("c") as expired:
            assert expired
    finally:
        first.close()
        second.close()


def test_a_lone_replica_answers_from_its_read_lease_and_a_second_replicas_write_is_read_at_once(
    tmp_path: Path,
) -> None:
    """Alone, retrieves send Redis nothing; once a second replica stores, the first's next retrieve and search have it."""
    for server in running_redis(tmp_path / "own"):
        first = DaemonProcess("--backend", "redis", "--redis-url", server.url)
        second = None
        try:
            with ExitStack() as stack:
                (a,) = stubs([first], stack)
                meta = {"conversation_id": "leased"}
                store(a, "leased", "the zeppelin leaves at noon")
                assert len(query(a, "Get all utterances", meta).result["utterances"]) == 1
                with server.client() as client:
                    client.config_resetstat()
                    for _ in range(10):
                        assert len(query(a, "Get all utterances", meta).result["utterances"]) == 1
                    calls = {
                        name: stat["calls"] for name, stat in client.info("commandstats").items()
                    }
                assert calls.get("cmdstat_hmget", 0) == 0
                assert calls.get("cmdstat_evalsha", 0) <= 2  # the lease's heartbeats, once a second
                second = DaemonProcess("--backend", "redis", "--redis-url", server.url)
                (b,) = stubs([second], stack)
                store(b, "leased", "the submarine leaves at dawn")  # waits out the first's lease
                texts = [
                    u["text"] for u in query(a, "Get all utterances", meta).result["utterances"]
                ]
                assert texts == ["the zeppelin leaves at noon", "the submarine leaves at dawn"]
                hits = query(a, "Find utterances about submarine", meta).result["utterances"]
                assert [h["text"] for h in hits] == ["the submarine leaves at dawn"]
        finally:
            first.kill()
            if second is not None:
                second.kill()


def _texts_at_seqs(backend: RedisBackend, conversation: str) -> list[tuple[int, str]]:
    return [(u.seq, u.text) for u in backend.read(conversation).utterances]


@pytest.mark.parametrize("rounds", [20])
def test_two_replicas_storing_at_the_same_moment_both_read_the_texts_redis_holds(
    redis_server: RedisServer, rounds: int
) -> None:
    """The replica that loses the commit race answers what Redis holds, not its own text at both seqs.

    Texts at seqs, not seqs alone: the losing attempt's state once gave the
    loser its own text at the winner's seq (issue 24).
    """
    from chd.core.history import ConversationHistory
    from chd.core.settings import Settings

    backends = [RedisBackend(redis_server.url) for _ in range(2)]
    fresh_reads: list[RedisBackend] = []
    try:
        histories = [
            ConversationHistory(backend=b, settings=Settings(), background=False) for b in backends
        ]
        for round_ in range(rounds):
            conversation = f"race {round_}"
            barrier = threading.Barrier(2)
            errors: list[BaseException] = []

            def write(i: int) -> None:
                try:
                    barrier.wait()
                    histories[i].query(
                        f"Add user utterance: 'from {'AB'[i]}'", {"conversation_id": conversation}
                    )
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert errors == []
            fresh = RedisBackend(redis_server.url)
            fresh_reads.append(fresh)
            truth = _texts_at_seqs(fresh, conversation)
            assert sorted(text for _, text in truth) == ["from A", "from B"]
            for replica in backends:
                assert _texts_at_seqs(replica, conversation) == truth
    finally:
        for backend in (*backends, *fresh_reads):
            backend.close()
