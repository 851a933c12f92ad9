"""Regenerate the Python stubs in daemon/v1/ (installed as chd.v1) from protos/.

Run from anywhere: ``python scripts/gen_protos.py``. The generator is the
grpcio-tools version pinned in pyproject.toml; another version writes other
bytes, and tests/test_protos.py fails on any drift.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"


def generate(out_dir: Path) -> list[Path]:
    """Write daemon/v1/daemon_pb2{,_grpc}.py(i) under ``out_dir``; return their paths."""
    well_known = resources.files("grpc_tools") / "_proto"
    sources = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTOS}",
            f"-I{well_known}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            *sources,
        ]
    )
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    generated = sorted(p for p in (out_dir / "daemon" / "v1").iterdir() if p.is_file())
    for path in generated:
        _into_chd(path)
    return generated


def _into_chd(path: Path) -> None:
    """Make a stub import its sibling as ``chd.v1``, the package daemon/ installs as.

    protoc names Python modules after the .proto's path (daemon/v1/), and the
    file keeps that path so reflection and the wire contract do not change.
    """
    text = path.read_text()
    text = text.replace("from daemon.v1 import ", "from chd.v1 import ")
    text = text.replace("'daemon.v1.daemon_pb2'", "'chd.v1.daemon_pb2'")
    path.write_text(text)


if __name__ == "__main__":
    for path in generate(ROOT):
        print(path.relative_to(ROOT))
    sys.exit(0)
