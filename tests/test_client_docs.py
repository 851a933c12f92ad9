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
    """Every line, numbers included: a fresh daemon, one conversation, nothing on the page varies.

    (Until newcomer pass 32 every number was compared as N, so a score that
    moved with the ranking went unseen.)
    """
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
    assert done.stdout == _blocks("text")[0]
