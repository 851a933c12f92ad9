"""A heavy valid caller's rate alone and beside a light pinger (issue 28 review, finding 1).

Starts one memory-backend `chd serve`. One client stores N-character
utterances back to back (a bulk import: valid calls, a few ms each) on its
own connection, in --blocks blocks of --seconds each, alternately alone and
beside a second client (its own connection) calling GetPurpose every
--period seconds, in ABBA order so a neighbour's load on a shared machine
falls on both sides alike. Prints the stores per second on each side and
their ratio (beside / alone): a pinger that costs the daemon next to
nothing should leave it near 1. Fair admission that held the heavy caller
whenever another had been active in the last 100 ms, queue or not, gave
0.26 to 0.40 at a 50 ms period.

    python bench/bench_fair_pinger.py [--size 30000] [--period 0.05 0.2] [--blocks 8] [--seconds 2]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_hostile import Daemon  # noqa: E402

from chd.v1 import daemon_pb2, daemon_pb2_grpc  # noqa: E402


def _stub(port: str) -> tuple[grpc.Channel, daemon_pb2_grpc.DaemonStub]:
    """A stub on a connection of its own (grpc shares one between like channels by default)."""
    channel = grpc.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]
    )
    return channel, daemon_pb2_grpc.DaemonStub(channel)


def _stores(stub: daemon_pb2_grpc.DaemonStub, size: int, seconds: float, tag: str) -> int:
    """Stores sent one after another for ``seconds``; all must succeed."""
    text = "alpha beta gamma delta " * (size // 23)
    sent, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        message = daemon_pb2.QueryRequest(query=f'Store "{text} {sent}" as a user message')
        # A new conversation every 50 stores: the buffer's size stays alike.
        message.metadata.update({"conversation_id": f"bulk-{tag}-{sent // 50}"})
        stub.Query(message, timeout=30)
        sent += 1
    return sent


def _pinger(
    stub: daemon_pb2_grpc.DaemonStub, period: float, on: threading.Event, stop: threading.Event
) -> None:
    while not stop.is_set():
        if on.wait(0.05):
            stub.GetPurpose(daemon_pb2.GetPurposeRequest(), timeout=30)
            time.sleep(period)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=30000, help="characters a store")
    parser.add_argument("--period", type=float, nargs="+", default=[0.05, 0.2])
    parser.add_argument("--blocks", type=int, default=8, help="blocks a side (ABBA order)")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds a block")
    args = parser.parse_args()
    daemon = Daemon()
    port = daemon.channel._channel.target().decode().rsplit(":", 1)[1]
    (heavy_channel, heavy), (ping_channel, ping) = _stub(port), _stub(port)
    try:
        _stores(heavy, args.size, 1.0, "warm")
        for period in args.period:
            on, stop = threading.Event(), threading.Event()
            thread = threading.Thread(target=_pinger, args=(ping, period, on, stop))
            thread.start()
            alone = beside = 0
            try:
                for block in range(2 * args.blocks):
                    pinged = block % 4 in (1, 2)  # A B B A A B B A ...
                    (on.set if pinged else on.clear)()
                    sent = _stores(heavy, args.size, args.seconds, f"{period}-{block}")
                    if pinged:
                        beside += sent
                    else:
                        alone += sent
            finally:
                stop.set()
                thread.join()
            span = args.blocks * args.seconds
            print(
                f"pinger every {period} s: {alone / span:.0f} stores/s alone, "
                f"{beside / span:.0f} beside; ratio {beside / max(alone, 1):.2f}"
            )
    finally:
        heavy_channel.close()
        ping_channel.close()
        daemon.stop()


if __name__ == "__main__":
    main()
