"""bench_retention.py --blind on bench/blind_conversations_2, the reported set of issue 26.

Never tuned on: its figures are measured before and after a pass, and its
text and misses are not read (docs/summarization.md).

    python bench/bench_retention_reported.py [--pairs 100/512,500/2048]
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import bench_retention  # noqa: E402

bench_retention.BLIND_DIR = HERE / "blind_conversations_2"
bench_retention.BLIND = sorted(p.stem for p in bench_retention.BLIND_DIR.glob("*.jsonl"))

if __name__ == "__main__":
    sys.argv = ["bench_retention.py", "--blind", *sys.argv[1:]]
    sys.exit(bench_retention.main())
