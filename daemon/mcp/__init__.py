"""``chd mcp``: chd's memory as Model Context Protocol tools and resources.

A transport like the gRPC service: ``tools.build_server`` turns each tool
into one Daemon Interface query to an ``Answerer`` (the core in this
process, or a running daemon over gRPC); ``serve`` runs it over stdio or
Streamable HTTP. See docs/mcp.md.
"""

from __future__ import annotations

from chd.mcp.answerer import Answerer, LocalAnswerer, Refused, RemoteAnswerer
from chd.mcp.tools import build_server

__all__ = ["build_server", "Answerer", "LocalAnswerer", "RemoteAnswerer", "Refused"]
