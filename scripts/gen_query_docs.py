"""Rewrite docs/query-language.md from daemon/core/language/guide.py (run from the repository root).

python scripts/gen_query_docs.py          # write the document
python scripts/gen_query_docs.py --check  # exit 1 if it is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chd.core.language.instructions import render_markdown  # noqa: E402

DOC = ROOT / "docs" / "query-language.md"


def main(argv: list[str]) -> int:
    text = render_markdown()
    if "--check" in argv:
        if DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is out of date; run python scripts/gen_query_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
