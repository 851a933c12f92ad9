"""No module-level name is bound twice in the daemon's code.

A second ``_CONTENT_LABEL = ...`` or ``_REPORTED = ...`` further down a module
silently replaced the first for every function that read it (issue 25's fifth
pass did both, and a blind corpus caught one as a wrong stored text).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ("daemon/v1/",)


def _twice(path: Path) -> list[str]:
    names: Counter[str] = Counter()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] += 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] += 1
    return sorted(n for n, count in names.items() if count > 1 and n != "__all__")


def test_no_module_binds_a_name_twice() -> None:
    found = {
        str(path.relative_to(ROOT)): twice
        for folder in ("daemon", "backends")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if not str(path.relative_to(ROOT)).startswith(GENERATED) and (twice := _twice(path))
    }
    assert found == {}
