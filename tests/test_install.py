"""The built wheel installs beside python-daemon (import name `daemon`) and both keep working.

The wheel is built from a copy of this checkout and installed into a scratch
venv together with python-daemon; the scratch venv sees the test venv's
other dependencies through a .pth line (its directory only: the .pth files
in it, such as the editable chd's finder, are not run), so nothing is
fetched. Every check runs from a directory outside the clone.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

from tests.conftest import ROOT

DAEMON_CHECK = "import daemon; from daemon import DaemonContext; print(daemon.__file__)"


def _run(*args: str | Path, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    # No PYTHONPATH: the checkout must not be importable from the scratch venv.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def _repack_installed(name: str, into: Path) -> Path:
    """A wheel of the installed, pure-Python distribution ``name`` (the test extra brought it; no network)."""
    dist = metadata.distribution(name)
    info = next(f for f in dist.files if f.parent.name.endswith(".dist-info")).parent
    files = [
        f
        for f in dist.files
        if "__pycache__" not in f.parts
        and not str(f).startswith("..")
        and f.name not in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
    ]
    wheel = into / f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}-py3-none-any.whl"
    record = io.StringIO()
    with zipfile.ZipFile(wheel, "w") as archive:
        for file in files:
            archive.write(dist.locate_file(file), str(file))
            csv.writer(record).writerow([str(file), "", ""])
        csv.writer(record).writerow([f"{info}/RECORD", "", ""])
        archive.writestr(f"{info}/RECORD", record.getvalue())
    return wheel


@dataclass(frozen=True)
class Built:
    chd: Path
    python_daemon: Path
    outside: Path  # a directory outside the clone to run from


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """chd's wheel, built as `pip wheel` builds it from a fresh copy of the checkout."""
    base = tmp_path_factory.mktemp("install")
    source = base / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "build",
            "dist",
            "*.egg-info",
            "__pycache__",
            ".pytest_cache",
            ".hypothesis",
        ),
    )
    wheels = base / "wheels"
    done = _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-w",
        wheels,
        source,
        cwd=base,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (chd_wheel,) = wheels.glob("chd-*.whl")
    outside = base / "elsewhere"
    outside.mkdir()
    return Built(chd_wheel, _repack_installed("python-daemon", wheels), outside)


@dataclass(frozen=True)
class Venv:
    root: Path
    cwd: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def run(self, *args: str | Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return _run(*args, cwd=self.cwd, timeout=timeout)

    def pip(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return self.run(sys.executable, "-m", "pip", "--python", self.python, *args)


def _scratch_venv(built: Built, where: Path) -> Venv:
    """python-daemon installed first, then chd, as a user would; the test venv's dependencies visible."""
    venv = Venv(where, built.outside)
    assert venv.run(sys.executable, "-m", "venv", "--without-pip", where).returncode == 0
    # One pip run (each costs seconds), installing in the order given.
    done = venv.pip(
        "install", "--no-deps", "--no-index", "--no-compile", built.python_daemon, built.chd
    )
    assert done.returncode == 0, done.stderr
    # Written after the installs, so pip never saw the test venv's editable chd.
    site = Path(
        venv.run(
            venv.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        ).stdout.strip()
    )
    (site / "test-venv-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.fixture(scope="module")
def venv(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return _scratch_venv(built, tmp_path_factory.mktemp("venv") / "venv")


class TestWheel:
    """What the wheel holds."""

    def test_the_wheel_holds_only_chd_and_its_dist_info(self, built: Built):
        """`pip install .` puts `chd/` and `chd-*.dist-info/` into site-packages, nothing else."""
        with zipfile.ZipFile(built.chd) as wheel:
            tops = {name.split("/", 1)[0] for name in wheel.namelist()}
        version = built.chd.name.split("-")[1]
        assert tops == {"chd", f"chd-{version}.dist-info"}
        assert version == metadata.version("chd")


class TestBesidePythonDaemon:
    """chd installed after python-daemon: both import, and chd serves, from outside the clone."""

    def test_python_daemon_still_imports_its_daemon_context(self, venv: Venv):
        """`import daemon` is python-daemon's package in the scratch venv, DaemonContext and all."""
        done = venv.run(venv.python, "-c", DAEMON_CHECK)
        assert done.returncode == 0, done.stderr
        assert Path(done.stdout.strip()).parts[-2:] == ("daemon", "__init__.py")
        assert str(venv.root) in done.stdout

    def test_chd_is_imported_from_the_wheel_not_the_checkout(self, venv: Venv):
        """`import chd` finds the installed package, whatever the clone holds."""
        done = venv.run(venv.python, "-c", "import chd, chd.core.history; print(chd.__file__)")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().startswith(str(venv.root))
        assert str(ROOT) not in done.stdout

    def test_chd_version_prints_the_version_from_the_package_metadata(
        self, venv: Venv, built: Built
    ):
        """The installed `chd --version` says the wheel's version."""
        done = venv.run(venv.root / "bin" / "chd", "--version")
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"chd {built.chd.name.split('-')[1]}\n"

    def test_the_client_library_and_the_mcp_server_come_with_the_wheel(self, venv: Venv):
        """`chd.client` and `chd.mcp` import from the installed package, and `chd mcp` is a command there."""
        done = venv.run(
            venv.python, "-c", "import chd.client, chd.mcp.tools; print(chd.client.__file__)"
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().startswith(str(venv.root))
        helped = venv.run(venv.root / "bin" / "chd", "mcp", "--help")
        assert helped.returncode == 0, helped.stderr
        assert "--http HOST:PORT" in helped.stdout

    def test_chd_serve_answers_a_query_and_stops(self, venv: Venv):
        """The installed `chd serve` stores through the installed `chd query`, and SIGTERM stops it with 0."""
        chd = venv.root / "bin" / "chd"
        server = subprocess.Popen(
            [chd, "serve", "--port", "0"],
            cwd=venv.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert server.stdout is not None
            listening = re.search(r"listening on (\S+)$", server.stdout.readline().strip())
            assert listening, "chd serve did not start"
            done = venv.run(
                chd,
                "query",
                "Add utterance: installed from the wheel",
                "--target",
                listening.group(1),
                "--json",
                timeout=30,
            )
            assert done.returncode == 0, done.stderr
            assert '"text": "installed from the wheel"' in done.stdout
        finally:
            server.terminate()
            assert server.wait(timeout=15) == 0
            server.stdout.close()


def test_uninstalling_chd_leaves_python_daemon_importable(built: Built, tmp_path: Path):
    """`pip uninstall chd` removes chd only: `from daemon import DaemonContext` still works."""
    venv = _scratch_venv(built, tmp_path / "venv")
    done = venv.pip("uninstall", "--yes", "chd")
    assert done.returncode == 0, done.stderr
    assert venv.run(venv.python, "-c", DAEMON_CHECK).returncode == 0
    gone = venv.run(venv.python, "-c", "import chd")
    assert gone.returncode == 1 and "No module named 'chd'" in gone.stderr
