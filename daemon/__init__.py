"""chd, the Conversation History Daemon.

Three rings: ``chd.core`` answers queries in plain Python, ``chd.service``
and ``chd.cli`` carry them over gRPC and the command line, ``chd.backends``
stores conversations. See docs/architecture.md.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    # ``__version__`` is read on first use: importlib.metadata took 30 ms of
    # every `chd` command's start-up, a tenth of a 1,000-conversation
    # `chd import` (issue 17), and only `chd --version` asks.
    if name == "__version__":
        from importlib import metadata

        try:
            version = metadata.version("chd")
        except metadata.PackageNotFoundError:  # imported from a checkout that is not installed
            version = "0+unknown"
        globals()["__version__"] = version
        return version
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
