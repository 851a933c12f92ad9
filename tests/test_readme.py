"""The README's chd sessions print, today, what the README shows (scores included)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ops_support import running

from tests.conftest import ROOT, chd_command, chd_env
from tests.demo_conversation import seed_demo

README = ROOT / "README.md"


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _session(lines: list[str]) -> list[tuple[str, str]]:
    """(command, output) pairs of a console transcript; `# ...` lines are remarks."""
    pairs: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        elif line.startswith("# ") or not pairs:
            continue
        else:
            pairs[-1][1].append(line)
    return [(command, "\n".join(output).strip("\n")) for command, output in pairs]


def _tour() -> list[tuple[str, str]]:
    section = _section("A short tour")
    block = section[
        section.index("```console\n") + len("```console\n") : section.index(
            "\n```", section.index("```console")
        )
    ]
    return _session(block.splitlines())


def _summaries() -> tuple[str, list[tuple[str, str]]]:
    """The flags of the daemon the "Summaries" transcript runs against (its first remark), and the transcript."""
    section = _section("Summaries")
    block = section[
        section.index("```console\n") + len("```console\n") : section.index(
            "\n```", section.index("```console")
        )
    ]
    lines = block.splitlines()
    assert lines[0].startswith("# with chd serve ") and lines[0].endswith(" running:"), lines[0]
    return lines[0][len("# with chd serve ") : -len(" running:")], _session(lines)


def _talking() -> list[tuple[str, str]]:
    indented = [
        line[4:] for line in _section("Talking to chd").splitlines() if line.startswith("    ")
    ]
    return _session(indented)


def _replay(session: list[tuple[str, str]], target: str, tmp_path: Path) -> None:
    # `chd` as the README's reader has it: the installed executable on PATH.
    bin_dir = str(Path(chd_command()[0]).parent) if len(chd_command()) == 1 else None
    env = chd_env() | {"CHD_TARGET": target}
    if bin_dir:
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    for command, shown in session:
        done = subprocess.run(
            ["bash", "-c", command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=30,
            env=env,
            cwd=tmp_path,
        )
        # Trailing spaces are not shown in a README (editors strip them); everything else is compared.
        got = "\n".join(line.rstrip() for line in done.stdout.rstrip("\n").splitlines())
        assert got == shown, command


def test_the_short_tour_prints_what_the_readme_shows(tmp_path: Path):
    """Every command of "A short tour", run in order against a fresh default daemon."""
    session = _tour()
    assert len(session) >= 8 and any("score" in shown for _, shown in session)
    with running() as server:
        _replay(session, f"127.0.0.1:{server.port}", tmp_path)


def test_talking_to_chd_prints_what_the_readme_shows_on_the_demo_conversation(tmp_path: Path):
    """The "Talking to chd" examples on the demo conversation of docs/query-language.md."""
    session = _talking()
    assert len(session) >= 3 and any("score" in shown for _, shown in session)
    with running() as server:
        seed_demo(server.history)
        _replay(session, f"127.0.0.1:{server.port}", tmp_path)


def test_summaries_prints_what_the_readme_shows_from_the_first_utterance(tmp_path: Path):
    """The "Summaries" transcript, every utterance from the first, against a daemon with its flags."""
    flags, session = _summaries()
    assert flags == "--buffer-size 6 --eviction-batch 3 --summary-token-limit 120"
    assert sum(command.startswith('chd query "Add') for command, _ in session) == 7
    with running(buffer_size=6, eviction_batch=3, summary_token_limit=120) as server:
        _replay(session, f"127.0.0.1:{server.port}", tmp_path)
