"""The redis backend's own promises: key layout, cluster, failures, retention, transfer (real redis-server)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
import redis
import redis.cluster
from grpc_health.v1 import health_pb2, health_pb2_grpc

from chd.backends import open_backend, redis_scripts
from chd.backends.base import Change
from chd.backends.redis_backend import RECENT_COMMITS, RedisBackend, conversation_key, mask_url
from chd.core.errors import StorageError, StorageFull
from chd.v1 import daemon_pb2, daemon_pb2_grpc
from tests.backends.backend_kinds import append_next
from tests.conftest import DaemonProcess, query, run_chd
from tests.redis_support import (
    RedisCluster,
    RedisServer,
    running_redis,
    shared_cluster_url,
    shared_redis_url,
    start_redis,
    wait_for,
)

AWKWARD_IDS = [
    "{",
    "}",
    "{tag}",
    "a}b{c",
    "with:colon",
    "with space",
    "%7B",
    "%",
    "",
    "日本語 🙂",
    "chd:{x}:m",
]


@pytest.fixture
def cluster(tmp_path: Path) -> RedisCluster:
    """The run's shared three-master cluster (tests/redis_support.py), emptied for this test."""
    from tests import redis_support

    redis_support.shared_cluster_url(tmp_path)
    assert redis_support._shared_cluster is not None
    return redis_support._shared_cluster


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from running_redis(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always")


def health_of(channel: grpc.Channel) -> Callable[[], int]:
    """A function that asks the daemon behind ``channel`` for its overall health status."""
    health = health_pb2_grpc.HealthStub(channel)
    return lambda: health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status


class TestKeys:
    """Every key of a conversation shares one hash tag, whatever the id holds."""

    def test_awkward_ids_round_trip_and_each_stays_on_one_slot(self, cluster: RedisCluster) -> None:
        """Braces, colons, spaces, percent signs, unicode and the empty id: one slot each, listed as given."""
        backend = RedisBackend(cluster.url)
        try:
            for conversation_id in AWKWARD_IDS:
                backend.transact(conversation_id, append_next(f"in {conversation_id!r}"))
            for conversation_id in AWKWARD_IDS:
                backend.transact(conversation_id, append_next("second"))
            assert backend.conversations() == sorted(AWKWARD_IDS)
            with cluster.servers[0].client() as client:
                for conversation_id in AWKWARD_IDS:
                    state = backend.read(conversation_id)
                    assert [u.text for u in state.utterances] == [
                        f"in {conversation_id!r}",
                        "second",
                    ]
                    slots = {
                        client.execute_command(
                            "CLUSTER KEYSLOT", conversation_key(conversation_id, part)
                        )
                        for part in ("m", "u", "lease")
                    }
                    assert len(slots) == 1, conversation_id
        finally:
            backend.close()

    def test_a_conversation_back_to_an_empty_state_leaves_only_its_recent_commits(
        self, redis_server: RedisServer
    ) -> None:
        """Settings set and cleared before any store: nothing stored, nothing listed, the recent commits expire."""
        backend = RedisBackend(redis_server.url)
        try:
            backend.transact("c", lambda s: (Change(settings={"buffer_size": 5}), None))
            assert backend.conversations() == ["c"]
            backend.transact("c", lambda s: (Change(settings={}), None))
            assert backend.conversations() == []
            with redis_server.client() as client:
                assert list(client.scan_iter(match="chd:{c}:*")) == [
                    conversation_key("c", "r").encode()
                ]
                assert client.pttl(conversation_key("c", "r")) > 0
            assert backend.read("c").is_empty
            assert backend.transact("c", append_next()) == 1
        finally:
            backend.close()

    def test_a_replica_with_a_stale_cache_never_refuses_or_skips_on_it(
        self, redis_server: RedisServer
    ) -> None:
        """A decide that refuses, or changes nothing, on a cached state another replica overtook runs again on the current one."""
        first, second = RedisBackend(redis_server.url), RedisBackend(redis_server.url)
        try:
            first.transact("c", append_next("one"))
            first.read("c")  # cached at seq 1
            second.transact("c", append_next("two"))

            def remove_two(state):
                if not any(u.seq == 2 for u in state.utterances):
                    raise KeyError("no utterance 2")
                return Change(remove={2}), "removed"

            assert first.transact("c", remove_two) == "removed"
            second.transact("c", append_next("three"))
            assert first.transact("c", lambda s: (Change(), s.next_seq)) == 4
            assert [u.text for u in second.read("c").utterances] == ["one", "three"]
        finally:
            first.close()
            second.close()

    def test_a_password_is_masked_wherever_the_url_is_shown(self) -> None:
        """The URL in messages keeps user, host, port and db, never the password."""
        assert (
            mask_url("redis://user:s3cret@db.example:6380/2")
            == "redis://user:***@db.example:6380/2"
        )
        assert mask_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


class TestCluster:
    """Redis Cluster: three masters on loopback, slots assigned by the test."""

    def test_conversations_spread_over_every_master_and_are_all_listed(
        self, cluster: RedisCluster
    ) -> None:
        """The cluster is found from the URL alone; SCAN on each master finds every conversation."""
        backend = RedisBackend(cluster.url)
        try:
            assert backend.cluster
            ids = [f"spread {i} {{tag}}" for i in range(40)]
            for conversation_id in ids:
                backend.transact(conversation_id, append_next("hello"))
                backend.transact(conversation_id, append_next("again"))
            holding = []
            for server in cluster.servers:
                with server.client() as client:
                    holding.append(sum(1 for _ in client.scan_iter(match="chd:{spread*}:m")))
            assert all(count > 0 for count in holding) and sum(holding) == len(ids)
            assert set(ids) <= set(backend.conversations())
            assert [u.seq for u in backend.read(ids[7]).utterances] == [1, 2]
        finally:
            backend.close()

    def test_chd_serve_stores_and_retrieves_through_a_cluster(self, cluster: RedisCluster) -> None:
        """--redis-cluster over gRPC: a store and a retrieve on a conversation in some master's slots."""
        daemon = DaemonProcess("--backend", "redis", "--redis-url", cluster.url, "--redis-cluster")
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                meta = {"conversation_id": "on the cluster"}
                query(stub, "Add user utterance: 'clusters hold slots'", meta)
                got = query(stub, "Get all utterances", meta).result["utterances"]
                assert [u["text"] for u in got] == ["clusters hold slots"]
        finally:
            daemon.terminate()


class TestFailures:
    """What callers see when Redis is gone, full or back."""

    def test_unreachable_redis_at_start_is_one_line_with_the_password_masked(self) -> None:
        """chd serve exits 1 with one line naming the URL; the password never shows."""
        done = run_chd(
            "serve",
            "--port",
            "0",
            "--backend",
            "redis",
            "--redis-url",
            "redis://:hunter2@127.0.0.1:1/0",
        )
        assert done.returncode == 1
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1
        assert lines[0].startswith("chd: cannot use Redis at redis://:***@127.0.0.1:1/0: ")
        assert "hunter2" not in done.stderr

    def test_a_password_from_the_url_or_redis_password_is_used_and_never_shown(
        self, tmp_path: Path
    ) -> None:
        """requirepass: the URL's password or redis_password (CHD_REDIS_PASSWORD) works; a wrong one is a masked StorageError."""
        server = start_redis(tmp_path / "locked", "--requirepass", "s3cret")
        try:
            port = server.port
            for backend in (
                RedisBackend(f"redis://:s3cret@127.0.0.1:{port}/0"),
                RedisBackend(f"redis://127.0.0.1:{port}/0", redis_password="s3cret"),
            ):
                backend.transact("c", append_next())
                backend.close()
            with pytest.raises(StorageError) as refused:
                RedisBackend(f"redis://:wrong@127.0.0.1:{port}/0")
            assert f"redis://:***@127.0.0.1:{port}/0" in str(refused.value)
            assert "wrong" not in str(refused.value)
        finally:
            server.stop()

    def test_redis_killed_and_restarted_under_a_daemon(self, redis_server: RedisServer) -> None:
        """UNAVAILABLE and NOT_SERVING while Redis is down, SERVING after, every acknowledged store kept (AOF)."""
        daemon = DaemonProcess("--backend", "redis", "--redis-url", redis_server.url)
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                status = health_of(channel)
                meta = {"conversation_id": "outage"}

                acknowledged = [
                    query(stub, f"Add user utterance: 'before {i}'", meta) for i in range(3)
                ]
                redis_server.kill()
                with pytest.raises(grpc.RpcError) as failed:
                    query(stub, "Add user utterance: 'while down'", meta)
                assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
                wait_for(
                    lambda: status() == health_pb2.HealthCheckResponse.NOT_SERVING,
                    "health to say NOT_SERVING",
                )
                redis_server.start()
                wait_for(
                    lambda: status() == health_pb2.HealthCheckResponse.SERVING,
                    "health to say SERVING",
                )
                acknowledged.append(query(stub, "Add user utterance: 'after'", meta))
                got = query(stub, "Get all utterances", meta).result["utterances"]
        finally:
            daemon.terminate()
        seqs = [int(r.result["utterance"]["seq"]) for r in acknowledged]
        assert [int(u["seq"]) for u in got] == seqs == [1, 2, 3, 4]
        assert [u["text"] for u in got] == ["before 0", "before 1", "before 2", "after"]

    def test_a_hung_redis_fails_stores_with_unavailable_and_health_follows_it(
        self, tmp_path: Path
    ) -> None:
        """SIGSTOP: a store is answered UNAVAILABLE before request_timeout + 1 s (the caller's deadline
        here, so DEADLINE_EXCEEDED would fail it), health turns NOT_SERVING, and SIGCONT brings both back."""
        import signal as signals

        server = start_redis(tmp_path / "hung")
        daemon = DaemonProcess(
            "--backend",
            "redis",
            "--redis-url",
            server.url,
            "--request-timeout",
            "8",
            "--redis-timeout",
            "2",
        )
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                status = health_of(channel)
                meta = {"conversation_id": "hung"}

                query(stub, "Add user utterance: 'before'", meta)
                assert server.process is not None
                server.process.send_signal(signals.SIGSTOP)
                try:
                    with pytest.raises(grpc.RpcError) as failed:
                        request = daemon_pb2.QueryRequest(query="Add user utterance: 'while hung'")
                        request.metadata.update(meta)
                        stub.Query(request, timeout=9)
                    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE, (
                        failed.value.details()
                    )
                    wait_for(
                        lambda: status() == health_pb2.HealthCheckResponse.NOT_SERVING,
                        "health to say NOT_SERVING",
                        timeout=10,
                    )
                    # Once health knows, calls queued together and a read that folds first each
                    # answer within the same bound, not one full set of tries after another.
                    asked = [
                        "Get summary",
                        *(f"Add user utterance: 'queued {i}'" for i in range(6)),
                    ]

                    def ask(text: str) -> grpc.StatusCode:
                        request = daemon_pb2.QueryRequest(query=text)
                        request.metadata.update(meta)
                        try:
                            stub.Query(request, timeout=9)
                        except grpc.RpcError as error:
                            return error.code()
                        return grpc.StatusCode.OK

                    with ThreadPoolExecutor(len(asked)) as pool:
                        codes = list(pool.map(ask, asked))
                    assert codes == [grpc.StatusCode.UNAVAILABLE] * len(asked)
                finally:
                    server.process.send_signal(signals.SIGCONT)
                wait_for(
                    lambda: status() == health_pb2.HealthCheckResponse.SERVING,
                    "health to say SERVING",
                )
                query(stub, "Add user utterance: 'after'", meta)
                got = [
                    u["text"] for u in query(stub, "Get all utterances", meta).result["utterances"]
                ]
        finally:
            daemon.terminate()
            server.stop()
        # The failed store's script may have reached Redis before it hung; the queued ones never left.
        assert got in (["before", "after"], ["before", "while hung", "after"])

    def test_sigterm_while_redis_hangs_exits_within_shutdown_grace_and_two_seconds(
        self, tmp_path: Path
    ) -> None:
        """The documented bound on stopping (shutdown_grace + 2 s) holds with stores and folds waiting on
        a hung Redis: nothing at close waits out its tries again (a lease hand-back, the queue report)."""
        import signal as signals

        server = start_redis(tmp_path / "hung")
        daemon = DaemonProcess(
            "--backend",
            "redis",
            "--redis-url",
            server.url,
            "--buffer-size",
            "3",
            "--eviction-batch",
            "1",
            "--redis-timeout",
            "1",
            "--shutdown-grace",
            "3",
        )
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = daemon_pb2_grpc.DaemonStub(channel)
                for i in range(6):
                    query(stub, f"Add user utterance: 'u{i}'", {"conversation_id": "s"})
                assert server.process is not None
                server.process.send_signal(signals.SIGSTOP)
                waiting = [
                    stub.Query.future(_store_request(f"s{i}", "x"), timeout=30) for i in range(3)
                ]
                time.sleep(
                    0.5
                )  # the stores reach the daemon and wait on Redis (not a timing assertion)
                try:
                    code = daemon.terminate(timeout=3 + 2)
                except subprocess.TimeoutExpired:
                    pytest.fail(
                        "chd serve was still running 5 s after SIGTERM (shutdown_grace 3 + 2 s)"
                    )
                assert code == 0
                for future in waiting:
                    assert future.exception() is not None  # UNAVAILABLE, or cut off by the shutdown
        finally:
            daemon.kill()
            if server.process is not None:
                server.process.send_signal(signals.SIGCONT)
            server.stop()

    def test_maxmemory_refusals_are_storage_full_and_reads_still_work(
        self, redis_server: RedisServer
    ) -> None:
        """A write refused under maxmemory writes nothing and says so; RESOURCE_EXHAUSTED over gRPC."""
        backend = RedisBackend(redis_server.url)
        try:
            backend.transact("kept", append_next("small"))
            with redis_server.client() as client:
                used = int(client.info("memory")["used_memory"])
                client.config_set("maxmemory-policy", "noeviction")
                client.config_set("maxmemory", str(used + 200_000))
            with pytest.raises(StorageFull, match="out of memory"):
                for _ in range(200):
                    backend.transact("big", append_next("x" * 20_000))
            before = backend.read("big")
            with pytest.raises(StorageFull):
                backend.transact("big", append_next("x" * 20_000))
            assert backend.read("big") == before
            assert [u.text for u in backend.read("kept").utterances] == ["small"]
            with redis_server.client() as client:
                # Firmly over: near the line, freed client buffers let a write through.
                client.config_set("maxmemory", "1")
            daemon = DaemonProcess("--backend", "redis", "--redis-url", redis_server.url)
            try:
                with grpc.insecure_channel(daemon.target) as channel:
                    stub = daemon_pb2_grpc.DaemonStub(channel)
                    with pytest.raises(grpc.RpcError) as refused:
                        query(
                            stub,
                            f"Add user utterance: '{'y' * 20_000}'",
                            {"conversation_id": "big"},
                        )
                    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            finally:
                daemon.terminate()
        finally:
            backend.close()

    def test_a_redis_that_went_away_is_a_storage_error(self, redis_server: RedisServer) -> None:
        """Reads and writes raise StorageError (UNAVAILABLE), never a redis-py exception."""
        backend = RedisBackend(redis_server.url)
        try:
            backend.transact("c", append_next())
            redis_server.kill()
            with pytest.raises(StorageError, match="Redis failed"):
                backend.read("never-read")  # "c" may be answered from the read lease's cache
            with pytest.raises(StorageError, match="Redis failed"):
                backend.transact("c", append_next())
            assert not backend.available()
        finally:
            backend.close()


class TestRetention:
    """conversation_ttl: idle conversations expire whole."""

    def test_an_idle_conversation_expires_with_every_key_and_a_written_one_stays(
        self, redis_server: RedisServer
    ) -> None:
        """Each write renews the ttl of all of a conversation's keys; none outlives the others, nor its count."""
        backend = RedisBackend(redis_server.url, conversation_ttl=1.5)
        try:
            backend.transact("c", append_next("first"))
            backend.transact("kept", append_next("first"))
            with redis_server.client() as client:
                ttls = [client.pttl(conversation_key("c", part)) for part in ("m", "u", "r")]
                assert all(0 < ttl <= 1500 for ttl in ttls)
                # Redis's own expiry, on its own clock: the index goes by the same one.
                wait_for(
                    lambda: (
                        client.exists(*(conversation_key("c", part) for part in ("m", "u", "r")))
                        == 0
                    ),
                    "the keys to expire",
                )
            assert backend.read("c").is_empty
            assert backend.conversations() == [] and backend.count_conversations() == 0
            # A replica whose cache still holds the expired state starts again from empty.
            assert backend.transact("c", append_next("new life")) == 1
            assert backend.conversations() == ["c"] and backend.count_conversations() == 1
        finally:
            backend.close()

    def test_without_a_ttl_nothing_expires(self, redis_server: RedisServer) -> None:
        """The default keeps conversations until they are removed."""
        backend = RedisBackend(redis_server.url)
        try:
            backend.transact("c", append_next())
            with redis_server.client() as client:
                assert client.pttl(conversation_key("c", "m")) == -1
                assert client.pttl(conversation_key("c", "u")) == -1
        finally:
            backend.close()


class TestTransfer:
    """chd export / chd import move conversations between disk and Redis."""

    def test_export_from_redis_import_into_disk_and_back_keeps_every_field(
        self, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """Redis -> JSONL -> disk -> JSONL -> another Redis database: the same lines each way."""
        source = open_backend("redis", redis_url=redis_server.url)
        try:
            for text in ("one", "two", "three"):
                source.transact("moved {x}", append_next(text))
        finally:
            source.close()
        first = run_chd("export", "--backend", "redis", "--redis-url", redis_server.url)
        assert first.returncode == 0, first.stderr
        dump = tmp_path / "dump.jsonl"
        dump.write_text(first.stdout, encoding="utf-8")
        assert run_chd("import", str(dump), "--data-dir", str(tmp_path / "data")).returncode == 0
        second = run_chd("export", "--data-dir", str(tmp_path / "data"))
        assert second.stdout == first.stdout
        assert [json.loads(line)["record"] for line in first.stdout.splitlines()] == [
            "conversation"
        ] + ["utterance"] * 3
        other_db = redis_server.url.rsplit("/", 1)[0] + "/5"
        imported = run_chd("import", str(dump), "--backend", "redis", "--redis-url", other_db)
        assert imported.returncode == 0, imported.stderr
        original, copy = RedisBackend(redis_server.url), RedisBackend(other_db)
        try:
            assert copy.read("moved {x}") == original.read("moved {x}")
            assert copy.conversations() == ["moved {x}"]
        finally:
            original.close()
            copy.close()


def _commit_keys(conversation_id: str) -> list[str]:
    """The commit script's keys on standalone Redis without the read lease key (backends/redis_scripts.py)."""
    index = ["chd:{!}:n", "chd:{!}:q", "chd:{!}:e"]
    return [
        conversation_key(conversation_id, "m"),
        conversation_key(conversation_id, "u"),
        *index,
        conversation_key(conversation_id, "r"),
    ]


def _commit_args(expected: str, commit: str, meta_text: str) -> list[object]:
    """A commit of ``commit`` over ``expected`` that writes ``meta_text`` and nothing else (no read lease)."""
    return [expected, commit, meta_text, "", 0, "c", "", 0, 0, 0, "", 0, 60_000]


class TestRetriedCommits:
    """A commit script re-sent after its reply was lost is applied once, even when another replica wrote since."""

    def test_a_resent_commit_after_another_replicas_commit_is_answered_as_applied(
        self, redis_server: RedisServer
    ) -> None:
        """The commit script itself: X applied, 120 others after it, X again -> applied, nothing written twice."""
        backend = RedisBackend(redis_server.url)
        try:
            backend.transact("c", append_next("first"))
            keys = _commit_keys("c")
            meta = keys[0]
            with redis_server.client() as client:
                before = client.hget(meta, "c").decode()
                script = client.register_script(redis_scripts.COMMIT)
                meta_text = client.hget(meta, "m").decode()
                assert script(keys=keys, args=_commit_args(before, "test.x", meta_text)) == [1]
                # Another replica commits many times in between (a busy conversation while
                # the reply to X was lost): more than the ~40 ids chd kept before 2026-11-27.
                previous = "test.x"
                for i in range(120):
                    assert script(
                        keys=keys, args=_commit_args(previous, f"test.y{i}", meta_text)
                    ) == [1]
                    previous = f"test.y{i}"
                versions = client.hget(meta, "v")
                # The retry of X: its expected id is stale, but X is among the recent commits.
                assert script(keys=keys, args=_commit_args(before, "test.x", meta_text)) == [1]
                assert (
                    client.hget(meta, "v") == versions
                    and client.hget(meta, "c") == previous.encode()
                )
                # A commit that never happened still loses the race, as it must.
                assert script(keys=keys, args=_commit_args(before, "test.z", meta_text))[0] == 0
        finally:
            backend.close()

    def test_a_resent_emptying_commit_and_a_resent_creation_after_it_are_answered_as_applied(
        self, redis_server: RedisServer
    ) -> None:
        """X creates, E (another replica) empties, X comes again: applied once; E again: applied once."""
        keys = _commit_keys("c")
        with redis_server.client() as client:
            script = client.register_script(redis_scripts.COMMIT)
            assert script(keys=keys, args=_commit_args("", "test.x", '{"schema":1}')) == [1]
            assert script(keys=keys, args=_commit_args("test.x", "test.e", "")) == [1]
            assert client.exists(keys[0]) == 0
            # X's creation, re-sent: the conversation is empty as its expected state says, but
            # applying X again would bring back what E removed.
            assert script(keys=keys, args=_commit_args("", "test.x", '{"schema":1}')) == [1]
            assert client.exists(keys[0]) == 0
            # E re-sent after another creation: its expected state is gone, E is among the recent.
            assert script(keys=keys, args=_commit_args("", "test.y", '{"schema":1}')) == [1]
            assert script(keys=keys, args=_commit_args("test.x", "test.e", "")) == [1]
            assert client.hget(keys[0], "c") == b"test.y"

    def test_a_refused_creation_leaves_no_trace_among_the_recent_commits(
        self, redis_server: RedisServer
    ) -> None:
        """max_conversations refuses a creation before any write: not even its id is kept."""
        backend = RedisBackend(redis_server.url)
        try:
            backend.transact("first", append_next())
            keys = _commit_keys("c")
            args = _commit_args("", "test.refused", '{"schema":1}')
            args[7] = 1  # max_conversations
            with redis_server.client() as client:
                script = client.register_script(redis_scripts.COMMIT)
                assert script(keys=keys, args=args) == [redis_scripts.FULL, 1]
                assert client.exists(keys[0], keys[-1]) == 0
        finally:
            backend.close()

    @pytest.mark.parametrize("kind", ["standalone", "cluster"])
    def test_recent_commits_outlast_every_send_the_clients_retries_allow(
        self, kind: str, tmp_path: Path
    ) -> None:
        """Three sends standalone (two retries), eleven on a cluster (redis-py's default): the window follows,
        sized for a socket timeout of 5 s or the replica's own when longer (replicas with different
        redis_timeouts up to 5 s keep one window)."""
        url = shared_cluster_url(tmp_path) if kind == "cluster" else shared_redis_url(tmp_path)
        sends = {"standalone": 3, "cluster": 11}[kind]
        for timeout, sized_for in ((1.0, 5.0), (7.0, 7.0)):
            backend = RedisBackend(url, socket_timeout=timeout)
            try:
                backend.transact(f"c{timeout}", append_next())
                with (
                    redis.Redis.from_url(url)
                    if kind == "standalone"
                    else redis.cluster.RedisCluster.from_url(url) as client
                ):
                    ttl = client.pttl(conversation_key(f"c{timeout}", "r"))
                window = (RECENT_COMMITS + sends * (2 * sized_for + 5)) * 1000
                assert window - 5000 < ttl <= window
            finally:
                backend.close()

    def test_ids_kept_by_an_earlier_chd_in_the_meta_hash_are_still_recognised(
        self, redis_server: RedisServer
    ) -> None:
        """A replica of the earlier version re-sending its commit during a rolling upgrade is answered applied."""
        backend = RedisBackend(redis_server.url)
        try:
            backend.transact("c", append_next("first"))
            keys = _commit_keys("c")
            with redis_server.client() as client:
                client.hset(
                    keys[0], "r", "old.7 old.6 old.5"
                )  # as the earlier commit script wrote it
                script = client.register_script(redis_scripts.COMMIT)
                meta_text = client.hget(keys[0], "m").decode()
                assert script(keys=keys, args=_commit_args("stale", "old.6", meta_text)) == [1]
                assert (
                    script(keys=keys, args=_commit_args("stale", "old.", meta_text))[0] == 0
                )  # a whole id only
        finally:
            backend.close()

    def test_a_batch_failing_in_a_later_round_never_applies_its_earlier_commits_twice(
        self, redis_server: RedisServer
    ) -> None:
        """x lands in round one, y is overtaken and round two fails: x is answered once and stored once."""
        first, other = RedisBackend(redis_server.url), RedisBackend(redis_server.url)
        try:
            first.transact("y", append_next("y1"))
            first.read("y")
            other.transact(
                "y", append_next("y2 by the other replica")
            )  # first's cached y is stale now
            real, sends = first._send, []

            def send(calls):  # white box: the second round's round trip fails
                sends.append(len(calls))
                if len(sends) == 2:
                    raise StorageError(
                        "writes kept waiting for other replicas' read leases to run out"
                    )
                return real(calls)

            first._send = send
            outcomes: dict[str, object] = {}

            def call(cid: str) -> None:
                try:
                    outcomes[cid] = first.transact(cid, append_next(f"{cid} once"))
                except StorageError as exc:
                    outcomes[cid] = exc

            threads = [threading.Thread(target=call, args=(cid,)) for cid in ("x", "y")]
            with first._group.lock:  # white box: both queued before one leader takes them
                for thread in threads:
                    thread.start()
                wait_for(lambda: len(first._group) == 2, "both calls queued", timeout=10)
            for thread in threads:
                thread.join()
            assert outcomes["x"] == 1
            assert [u.text for u in other.read("x").utterances] == ["x once"]
            stored_y = [u.text for u in other.read("y").utterances].count("y once")
            assert stored_y == (1 if isinstance(outcomes["y"], int) else 0)
        finally:
            first.close()
            other.close()

    def test_recent_commits_are_kept_for_their_window_and_expire_after_the_last_commit(
        self, redis_server: RedisServer
    ) -> None:
        """Every commit of the window is kept (by time, not count), older ones go, the set itself expires."""
        backend = RedisBackend(redis_server.url, socket_timeout=1.0)
        try:
            for i in range(120):
                backend.transact("c", append_next(f"u{i}"))
            recent = conversation_key("c", "r")
            window = int(
                (RECENT_COMMITS + 3 * (2 * 5.0 + 5)) * 1000
            )  # one send and two retries, sized for 5 s
            with redis_server.client() as client:
                current = client.hget(conversation_key("c", "m"), "c")
                assert client.zcard(recent) == 120 and client.zscore(recent, current) is not None
                assert 0 < client.pttl(recent) <= window
                # A commit made longer ago than the window is dropped by the next trim (every 16th commit).
                client.zadd(recent, {"long.ago": client.zscore(recent, current) - window - 1})
                for i in range(16):
                    backend.transact("c", append_next(f"more {i}"))
                assert client.zscore(recent, "long.ago") is None and client.zcard(recent) == 136
                # However fast a conversation is written, its recent commits keep a bounded number.
                kept = redis_scripts.RECENT_COMMITS_KEPT
                start = client.zscore(recent, current) - kept  # all within the window
                client.zadd(recent, {f"burst.{i}": start + i for i in range(kept)})
                for i in range(16):
                    backend.transact("c", append_next(f"after a burst {i}"))
                newest = client.hget(conversation_key("c", "m"), "c")
                assert kept <= client.zcard(recent) < kept + 16  # the commits since the trim
                assert (
                    client.zscore(recent, newest) is not None
                    and client.zscore(recent, current) is not None
                )
                assert client.zscore(recent, "burst.0") is None  # the oldest went first
        finally:
            backend.close()


class TestDirectConnections:
    """Reads and commits on each thread's own connection (backends/redis_direct.py) lose nothing to Redis's events."""

    def test_a_flushed_script_cache_reloads_the_scripts_and_runs_each_commit_once(
        self, redis_server: RedisServer
    ) -> None:
        """After SCRIPT FLUSH, concurrent commits answered NOSCRIPT are sent again: seqs stay 1..N, none twice."""
        backend = RedisBackend(redis_server.url)
        try:
            backend.transact("c", append_next("before"))
            with redis_server.client() as client:
                client.script_flush()
            with ThreadPoolExecutor(max_workers=6) as pool:
                seqs = sorted(
                    pool.map(lambda i: backend.transact("c", append_next(f"after {i}")), range(30))
                )
            assert seqs == list(range(2, 32))
            fresh = RedisBackend(redis_server.url)
            try:
                state = fresh.read("c")
            finally:
                fresh.close()
            assert sorted(
                u.seq for u in (*state.archive, *state.pending, *state.utterances)
            ) == list(range(1, 32))
        finally:
            backend.close()

    def test_connections_killed_by_redis_are_made_again_and_the_read_is_current(
        self, redis_server: RedisServer
    ) -> None:
        """CLIENT KILL of every connection: the next read and write reconnect and see every commit."""
        backend, other = RedisBackend(redis_server.url), RedisBackend(redis_server.url)
        try:
            backend.transact("c", append_next("one"))
            assert [u.text for u in backend.read("c").utterances] == ["one"]
            with redis_server.client() as client:
                client.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            other.transact("c", append_next("two"))
            assert [u.text for u in backend.read("c").utterances] == ["one", "two"]
            assert backend.transact("c", append_next("three")) == 3
        finally:
            backend.close()
            other.close()

    def test_close_ends_the_connection_of_every_thread(self, redis_server: RedisServer) -> None:
        """Connections made by reads on several threads are all gone from CLIENT LIST after close."""
        with redis_server.client() as client:
            baseline = len(client.client_list())
            backend = RedisBackend(redis_server.url)
            backend.transact("c", append_next())
            with ThreadPoolExecutor(max_workers=4) as pool:
                barrier = threading.Barrier(4)

                def read(i: int) -> int:
                    barrier.wait()  # four threads at once, so four connections
                    return len(backend.read("c").utterances) + len(
                        backend.read(f"unread {i}").utterances
                    )

                assert list(pool.map(read, range(4))) == [1] * 4
            assert len(client.client_list()) >= baseline + 4
            backend.close()
            wait_for(
                lambda: len(client.client_list()) == baseline,
                "the backend's connections to close",
                timeout=5,
            )


def _store_request(conversation_id: str, text: str) -> daemon_pb2.QueryRequest:
    request = daemon_pb2.QueryRequest(query=f"Add user utterance: '{text}'")
    request.metadata.update({"conversation_id": conversation_id})
    return request
