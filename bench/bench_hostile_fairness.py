"""Valid callers' latency with and without one client sending the worst 2 kB queries (issue 28, item 10).

Starts one memory-backend `chd serve`, finds the costliest 2 kB shapes of
tests/parser_shapes.py and bench/bench_hostile.py (round trip, best of 3,
against a valid query's), then runs --clients threads of --requests valid
queries each, alone and beside one more client sending those shapes one
after another. It prints the valid calls' p50/p99 for both and their ratio
(the issue's target: p99 within 1.5x).

Each client is its own caller, as it would be in the field: its own channel
and TCP connection (the daemon tells callers apart by connection). The
attacker is its own process, so its client-side work does not share the
valid clients' interpreter and inflate their latency in this script rather
than in the daemon. The valid requests run in --blocks blocks, alone and
beside in ABBA order (the attacker paused with SIGSTOP for the alone ones),
so a neighbour's load on a shared machine falls on both sides alike.

    python bench/bench_hostile_fairness.py [--clients 8] [--requests 500] [--blocks 8]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_hostile import SHAPES as REQUEST_SHAPES  # noqa: E402
from bench_hostile import Daemon
from percentiles import percentile  # noqa: E402

from chd.v1 import daemon_pb2, daemon_pb2_grpc  # noqa: E402
from tests.parser_shapes import SHAPES, build  # noqa: E402

VALID = "Get the last 5 utterances"
SIZE = 2000
# Each shape's variants the attacker cycles through: with 3 shapes, more
# 2 kB readings than the cache holds.
VARIANTS = 1000


Request = tuple[str, dict, dict]


def _shapes() -> dict[str, Callable[[int], Request]]:
    """Name -> size -> request."""
    shapes: dict[str, Callable[[int], Request]] = {
        f"query: {name}": lambda size, name=name: (build(name, size), {}, {}) for name in SHAPES
    }
    return shapes | REQUEST_SHAPES


def _variant(request: Request, k: int) -> Request:
    """``request`` with the case of its first letters flipped as the bits of ``k`` say.

    The daemon caches its reading of a query (parser._READINGS, 2 MiB): an
    attacker repeating one query is answered from the cache after the first
    call, and measures nothing but the cache. The query language ignores
    case, so each variant reads (and costs) the same, and is a new text.
    """

    def flipped(text: str) -> str:
        out, bit = [], 0
        for char in text:
            if char.isalpha() and bit < 16:
                out.append(char.swapcase() if k >> bit & 1 else char)
                bit += 1
            else:
                out.append(char)
        return "".join(out)

    query, metadata, data = request
    return (
        flipped(query),
        metadata,
        {key: flipped(v) if key != "operation" else v for key, v in data.items()},
    )


def _message(request: Request, conversation: str) -> daemon_pb2.QueryRequest:
    query, metadata, data = request
    message = daemon_pb2.QueryRequest(query=query)
    message.metadata.update({"conversation_id": conversation, **metadata})
    message.data.update(data)
    return message


def _stub(port: str) -> tuple[grpc.Channel, daemon_pb2_grpc.DaemonStub]:
    """A stub on a connection of its own (grpc shares one between like channels by default)."""
    channel = grpc.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]
    )
    return channel, daemon_pb2_grpc.DaemonStub(channel)


def _call(stub: daemon_pb2_grpc.DaemonStub, message: daemon_pb2.QueryRequest) -> float:
    began = time.perf_counter()
    try:
        stub.Query(message, timeout=60)
    except grpc.RpcError as error:
        if error.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
            raise
    return time.perf_counter() - began


def attack(port: str, names: list[str]) -> None:
    """The attacker's process: sends variants of the named shapes one after another until killed."""
    shapes = _shapes()
    messages = [
        _message(_variant(shapes[name](SIZE), k), "attacker")
        for k in range(VARIANTS)
        for name in names
    ]
    _channel, stub = _stub(port)
    calls = 0

    def report(_signum: int, _frame: object) -> None:
        print(calls, flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, report)
    _call(stub, messages[0])
    print("ready", flush=True)
    while True:
        for message in messages:
            _call(stub, message)
            calls += 1


class Attacker:
    """The attacker process, paused while the valid clients run alone."""

    def __init__(self, port: str, names: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--attack", port, *names],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the attacker did not start")
        self.pause()

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)
        time.sleep(0.05)  # the call it had in flight is answered

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        time.sleep(0.05)  # it is sending again

    def stop(self) -> int:
        """Stops it; the calls it sent."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.send_signal(signal.SIGCONT)
        out, _ = self.proc.communicate(timeout=10)
        return int(out.strip() or 0)


def _valid_block(stubs: list[daemon_pb2_grpc.DaemonStub], requests: int) -> list[float]:
    latencies: list[float] = []
    lock = threading.Lock()

    def valid(n: int) -> None:
        message = _message((VALID, {}, {}), f"v{n}")
        mine = [_call(stubs[n], message) for _ in range(requests)]
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=valid, args=(n,)) for n in range(len(stubs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=500, help="valid calls per client and side")
    parser.add_argument(
        "--blocks", type=int, default=8, help="blocks each side's calls are split in (ABBA order)"
    )
    parser.add_argument(
        "--worst", type=int, default=3, help="how many of the costliest shapes the attacker cycles"
    )
    parser.add_argument("--attack", nargs="+", metavar=("PORT", "SHAPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.attack:
        attack(args.attack[0], args.attack[1:])
        return
    daemon = Daemon()
    port = daemon.channel._channel.target().decode().rsplit(":", 1)[1]
    channels = [_stub(port) for _ in range(args.clients)]
    stubs = [stub for _, stub in channels]
    attacker = None
    try:
        for n in range(args.clients):
            for k in range(5):
                daemon.ask(
                    f"Add utterance: fact {k} for client {n}", {"conversation_id": f"v{n}"}, {}, 10
                )
        valid = min(daemon.ask(VALID, {}, {}, 60) for _ in range(3))
        shapes = _shapes()
        # Best of three different texts: none of them answered from the cache.
        costs = sorted(
            (
                (min(daemon.ask(*_variant(shapes[name](SIZE), k), 60) for k in range(1, 4)), name)
                for name in shapes
            ),
            reverse=True,
        )
        print(f"valid query round trip {valid * 1e3:.2f} ms; costliest {SIZE}-character shapes:")
        for seconds, shape in costs[: args.worst]:
            print(f"   {seconds * 1e3:7.2f} ms = {seconds / valid:5.1f}x  {shape}")
        attacker = Attacker(port, [name for _, name in costs[: args.worst]])
        _valid_block(stubs, 50)  # warm-up, not counted
        began = time.perf_counter()
        per_block = max(1, args.requests // args.blocks)
        alone: list[float] = []
        beside: list[float] = []
        for block in range(2 * args.blocks):
            attacked = block % 4 in (1, 2)  # A B B A A B B A ...
            if attacked:
                attacker.resume()
            else:
                attacker.pause()
            (beside if attacked else alone).extend(_valid_block(stubs, per_block))
        print(f"measured for {time.perf_counter() - began:.1f} s")
        for name, values in (("alone", alone), ("beside the attacker", beside)):
            print(
                f"{args.clients} x {len(values) // args.clients} valid calls {name}: "
                f"p50 {percentile(values, 0.5) * 1e3:.2f} ms, p99 {percentile(values, 0.99) * 1e3:.2f} ms"
            )
        if os.environ.get("BENCH_CPU"):
            for who, pid in (
                ("daemon", daemon.proc.pid),
                ("bench", os.getpid()),
                ("attacker", attacker.proc.pid),
            ):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                print(who, "cpu s", (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
        sent = attacker.stop()
        attacker = None
        print(f"the attacker's calls meanwhile: {sent}")
        print(f"p99 ratio {percentile(beside, 0.99) / percentile(alone, 0.99):.2f} (target 1.5)")
    finally:
        if attacker is not None:
            attacker.proc.kill()
            attacker.proc.wait(10)
        for channel, _ in channels:
            channel.close()
        daemon.stop()


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
