"""The ``chd`` options and commands about storage: backend flags, export, import.

    chd serve --backend disk --data-dir DIR [--durability normal|full]
    chd export [--conversation ID ...] [--output FILE] --data-dir DIR
    chd import [FILE] [--replace] --data-dir DIR

``export`` and ``import`` open the backend's storage directly, not the
daemon over gRPC: the Query interface has no operation that returns the
summary queue, the summary's segments or the next seq, and an import through
``store`` would give every utterance a new seq and timestamp. A disk data
dir may be exported from or imported into while a daemon serves it (SQLite
transactions keep both consistent; the daemon sees the change on its next
call). The memory backend lives inside its daemon process, so it can only
be exported in-process (``backends.transfer.export_lines``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from contextlib import nullcontext
from typing import Any, TextIO

from chd.backends import ALIASES, Backend, open_backend
from chd.backends.disk import DURABILITY
from chd.core.transfer import export_lines, import_states, parse_lines
from chd.core.errors import DaemonError

__all__ = [
    "add_backend_arguments",
    "add_transfer_commands",
    "open_backend_from_args",
    "open_storage",
    "run_transfer",
    "TRANSFER_COMMANDS",
]

log = logging.getLogger(__name__)

TRANSFER_COMMANDS = ("export", "import")
EXIT_FAILED = 1


def _durability_refused(value: str | None) -> bool:
    # Checked when a transfer runs, not when the parser is built: every chd
    # command builds it, and `chd query` must not fail on a storage variable
    # (`chd serve` checks its own through the config table).
    if value is not None and value not in DURABILITY:
        print(f"chd: CHD_DURABILITY must be one of {', '.join(DURABILITY)}, got {value!r}", file=sys.stderr)
        return True
    return False


def add_backend_arguments(parser: argparse.ArgumentParser, *, serving: bool) -> None:
    """``--backend``, ``--data-dir`` and ``--durability``, defaulting to CHD_* variables.

    A daemon defaults to the memory backend and NORMAL durability. The
    transfer tools default to the disk backend and leave the data dir's
    durability as its daemon set it. A custom backend receives ``data_dir``
    and ``durability`` only when they were given.
    """
    backend_default = os.environ.get("CHD_BACKEND", "memory" if serving else "disk")
    parser.add_argument(
        "--backend",
        default=backend_default,
        help=f"memory, disk, or module:Class for a custom backend (CHD_BACKEND, default {backend_default})",
    )
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("CHD_DATA_DIR"),
        help="directory of the disk backend, created if missing (CHD_DATA_DIR)",
    )
    # None when not given, so a custom backend only receives what the user set.
    parser.add_argument(
        "--durability",
        choices=tuple(DURABILITY),
        default=os.environ.get("CHD_DURABILITY"),
        help="disk backend: normal survives a crash of chd, full also an OS crash or power loss "
        f"(CHD_DURABILITY, default {'normal' if serving else 'as the data dir was last served'})",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("CHD_REDIS_URL"),
        help="redis backend: redis://[:PASSWORD@]HOST:PORT/DB or rediss:// (CHD_REDIS_URL; "
        "CHD_REDIS_PASSWORD when the URL has none)",
    )
    parser.add_argument(
        "--redis-cluster", action=argparse.BooleanOptionalAction, default=None,
        help="redis backend: the URL names a Redis Cluster (default: asked of the server)",
    )
    parser.set_defaults(serving=serving)


def open_backend_from_args(args: argparse.Namespace) -> Backend | None:
    """The backend the transfer flags name, or None after printing one line saying why not."""
    redis = {"redis_url": args.redis_url, "redis_cluster": args.redis_cluster,
             "redis_password": os.environ.get("CHD_REDIS_PASSWORD")}
    return open_storage(args.backend, args.data_dir, args.durability, serving=args.serving,
                        **(redis if ALIASES.get(args.backend, args.backend) == "redis" else {}))


def open_storage(
    backend: str, data_dir: str | None, durability: str | None, *, serving: bool, **extra: Any
) -> Backend | None:
    """The named backend, or None after printing one line saying why not.

    A daemon (``serving``) sets a disk data dir's durability (normal unless
    given); the transfer tools keep what the dir's daemon set.
    """
    name = ALIASES.get(backend, backend)
    options = {"data_dir": data_dir, "durability": durability, **extra}  # extra: the redis backend's
    if name == "disk" and serving and durability is None:
        # A daemon sets the directory's durability; the tools keep it.
        options["durability"] = "normal"
    if name == "memory":
        del options["durability"]  # nothing to make durable
    try:
        backend = open_backend(name, **options)
    except DaemonError as exc:
        print(f"chd: {exc}", file=sys.stderr)
    except Exception as exc:  # a custom backend's constructor may raise anything
        print(f"chd: cannot open backend {backend!r}: {type(exc).__name__}: {exc}", file=sys.stderr)
    else:
        shown = options.get("durability") or "as stored"
        where = f" in {data_dir} (durability {shown})" if data_dir else ""
        log.info("storage: %s backend%s", name, where)
        return backend
    return None


def add_transfer_commands(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser("export", help="write conversations as JSON Lines")
    export.add_argument(
        "--conversation", "-c", action="append", dest="conversations", metavar="ID",
        help="conversation to export (repeatable; default: all)",
    )
    export.add_argument("--output", "-o", default="-", help="file to write (default: stdout)")
    add_backend_arguments(export, serving=False)

    imp = commands.add_parser("import", help="read conversations from JSON Lines")
    imp.add_argument("file", nargs="?", default="-", help="file to read (default: stdin)")
    imp.add_argument("--replace", action="store_true", help="overwrite conversations that already hold data")
    add_backend_arguments(imp, serving=False)


def run_transfer(args: argparse.Namespace) -> int:
    if ALIASES.get(args.backend, args.backend) == "memory":
        print(
            "chd: the memory backend lives inside its daemon; export and import work on "
            "--backend disk (or a custom backend)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if _durability_refused(args.durability):
        return EXIT_FAILED
    if (
        args.command == "export"
        and ALIASES.get(args.backend, args.backend) == "disk"
        and args.data_dir is not None
        and not os.path.isdir(os.path.expanduser(args.data_dir))
    ):
        # Opening would create an empty data dir: a mistyped path must not
        # become an empty backup that reports success.
        print(f"chd: there is no data dir at {args.data_dir}; nothing to export", file=sys.stderr)
        return EXIT_FAILED
    backend = open_backend_from_args(args)
    if backend is None:
        return EXIT_FAILED
    try:
        if args.command == "export":
            return _export(backend, args)
        return _import(backend, args)
    except DaemonError as exc:
        print(f"chd: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        backend.close()


def _export(backend: Backend, args: argparse.Namespace) -> int:
    ids = args.conversations or backend.conversations()
    for conversation_id in ids:
        if backend.read(conversation_id).is_empty:
            print(f"chd: conversation {conversation_id!r} holds nothing to export", file=sys.stderr)
            return EXIT_FAILED
    if args.output == "-":
        for line in export_lines(backend, ids):
            sys.stdout.write(line + "\n")
    else:
        # Written aside and renamed, so a failed export never leaves half a backup.
        partial = f"{args.output}.partial"
        with _open(partial, "w") as out:
            for line in export_lines(backend, ids):
                out.write(line + "\n")
        os.replace(partial, args.output)
    print(f"exported {len(ids)} conversation(s)", file=sys.stderr)
    return 0


def _import(backend: Backend, args: argparse.Namespace) -> int:
    with _open(args.file, "r") as source:
        states = parse_lines(source)
    for state in import_states(backend, states, replace=args.replace):
        print(
            f"imported {state.conversation_id}: {len(state.utterances)} in the buffer, "
            f"{len(state.pending)} queued for the summary, {len(state.archive)} archived, "
            f"summary through #{state.summary.through_seq}",
            file=sys.stderr,
        )
    return 0


def _open(path: str, mode: str) -> TextIO:
    if path == "-":
        return nullcontext(sys.stdin)  # type: ignore[return-value]
    try:
        return open(path, mode, encoding="utf-8")
    except OSError as exc:
        raise _FileError(f"cannot open {path}: {exc.strerror}") from None


class _FileError(DaemonError):
    """An export or import file cannot be opened."""
