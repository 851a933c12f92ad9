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
be exported in-process (``chd.core.transfer.export_lines``).
"""

from __future__ import annotations

import argparse
import gc
import io
import logging
import marshal
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from chd.backends import ALIASES, Backend, open_backend
from chd.backends.base import count_conversations, iter_conversations
from chd.backends.encoded import EncodedConversation
from chd.core.errors import DaemonError, EmptiedDatabase, InvalidRequest
from chd.core.transfer import ImportCounts, export_text, import_encoded, read_export
from chd.core.utterance import Summary
from chd.service import config

__all__ = [
    "add_transfer_commands",
    "open_storage",
    "run_transfer",
    "STORAGE_KEYS",
    "TRANSFER_COMMANDS",
]

log = logging.getLogger(__name__)

TRANSFER_COMMANDS = ("export", "import")
# The configuration keys the transfer tools share with `chd serve`: same
# flags, same CHD_* variables, same checks (chd.service.config).
STORAGE_KEYS = (
    "backend",
    "data_dir",
    "durability",
    "redis_url",
    "redis_password",
    "redis_cluster",
    "redis_tls_ca",
)
# A transfer works on storage outside a daemon: a data dir, so disk by default.
TRANSFER_DEFAULTS = {"backend": "disk"}
EXIT_FAILED = 1
EXIT_USAGE = 2


def _add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    """``--backend``, ``--data-dir`` and ``--durability``: the serve keys, with the transfer's defaults."""
    parser.add_argument(
        "--backend",
        metavar="BACKEND",
        default=argparse.SUPPRESS,
        help="disk (default), redis (with --redis-url, CHD_REDIS_URL) or module:Class for a custom backend "
        "(CHD_BACKEND); not memory, whose conversations live inside its daemon",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="the disk backend's directory, as given to `chd serve --data-dir` (CHD_DATA_DIR)",
    )
    parser.add_argument(
        "--durability",
        metavar="{normal,full}",
        default=argparse.SUPPRESS,
        help="disk backend: normal or full (CHD_DURABILITY; default: as the data dir was last served)",
    )
    parser.add_argument(
        "--redis-url",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="redis backend: redis://[:PASSWORD@]HOST:PORT/DB or rediss:// (CHD_REDIS_URL; "
        "CHD_REDIS_PASSWORD when the URL has none)",
    )
    parser.add_argument(
        "--redis-cluster",
        action=argparse.BooleanOptionalAction,
        default=argparse.SUPPRESS,
        help="redis backend: the URL names a Redis Cluster (CHD_REDIS_CLUSTER; default: asked of the server)",
    )
    parser.add_argument(
        "--redis-tls-ca",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="redis backend: the CA that signed the server's certificate, for rediss:// (CHD_REDIS_TLS_CA)",
    )


def _storage_config(args: argparse.Namespace) -> config.Config:
    flags = {name: getattr(args, name) for name in STORAGE_KEYS if hasattr(args, name)}
    return config.load_keys(STORAGE_KEYS, flags, os.environ, TRANSFER_DEFAULTS)


def open_storage(
    backend: str, data_dir: str | None, durability: str | None, *, serving: bool, **extra: Any
) -> Backend | None:
    """The named backend, or None after printing one line saying why not.

    A daemon (``serving``) sets a disk data dir's durability (normal unless
    given); the transfer tools keep what the dir's daemon set.
    """
    name = ALIASES.get(backend, backend)
    options = {
        "data_dir": data_dir,
        "durability": durability,
        **extra,
    }  # extra: the redis backend's
    if name == "disk" and serving and durability is None:
        # A daemon sets the directory's durability; the tools keep it.
        options["durability"] = "normal"
    if name == "memory":
        del options["durability"]  # nothing to make durable
    try:
        backend = open_backend(name, **options)
    except EmptiedDatabase as exc:
        if serving:
            print(f"chd: {exc}", file=sys.stderr)
        else:  # the advice names chd serve's flag: say that the tools do not take it
            print(
                f"chd: {exc.what}; restore cache.db from a backup (chd export and chd import do not take "
                "--allow-empty-database: to begin with no conversations, start chd serve once with it)",
                file=sys.stderr,
            )
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


_TRANSFER_NOTE = """\
export and import open a backend's storage directly, not the daemon: a disk
data dir (even while a daemon serves it), a Redis (even while replicas serve
it) or a custom module:Class backend.
The memory backend's conversations live inside its daemon process, so they
cannot be exported from outside it.
"""


def add_transfer_commands(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser(
        "export",
        help="write conversations of a backend (disk, redis or module:Class) as JSON Lines",
        description="Write conversations as JSON Lines: seqs, turns, summaries and queues kept.",
        epilog=_TRANSFER_NOTE
        + "\nexample:\n  chd export --data-dir ./chd-data --output backup.jsonl",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    export.add_argument(
        "--conversation",
        "-c",
        action="append",
        dest="conversations",
        metavar="ID",
        help="conversation to export (repeatable; default: all)",
    )
    export.add_argument("--output", "-o", default="-", help="file to write (default: stdout)")
    _add_storage_arguments(export)

    imp = commands.add_parser(
        "import",
        help="read conversations from JSON Lines into a backend (disk, redis or module:Class)",
        description="Read conversations written by `chd export`; a failed import changes nothing.",
        epilog=_TRANSFER_NOTE + "\nexample:\n  chd import backup.jsonl --data-dir ./restored",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    imp.add_argument("file", nargs="?", default="-", help="file to read (default: stdin)")
    imp.add_argument(
        "--replace", action="store_true", help="overwrite conversations that already hold data"
    )
    _add_storage_arguments(imp)


def run_transfer(args: argparse.Namespace) -> int:
    try:
        storage = _storage_config(args)
    except config.ConfigError as exc:
        print(f"chd: {exc}", file=sys.stderr)
        return EXIT_USAGE
    name = ALIASES.get(storage.backend, storage.backend)
    if name == "memory":
        print(
            "chd: the memory backend lives inside its daemon; export and import work on "
            "--backend disk, --backend redis (or a custom backend)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    data_dir = storage.data_dir
    fresh_dir = None
    if name == "disk" and data_dir is not None and not os.path.isdir(os.path.expanduser(data_dir)):
        if args.command == "export":
            # Opening would create an empty data dir: a mistyped path must not
            # become an empty backup that reports success.
            print(f"chd: there is no data dir at {data_dir}; nothing to export", file=sys.stderr)
            return EXIT_FAILED
        fresh_dir = Path(data_dir).expanduser().absolute()
        while not fresh_dir.parent.exists():  # opening creates the missing parents too
            fresh_dir = fresh_dir.parent
    # What start-up built lives as long as the command: kept out of the
    # collections that the objects of a transfer trigger (every 700 of them,
    # a full one now and then, which walked all of it: 2-5% of an import).
    gc.freeze()
    if args.command == "import" and fresh_dir is not None:
        return _import_fresh(args, storage, data_dir, fresh_dir)
    with tempfile.TemporaryFile() if args.command == "import" else nullcontext(None) as spool:
        return _transfer(args, storage, data_dir, fresh_dir, spool)


def _import_fresh(
    args: argparse.Namespace, storage: config.Config, data_dir: str | None, fresh_dir: Path
) -> int:
    """An import into a data dir it creates: checked and written in one pass, the dir removed on failure.

    Nothing else holds data there, so there is nothing to check the file
    against before writing, and a failure that removes the dir changes
    nothing: the check pass and its spool (an eighth of an import's time)
    are for data dirs that already hold something.
    """

    def work(backend: Backend) -> int:
        with _open(args.file, "r") as source:
            return _import(backend, read_export(source), None, args.replace)

    return _with_storage(storage, data_dir, fresh_dir, work)


def _transfer(
    args: argparse.Namespace,
    storage: config.Config,
    data_dir: str | None,
    fresh_dir: Path | None,
    spool: BinaryIO | None,
) -> int:
    try:
        # Checked before storage is opened: a bad file creates nothing. One
        # conversation at a time, so the file's size does not matter (issue 17).
        ids = _check_import(args.file, spool) if spool is not None else None
    except DaemonError as exc:
        print(f"chd: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if spool is None or ids is None:
        return _with_storage(storage, data_dir, fresh_dir, lambda backend: _export(backend, args))
    checked, spooled = ids, spool  # named again: narrowed for the lambda
    return _with_storage(
        storage,
        data_dir,
        fresh_dir,
        lambda backend: _import(backend, _unpacked(spooled, len(checked)), checked, args.replace),
    )


def _with_storage(
    storage: config.Config,
    data_dir: str | None,
    fresh_dir: Path | None,
    work: Callable[[Backend], int],
) -> int:
    """``work`` on the storage opened for a transfer; its exit code, or EXIT_FAILED with the error printed.

    A data dir this transfer created (``fresh_dir``) is removed unless ``work`` finished.
    """
    backend = open_storage(
        storage.backend,
        data_dir,
        storage.durability,
        serving=False,
        **config.backend_options(storage),
    )
    if backend is None:
        _remove_fresh(fresh_dir)
        return EXIT_FAILED
    done = False
    try:
        code = work(backend)
        done = True
        return code
    except DaemonError as exc:
        print(f"chd: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        backend.close()
        if not done:
            _remove_fresh(fresh_dir)


def _remove_fresh(directory: Path | None) -> None:
    """A data dir this failed import created goes again: a failure leaves nothing behind."""
    if directory is not None and directory.is_dir():
        shutil.rmtree(directory, ignore_errors=True)


def _export(backend: Backend, args: argparse.Namespace) -> int:
    ids: Iterable[str]
    if args.conversations:
        ids = args.conversations
        for conversation_id in ids:
            if backend.read(conversation_id).is_empty:
                print(
                    f"chd: conversation {conversation_id!r} holds nothing to export",
                    file=sys.stderr,
                )
                return EXIT_FAILED
    else:
        # Streamed: a listing of 100,000 ids is not held, nor read twice.
        ids = iter_conversations(backend)
    progress = _Progress("exported")
    if args.output == "-":
        _write_conversations(sys.stdout, export_text(backend, ids), progress)
    else:
        # Written aside and renamed, so a failed export never leaves half a backup.
        partial = f"{args.output}.partial"
        with _open(partial, "w") as out:
            _write_conversations(out, export_text(backend, ids), progress)
        os.replace(partial, args.output)
    progress.end()
    print(f"exported {progress.done} conversation(s)", file=sys.stderr)
    return 0


def _write_conversations(
    out: TextIO, conversations: Iterator[tuple[str, int]], progress: _Progress
) -> None:
    write = out.write
    for text, utterances in conversations:
        write(text)
        progress.done += 1
        progress.utterances += utterances
        progress.show()


def _check_import(path: str, spool: BinaryIO) -> list[str]:
    """The ids of the conversations in the file at ``path`` (``-``: stdin), after checking all of it.

    Each checked conversation goes to ``spool`` as it is read, so the write
    pass takes them from there, checked once, and stdin is read only once.
    """
    ids = []
    with _open(path, "r") as source:
        for conversation in read_export(source):
            packed = marshal.dumps(_packed(conversation))
            spool.write(len(packed).to_bytes(8, "little"))
            spool.write(packed)
            ids.append(conversation.conversation_id)
    spool.seek(0)
    return ids


def _packed(conversation: EncodedConversation) -> tuple[Any, ...]:
    # marshal, not pickle: the spool holds only plain values, and loading it runs no code.
    c = conversation
    summary = c.summary.to_record()
    return (
        c.conversation_id,
        c.next_seq,
        c.last_turn,
        c.settings,
        summary,
        c.buffer,
        c.pending,
        c.archive,
    )


def _unpacked(spool: BinaryIO, count: int) -> Iterator[EncodedConversation]:
    for _ in range(count):
        # Length-prefixed: marshal.load from a file reads it in small pieces, 30x slower.
        size = int.from_bytes(spool.read(8), "little")
        cid, next_seq, last_turn, settings, summary, buffer, pending, archive = marshal.loads(
            spool.read(size)
        )
        yield EncodedConversation(
            cid,
            next_seq,
            last_turn,
            settings,
            Summary.from_record(summary),
            buffer,
            pending,
            archive,
        )


def _import(
    backend: Backend,
    conversations: Iterable[EncodedConversation],
    ids: list[str] | None,
    replace: bool = False,
) -> int:
    """Write ``conversations``; ``ids`` (theirs, all checked already) for refusing any that holds data
    before the first write (None: the backend was created for this import)."""
    if ids is not None and not replace and count_conversations(backend) > 0:
        # Before the first write, as when the whole file was held (a writer
        # that gets in meanwhile is still refused inside its transaction).
        # An empty backend (a restore into a new dir) has nothing to refuse.
        for conversation_id in ids:
            if not backend.read(conversation_id).is_empty:
                raise InvalidRequest(
                    f"conversation {conversation_id!r} already holds data; use --replace to overwrite it"
                )
    progress = _Progress("imported")
    report = not progress.enabled

    def written(batch: list[EncodedConversation], counts: ImportCounts) -> None:
        progress.done, progress.utterances = counts.conversations, counts.utterances
        progress.show()
        if report:  # piped: one line per conversation, as before
            print(
                "\n".join(
                    f"imported {c.conversation_id}: {len(c.buffer)} in the buffer, "
                    f"{len(c.pending)} queued for the summary, {len(c.archive)} archived, "
                    f"summary through #{c.summary.through_seq}"
                    for c in batch
                ),
                file=sys.stderr,
            )

    import_encoded(backend, conversations, replace=replace, on_batch=written)
    progress.end()
    return 0


class _Progress:
    """A count and a rate on one terminal line, redrawn at most 4 times a second; silent when piped."""

    def __init__(self, verb: str, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.verb = verb
        self.enabled = self.stream.isatty()
        self.done = 0
        self.utterances = 0
        self._start = self._shown = time.monotonic()

    def show(self) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._shown < 0.25:
            return
        self._shown = now
        rate = self.utterances / max(now - self._start, 1e-9)
        self.stream.write(
            f"\r{self.verb} {self.done:,} conversations, {self.utterances:,} utterances ({rate:,.0f} utterances/s)"
        )
        self.stream.flush()

    def end(self) -> None:
        if self.enabled and self.done:
            self._shown = 0.0
            self.show()
            self.stream.write("\n")


def _open(path: str, mode: str) -> TextIO:
    # Read with bytes that are not UTF-8 kept as lone surrogates: the import
    # refuses them naming their line (transfer._refuse_undecoded), where a
    # strict read would end in a traceback with no line.
    errors = "surrogateescape" if mode == "r" else "strict"
    if path == "-":
        if isinstance(sys.stdin, io.TextIOWrapper):
            sys.stdin.reconfigure(encoding="utf-8", errors=errors)
        return nullcontext(sys.stdin)  # type: ignore[return-value]
    try:
        return open(path, mode, encoding="utf-8", errors=errors)
    except OSError as exc:
        raise _FileError(f"cannot open {path}: {exc.strerror}") from None


class _FileError(DaemonError):
    """An export or import file cannot be opened."""
