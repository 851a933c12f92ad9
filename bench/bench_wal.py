"""How large the disk backend's WAL gets under a stream of small stores (issue 28, item 6).

Starts a disk-backend `chd serve`, sends --stores stores of --size bytes one
after another over 5 conversations, and prints the sizes of cache.db and
cache.db-wal at points along the way, the largest WAL seen, and both after
the daemon has been idle for 1.5 s.

    python bench/bench_wal.py [--stores 1000] [--size 1024]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_hostile import Daemon  # noqa: E402


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stores", type=int, default=1000)
    parser.add_argument("--size", type=int, default=1024, help="bytes of each utterance")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        db, wal = Path(data) / "cache.db", Path(data) / "cache.db-wal"
        daemon = Daemon("--backend", "disk", "--data-dir", data)
        try:
            largest = 0
            marks = {args.stores * k // 10 for k in range(1, 11)}
            for n in range(1, args.stores + 1):
                text = (f"{n:06d} " * (args.size // 7 + 1))[: args.size]
                daemon.ask(
                    "", {"conversation_id": f"c{n % 5}"}, {"operation": "store", "text": text}, 10
                )
                largest = max(largest, _size(wal))
                if n in marks:
                    print(
                        f"{n:>6} stores ({n * args.size / 1e6:.2f} MB of text): "
                        f"cache.db {_size(db) / 1e6:.2f} MB, WAL {_size(wal) / 1e6:.2f} MB"
                    )
            time.sleep(1.5)
            print(
                f"largest WAL seen {largest / 1e6:.2f} MB; after 1.5 s idle: "
                f"cache.db {_size(db) / 1e6:.2f} MB, WAL {_size(wal) / 1e6:.2f} MB"
            )
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
