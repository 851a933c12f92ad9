"""What chd.client adds to a store: ``Client.store`` against a raw stub call, on one ``chd serve``.

    python bench/bench_client.py [--requests 1000] [--rounds 9]

One ``chd serve`` process on 127.0.0.1 (memory backend, a buffer big enough
that no store evicts). Each round sends ``--requests`` stores one after
another with a raw ``DaemonStub.Query`` (a QueryRequest with the same
metadata and data ``Client.store`` builds, the response left undecoded) and
``--requests`` with ``Client.store`` (which also decodes the response into a
``Stored``), in alternating order, each to a conversation of its own. The
ratio of the two medians is taken per round; reported: the median of those
ratios and its lowest and highest round (target: <= 1.10, issue 29).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chd.client import Client  # noqa: E402
from chd.v1 import daemon_pb2, daemon_pb2_grpc  # noqa: E402

SERVE = [
    "serve",
    "--port",
    "0",
    "--buffer-size",
    "100000",
    "--max-tokens",
    "100000000",
    "--max-utterances-per-conversation",
    "100000",
]


def _start() -> tuple[subprocess.Popen[str], str]:
    chd = Path(sys.executable).parent / "chd"
    proc = subprocess.Popen(
        [str(chd), *SERVE, "--log-level", "WARNING"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    match = re.search(r"listening on (\S+)", proc.stdout.readline())
    if not match:
        proc.kill()
        raise SystemExit("chd serve did not start")
    return proc, match.group(1)


def _raw(stub: daemon_pb2_grpc.DaemonStub, conversation: str, n: int) -> list[float]:
    times = []
    for i in range(n):
        start = time.perf_counter()
        request = daemon_pb2.QueryRequest(query="")
        request.metadata.update({"conversation_id": conversation, "speaker": "user"})
        request.data.update({"operation": "store", "text": f"utterance number {i} of the bench"})
        stub.Query(request, timeout=10)
        times.append(time.perf_counter() - start)
    return times


def _client(client: Client, conversation: str, n: int) -> list[float]:
    times = []
    for i in range(n):
        start = time.perf_counter()
        client.store(f"utterance number {i} of the bench", conversation=conversation)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    proc, target = _start()
    try:
        with grpc.insecure_channel(target) as channel, Client(target) as client:
            stub = daemon_pb2_grpc.DaemonStub(channel)
            _raw(stub, "warm-raw", 200)
            _client(client, "warm-client", 200)
            ratios, raws, clients = [], [], []
            for r in range(args.rounds):
                order = [
                    ("raw", lambda c: _raw(stub, c, args.requests)),
                    ("client", lambda c: _client(client, c, args.requests)),
                ]
                if r % 2:
                    order.reverse()
                medians = {name: statistics.median(run(f"{name}-{r}")) for name, run in order}
                raws.append(medians["raw"])
                clients.append(medians["client"])
                ratios.append(medians["client"] / medians["raw"])
                print(
                    f"round {r + 1}: raw {medians['raw'] * 1e6:.0f} us, client {medians['client'] * 1e6:.0f} us, "
                    f"ratio {ratios[-1]:.3f}",
                    flush=True,
                )
    finally:
        proc.terminate()
        proc.wait(10)
    print(
        f"store p50: raw stub {statistics.median(raws) * 1e6:.0f} us, chd.client {statistics.median(clients) * 1e6:.0f} us"
    )
    print(
        f"Client.store / raw stub: median {statistics.median(ratios):.3f} "
        f"(rounds {min(ratios):.3f}-{max(ratios):.3f}, {args.rounds} rounds of {args.requests}); target <= 1.10"
    )


if __name__ == "__main__":
    main()
