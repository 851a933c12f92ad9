"""The query language's worst per-character cost on adversarial shapes (issue 14).

    python bench/bench_parse.py [--sizes 1000,100000,1000000] [--rules-size 2000]

For each shape of tests/parser_shapes.py (runs of spaces, punctuation,
number words, speaker words, nested quotes, control characters, the issue's
reproductions) and each size, times ``parse`` (what a request costs: the
store grammar, the instruction cap, the rules, the closest-form
suggestions) and prints us/char and that cost as a ratio to a normal query
measured in the same run. A second table times each operation's rules on
their own, without the parser's cap, at --rules-size characters: that is
the most grammar work one request can cause. The worst of each is printed
last. Targets: a 1 MB query answered or refused well under a second; no
shape much costlier per character than a normal query.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chd.core.language.parser import MAX_INSTRUCTION_CHARS  # noqa: E402
from tests.parser_shapes import NORMAL_QUERY, RULES, SHAPES, best_seconds, build, parse_uncached  # noqa: E402


def main(argv: list[str]) -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args.add_argument("--sizes", default="1000,100000,1000000")
    args.add_argument("--rules-size", type=int, default=MAX_INSTRUCTION_CHARS)
    args.add_argument("--repeats", type=int, default=3)
    opts = args.parse_args(argv)
    sizes = [int(s) for s in opts.sizes.split(",")]

    for call in (parse_uncached, *RULES.values()):
        best_seconds(call, NORMAL_QUERY, 3)  # compile every pattern first
    normal = best_seconds(parse_uncached, NORMAL_QUERY, 50) / len(NORMAL_QUERY)
    print(f"normal query ({len(NORMAL_QUERY)} chars): {normal * 1e6:.3f} us/char through parse")
    print()
    print("parse: us/char (ratio to the normal query), slowest call")
    print(f"{'shape':24}" + "".join(f"{size:>22,}" for size in sizes))
    worst: tuple[float, str, int, float] = (0.0, "", 0, 0.0)
    for shape in SHAPES:
        cells = []
        for size in sizes:
            text = build(shape, size)
            took = best_seconds(parse_uncached, text, opts.repeats if size < 500_000 else 1)
            per_char = took / len(text)
            cells.append(f"{per_char * 1e6:9.3f} ({per_char / normal:6.2f}x)")
            if size == max(sizes) and took > worst[3]:
                worst = (per_char, shape, len(text), took)
        print(f"{shape:24}" + "".join(f"{c:>22}" for c in cells))
    print()
    print(f"rules alone at {opts.rules_size:,} chars, no cap: us/char (ratio to the normal query)")
    print(f"{'shape':24}" + "".join(f"{name:>15}" for name in RULES))
    worst_rule: tuple[float, str, str] = (0.0, "", "")
    for shape in SHAPES:
        text = build(shape, opts.rules_size)
        cells = []
        for name, call in RULES.items():
            per_char = best_seconds(call, text, opts.repeats) / len(text)
            cells.append(f"{per_char * 1e6:7.2f} {per_char / normal:5.1f}x")
            worst_rule = max(worst_rule, (per_char, shape, name))
        print(f"{shape:24}" + "".join(f"{c:>15}" for c in cells))
    print()
    per_char, shape, size, took = worst
    print(
        f"worst through parse at {size:,} chars: {shape}, {took * 1e3:.2f} ms "
        f"({per_char * 1e6:.4f} us/char, {per_char / normal:.2f}x a normal query's per-char cost)"
    )
    per_char, shape, name = worst_rule
    print(
        f"worst rules alone at {opts.rules_size:,} chars: {name} on {shape}, "
        f"{per_char * opts.rules_size * 1e3:.2f} ms ({per_char * 1e6:.3f} us/char, {per_char / normal:.1f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
