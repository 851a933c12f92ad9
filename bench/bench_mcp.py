"""``chd mcp`` round trips as an MCP host sees them: ``remember`` and ``recall`` over stdio and HTTP.

    python bench/bench_mcp.py [--requests 500] [--rounds 5] [--transports stdio,http]

Each round starts a fresh ``chd mcp`` subprocess (memory backend, a buffer
big enough that no store evicts) and drives it with the MCP SDK's own
client: ``--requests`` ``remember`` calls one after another, then as many
``recall`` calls (the newest 10). Latency is per tool call, from the
client's send to its parsed result. Reported: the median over rounds of each
round's p50 and p90 (target for remember over stdio: p50 <= 3 ms, issue 29).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcp import Client, StdioServerParameters  # noqa: E402
from percentiles import percentile  # noqa: E402  (bench/ is on sys.path when run as a script)

ROOMY = [
    "--buffer-size",
    "100000",
    "--max-tokens",
    "100000000",
    "--max-utterances-per-conversation",
    "100000",
    "--log-level",
    "WARNING",
]


async def _drive(server: Any, requests: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"remember": [], "recall": []}
    async with Client(server) as client:
        for i in range(50):  # warm up: imports, the token table, the first folds of nothing
            await client.call_tool("remember", {"text": f"warm {i}", "conversation_id": "warm"})
        for i in range(requests):
            start = time.perf_counter()
            result = await client.call_tool(
                "remember",
                {"text": f"utterance number {i} of the bench", "conversation_id": "bench"},
            )
            times["remember"].append(time.perf_counter() - start)
            assert not result.is_error
        for _ in range(requests):
            start = time.perf_counter()
            await client.call_tool("recall", {"conversation_id": "bench"})
            times["recall"].append(time.perf_counter() - start)
    return times


def _stdio(requests: int) -> dict[str, list[float]]:
    chd = str(Path(sys.executable).parent / "chd")
    return asyncio.run(_drive(StdioServerParameters(command=chd, args=["mcp", *ROOMY]), requests))


def _http(requests: int) -> dict[str, list[float]]:
    chd = str(Path(sys.executable).parent / "chd")
    proc = subprocess.Popen(
        [chd, "mcp", "--http", "127.0.0.1:0", *ROOMY],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        match = re.search(r"listening on (\S+)", proc.stdout.readline())
        if not match:
            raise SystemExit("chd mcp --http did not start")
        return asyncio.run(_drive(match.group(1), requests))
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--transports", default="stdio,http", help="comma-separated: stdio, http")
    args = parser.parse_args()
    chosen = [
        (name, run)
        for name, run in (("stdio", _stdio), ("http", _http))
        if name in args.transports.split(",")
    ]
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in range(args.rounds):
        for transport, run in chosen:
            for tool, times in run(args.requests).items():
                p50, p90 = percentile(times, 0.5) * 1e3, percentile(times, 0.9) * 1e3
                rows.setdefault((transport, tool), []).append((p50, p90))
                print(
                    f"round {r + 1} {transport:5} {tool:8} p50 {p50:.2f} ms  p90 {p90:.2f} ms",
                    flush=True,
                )
    print(f"\nmedian of {args.rounds} rounds of {args.requests} calls:")
    for (transport, tool), values in rows.items():
        p50 = statistics.median(v[0] for v in values)
        p90 = statistics.median(v[1] for v in values)
        print(f"  {transport:5} {tool:8} p50 {p50:.2f} ms  p90 {p90:.2f} ms")


if __name__ == "__main__":
    main()
