"""Links between the docs land on a heading, and every README performance figure cites its section.

Issue 30: "every figure quoted in README.md ... cites the doc section that
measured it". A link's anchor is checked the way GitHub makes one from a
heading (lower case, punctuation dropped, spaces to hyphens, -1, -2 ... for
repeats), so a renamed or duplicated heading fails here.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tests.conftest import ROOT

DOCUMENTS = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(((?:docs/)?[\w./-]*\.md)?#([^)\s]+)\)")


def _anchors(path: str) -> set[str]:
    text = re.sub(r"^```.*?^```", "", (ROOT / path).read_text(encoding="utf-8"), flags=re.S | re.M)
    seen: Counter[str] = Counter()
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return anchors


def _target(source: str, linked: str | None) -> str:
    if not linked:
        return source
    if source.startswith("docs/") and not linked.startswith("docs/"):
        return f"docs/{linked}"
    return linked


@pytest.mark.parametrize("path", DOCUMENTS)
def test_every_anchor_a_doc_links_to_is_a_heading_there(path: str) -> None:
    text = (ROOT / path).read_text(encoding="utf-8")
    broken = [
        f"{linked or ''}#{anchor}"
        for linked, anchor in _LINK.findall(text)
        if anchor not in _anchors(_target(path, linked))
    ]
    assert broken == []


def test_every_performance_figure_of_the_readme_cites_a_doc_section() -> None:
    """Each bullet of README "Performance" links docs/<page>.md#<section> (newcomer 32 #11-#16, #24)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Performance\n", 1)[1].split("\n## ", 1)[0]
    bullets = re.split(r"\n\* ", section)[1:]
    assert len(bullets) >= 8
    for bullet in bullets:
        assert re.search(r"\]\(docs/[\w-]+\.md#[\w-]+\)", bullet), bullet[:80]
