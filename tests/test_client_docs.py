"""The example in docs/client.md runs against a real ``chd serve`` and prints what the page shows."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT, DaemonProcess, chd_env

DOC = ROOT / "docs" / "client.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_documented_example_prints_what_the_page_shows() -> None:
    """Scores and token counts may move with the ranking and the tokenizer; the rest must match exactly."""
    daemon = DaemonProcess()
    try:
        env = chd_env() | {"CHD_TARGET": daemon.target}
        done = subprocess.run(
            [sys.executable, "-c", _blocks("python")[0]],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=ROOT,
        )
    finally:
        daemon.kill()
    assert done.returncode == 0, done.stderr
    shown = _blocks("text")[0].splitlines()
    printed = done.stdout.splitlines()
    assert len(printed) == len(shown), done.stdout
    for got, expected in zip(printed, shown):
        assert _shape(got) == _shape(expected), (got, expected)
    assert printed[0] == shown[0] and printed[-1] == shown[-1]


def _shape(line: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "N", line)
