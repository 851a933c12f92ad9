"""chd, the Conversation History Daemon.

Three rings: ``chd.core`` answers queries in plain Python, ``chd.service``
and ``chd.cli`` carry them over gRPC and the command line, ``chd.backends``
stores conversations. See docs/architecture.md.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("chd")
except _metadata.PackageNotFoundError:  # imported from a checkout that is not installed
    __version__ = "0+unknown"
