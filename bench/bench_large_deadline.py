"""How long a large store takes to be answered under a short request_timeout (issue 28, item 4).

Starts a disk-backend `chd serve` with request_timeout 2 s and sends stores
of growing size (up to max_request_bytes), printing each round trip and its
status. A daemon that honours the timeout answers every one within about
2 s, with OK or DEADLINE_EXCEEDED.

    python bench/bench_large_deadline.py [--timeout 2] [--sizes 1,4,16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_hostile import Daemon  # noqa: E402

from chd.v1 import daemon_pb2  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--timeout", type=float, default=2.0, help="request_timeout, seconds")
    parser.add_argument("--sizes", default="1,4,16", help="MiB of each store, comma-separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        daemon = Daemon(
            "--backend",
            "disk",
            "--data-dir",
            data,
            "--request-timeout",
            str(args.timeout),
            "--max-utterance-chars",
            str(32 << 20),
        )
        try:
            for mib in (float(size) for size in args.sizes.split(",")):
                text = "word " * int(mib * (1 << 20) / 5)
                message = daemon_pb2.QueryRequest()
                message.data.update({"operation": "store", "text": text})
                began = time.perf_counter()
                try:
                    daemon.stub.Query(message, timeout=60)
                    status = "OK"
                except grpc.RpcError as error:
                    status = f"{error.code().name}: {(error.details() or '')[:90]}"
                print(
                    f"{mib:g} MiB store, request_timeout {args.timeout:g} s: "
                    f"answered in {time.perf_counter() - began:.2f} s, {status}"
                )
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
