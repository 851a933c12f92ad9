"""The committed stubs in daemon/v1 (chd.v1) are exactly what the .proto generates."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestGeneratedStubs:
    """Generated code is reproducible from protos/ and nobody edits it by hand."""

    def test_committed_stubs_match_the_proto(self, tmp_path: Path) -> None:
        """Regenerating into a scratch dir gives byte-identical files."""
        pytest.importorskip("grpc_tools")
        generated = _generator().generate(tmp_path)
        assert generated, "the generator wrote nothing"
        for path in generated:
            committed = ROOT / path.relative_to(tmp_path)
            assert committed.exists(), f"{committed} is missing; run python scripts/gen_protos.py"
            assert committed.read_bytes() == path.read_bytes(), (
                f"{committed.relative_to(ROOT)} differs from the .proto; run python scripts/gen_protos.py"
            )

    def test_contract_has_the_three_rpcs(self) -> None:
        """The service exposes Query, GetPurpose and GetInstructions in package daemon.v1."""
        from chd.v1 import daemon_pb2

        service = daemon_pb2.DESCRIPTOR.services_by_name["Daemon"]
        assert service.full_name == "daemon.v1.Daemon"
        assert sorted(m.name for m in service.methods) == ["GetInstructions", "GetPurpose", "Query"]
        request = daemon_pb2.QueryRequest.DESCRIPTOR
        assert [(f.name, f.number) for f in request.fields] == [
            ("query", 1),
            ("metadata", 2),
            ("data", 3),
        ]
        response = daemon_pb2.QueryResponse.DESCRIPTOR
        assert [(f.name, f.number) for f in response.fields] == [
            ("operation", 1),
            ("result", 2),
            ("metadata", 3),
        ]
        assert sys.modules["chd.v1.daemon_pb2"] is daemon_pb2
