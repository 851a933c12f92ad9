"""The redis backend's index (issue 17): counts, queued folds and the limit, exact across replicas."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import grpc
import pytest

from chd.backends.base import Change, ConversationState
from chd.backends.redis_backend import RedisBackend
from chd.core.errors import TooLarge
from chd.v1 import daemon_pb2_grpc
from tests.backends.backend_kinds import append_next
from tests.backends.test_scale import _queued
from tests.conftest import DaemonProcess, query
from tests.redis_support import shared_cluster_url, shared_redis_url, wait_for


def _folded(state: ConversationState) -> tuple[Change, None]:
    return Change(pending_remove={u.seq for u in state.pending}), None


@pytest.fixture(params=["standalone", "cluster"])
def redis_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database of the run's shared server, or the shared three-master cluster emptied."""
    if request.param == "cluster":
        return shared_cluster_url(tmp_path)
    return shared_redis_url(tmp_path)


def _index_keys(client) -> list[bytes]:
    return [key for key in client.scan_iter(match="chd:{!*") if not key.endswith(b":lease")]


def test_the_count_and_queue_index_follow_every_replica_and_survive_a_reopen(
    redis_url: str,
) -> None:
    """Two replicas create, queue, fold and empty conversations; each sees the exact count and queue."""
    first, second = RedisBackend(redis_url), RedisBackend(redis_url)
    try:
        for i in range(6):
            (first if i % 2 else second).transact(f"c{i}", append_next())
        first.transact("c1", _queued)
        second.transact("c4", _queued)
        second.transact("{odd} id", _queued)
        for replica in (first, second):
            assert replica.count_conversations() == 7
            assert list(replica.queued_conversations()) == ["c1", "c4", "{odd} id"]
        first.transact("c4", _folded)
        second.transact(
            "c2",
            lambda state: (
                Change(remove={u.seq for u in state.utterances}, next_seq=1, last_turn=0),
                None,
            ),
        )
        reopened = RedisBackend(redis_url)
        try:
            assert reopened.count_conversations() == len(reopened.conversations()) == 6
            assert list(reopened.queued_conversations()) == ["c1", "{odd} id"]
            assert [size for size in reopened.iter_sizes() if size[0] == "c1"] == [("c1", 2, 1)]
            assert list(reopened.iter_conversations(after="c3")) == ["c4", "c5", "{odd} id"]
        finally:
            reopened.close()
    finally:
        first.close()
        second.close()


def test_a_store_written_before_the_index_is_indexed_once_at_start(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the index keys and marker (a store of the chd before), the first start builds them, and logs it."""
    backend = RedisBackend(redis_url)
    try:
        for i in range(5):
            backend.transact(f"c{i}", _queued if i in (1, 3) else append_next())
        client = backend._client
        for key in _index_keys(client):
            client.delete(key)
    finally:
        backend.close()
    with caplog.at_level(logging.INFO, logger="chd.backends.redis_index"):
        upgraded = RedisBackend(redis_url)
    try:
        assert "indexed its 5 conversations once" in caplog.text
        assert upgraded.count_conversations() == 5
        if upgraded.cluster:  # the quota holds them too, so a limit counts them
            assert upgraded._client.zcard("chd:{!}:quota") == 5
        assert list(upgraded.queued_conversations()) == ["c1", "c3"]
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="chd.backends.redis_index"):
            RedisBackend(redis_url).close()
        assert "indexed" not in caplog.text
    finally:
        upgraded.close()


def _race(
    replicas: list[RedisBackend], workers: int = 4, each: int = 10
) -> tuple[list[str], list[str]]:
    """``workers`` threads spread over ``replicas`` each create ``each`` conversations: (created, refused)."""
    created: list[str] = []
    refused: list[str] = []
    lock = threading.Lock()

    def create(worker: int) -> None:
        replica = replicas[worker % len(replicas)]
        for i in range(each):
            cid = f"w{worker}-{i}"
            try:
                replica.transact(cid, append_next())
                outcome = created
            except TooLarge:
                outcome = refused
            with lock:
                outcome.append(cid)

    threads = [threading.Thread(target=create, args=(w,)) for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return created, refused


def _emptied(state: ConversationState) -> tuple[Change, None]:
    return Change(remove={u.seq for u in state.utterances}, next_seq=1, last_turn=0), None


def test_two_replicas_creating_at_once_never_pass_max_conversations(tmp_path: Path) -> None:
    """Four threads on two replicas race to create 40 conversations under a limit of 10: exactly 10 exist."""
    replicas = [RedisBackend(shared_redis_url(tmp_path), max_conversations=10) for _ in range(2)]
    try:
        created, refused = _race(replicas)
        assert len(created) == 10 and len(refused) == 30
        assert replicas[0].count_conversations() == 10
        assert replicas[1].conversations() == sorted(created)
        # A conversation that exists still takes stores at the limit.
        assert replicas[1].transact(created[0], append_next()) == 2
        # Emptying one frees its place at once (the script checks the index).
        replicas[0].transact(created[1], _emptied)
        assert replicas[1].transact("late", append_next()) == 1
    finally:
        for replica in replicas:
            replica.close()


def test_a_full_daemon_refuses_a_new_conversation_with_resource_exhausted(tmp_path: Path) -> None:
    """max_conversations reaches the backend: the refusal is RESOURCE_EXHAUSTED, and existing ones still store."""
    url = shared_redis_url(tmp_path)
    daemon = DaemonProcess("--backend", "redis", "--redis-url", url, "--max-conversations", "2")
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = daemon_pb2_grpc.DaemonStub(channel)
            for cid in ("a", "b"):
                query(stub, "Add user utterance: 'hello'", {"conversation_id": cid})
            with pytest.raises(grpc.RpcError) as refused:
                query(stub, "Add user utterance: 'hello'", {"conversation_id": "c"})
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "max_conversations" in (refused.value.details() or "")
            query(stub, "Add user utterance: 'again'", {"conversation_id": "a"})
    finally:
        daemon.terminate()
    backend = RedisBackend(url)
    try:
        assert backend.conversations() == ["a", "b"] and backend.count_conversations() == 2
    finally:
        backend.close()


def test_on_a_cluster_the_index_of_a_conversation_shares_its_slot(tmp_path: Path) -> None:
    """Each index entry lives in its conversation's slot, spread over every master."""
    url = shared_cluster_url(tmp_path)
    backend = RedisBackend(url)
    try:
        for i in range(30):
            backend.transact(f"c{i}", append_next())
        client = backend._client
        index = [key.decode() for key in client.scan_iter(match="chd:{!*}:n")]
        assert len(index) == len({client.keyslot(f"chd:{{c{i}}}:m") for i in range(30)})
        for i in range(30):
            slot = client.keyslot(f"chd:{{c{i}}}:m")
            assert any(client.keyslot(key) == slot for key in index)
        masters = {client.get_node_from_key(key).name for key in index}
        assert len(masters) == 3
    finally:
        backend.close()


def test_on_a_cluster_two_replicas_creating_at_once_never_pass_max_conversations(
    tmp_path: Path,
) -> None:
    """The quota key bounds creations over every slot, those made without a limit (an import) included."""
    url = shared_cluster_url(tmp_path)
    unlimited = RedisBackend(url)
    try:
        for cid in ("imported-1", "imported-2", "imported-3"):
            unlimited.transact(cid, append_next())
    finally:
        unlimited.close()
    replicas = [RedisBackend(url, max_conversations=10) for _ in range(2)]
    try:
        created, refused = _race(replicas)
        assert len(created) == 7 and len(refused) == 33
        assert len(replicas[1].conversations()) == 10
        assert replicas[0].transact(created[0], append_next()) == 2
        # Emptying one frees its place once the quota has checked it against the data.
        replicas[0].transact(created[1], _emptied)

        def created_late() -> bool:
            try:
                return replicas[1].transact("late", append_next()) == 1
            except TooLarge:
                return False

        wait_for(created_late, "the emptied conversation's place to be freed", timeout=30)
        assert len(replicas[0].conversations()) == 10 and "late" in replicas[0].conversations()
    finally:
        for replica in replicas:
            replica.close()


def test_a_batch_gives_each_call_its_own_outcome_and_indexes_what_it_created(
    redis_url: str,
) -> None:
    """transact_many: values in order, a refusing decide's error in its place, the rest committed and counted."""
    from chd.backends.base import transact_many

    def refuse(state: ConversationState) -> tuple[Change, None]:
        raise ValueError("no")

    backend = RedisBackend(redis_url)
    try:
        backend.transact("old", append_next())
        calls = [
            ("old", append_next()),
            ("new", append_next()),
            ("bad", refuse),
            ("new", append_next()),
        ]
        outcomes = transact_many(backend, calls)
        assert [o.value for o in outcomes] == [2, 1, None, 2]
        assert isinstance(outcomes[2].error, ValueError)
        assert backend.conversations() == ["new", "old"] and backend.count_conversations() == 2
    finally:
        backend.close()


def test_on_a_cluster_the_place_of_a_replica_killed_before_its_release_is_found_and_freed(
    tmp_path: Path,
) -> None:
    """Emptied, then killed before releasing its place: the next creation that finds the quota full frees it."""
    url = shared_cluster_url(tmp_path)
    replica, dying = RedisBackend(url, max_conversations=2), RedisBackend(url, max_conversations=2)
    try:
        replica.transact("kept", append_next())
        replica.transact("emptied", append_next())
        dying._quota.release = lambda conversation_id: (
            None
        )  # killed between its commit and the release
        dying.transact("emptied", _emptied)
        assert replica.conversations() == ["kept"]
        assert replica.transact("new", append_next()) == 1
        assert replica.conversations() == ["kept", "new"]
        with pytest.raises(TooLarge):
            replica.transact("one too many", append_next())
    finally:
        replica.close()
        dying.close()
