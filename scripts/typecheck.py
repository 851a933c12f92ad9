"""Type-check chd with mypy as pyproject's [tool.mypy] says (strict; chd.core and what it imports).

The editable install maps the package ``chd`` onto daemon/ and ``chd.backends``
onto backends/ with an import hook, and mypy never runs import hooks: alone it
answers "Can't find package 'chd.core'". This script lays that mapping out as
a tree of symbolic links (chd/<entry> -> daemon/<entry>, chd/backends ->
backends/), points MYPYPATH at it, and prints mypy's report with the
repository's own paths, so an error names the file to edit.

The tree lives under .mypy_cache (ignored by git), at one fixed place so the
cache mypy keeps there stays valid from one run to the next.

Usage: python scripts/typecheck.py [mypy options]   (exit status: mypy's)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where each top-level entry of the installed package comes from (pyproject's package-dir).
SOURCES = {"chd": ROOT / "daemon", "chd/backends": ROOT / "backends"}


def build_tree(top: Path) -> dict[str, str]:
    """The link tree under ``top``; returns {path prefix in the tree: path in the repository}."""
    package = top / "chd"
    package.mkdir(parents=True, exist_ok=True)
    for old in package.iterdir():  # links only: the tree owns no file of its own
        old.unlink()
    for entry in SOURCES["chd"].iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "backends").symlink_to(SOURCES["chd/backends"])
    # Longest prefix first: chd/backends/ must not be read as chd/ + "backends/".
    return {
        str(top / "chd" / "backends") + os.sep: "backends" + os.sep,
        str(top / "chd") + os.sep: "daemon" + os.sep,
    }


def main(argv: list[str]) -> int:
    top = ROOT / ".mypy_cache" / "chd-layout"
    prefixes = build_tree(top)
    env = dict(os.environ, MYPYPATH=str(top))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    relative = {os.path.relpath(tree, ROOT) + os.sep: repo for tree, repo in prefixes.items()}
    for line in done.stdout.splitlines():
        for tree, repo in [*prefixes.items(), *relative.items()]:
            if line.startswith(tree):
                line = repo + line[len(tree) :]
                break
        print(line)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
