"""The ``chd`` command: run the daemon and talk to it.

    chd serve [--config FILE] [--host H] [--port P] [--buffer-size N] ...
    chd config [same options as serve]       # effective configuration, secrets masked
    chd query "TEXT" | - [--metadata JSON|@FILE] [--data JSON|@FILE] [--json] [--target H:P]
              [--auth-token T] [--tls] [--tls-ca PEM] [--tls-cert PEM --tls-key PEM]
    chd purpose | chd instructions
    chd mcp [same options as serve] [--http HOST:PORT] [--target HOST:PORT]   # MCP over stdio or HTTP
    chd export [--conversation ID] --data-dir DIR | chd import [FILE] --data-dir DIR

A failed RPC exits with 64 + the gRPC status code, as grpcurl does, so a
script can treat both tools alike; usage errors exit 2. Output cut short by
its reader (``chd instructions | head -1``) ends quietly, as with cat or git.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import chd
from chd.cli.client import add_client_commands, run_client
from chd.cli.mcp import add_mcp_command, run_mcp
from chd.cli.storage import add_transfer_commands, open_storage, run_transfer
from chd.service import config

if TYPE_CHECKING:
    from chd.core.language.reading_process import ReadingProcess

__all__ = ["main"]

EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a tool SIGPIPE ended

SERVE_DESCRIPTION = """\
Run the daemon. Every option is a configuration key: a flag, a CHD_* variable or
a key of the --config TOML file, the first that sets it wins; `chd config` shows
the result. Defaults listen on 127.0.0.1:50051 with in-memory storage.
"""


class _Version(argparse.Action):
    """argparse's version action, reading ``chd.__version__`` only when asked (see chd/__init__.py)."""

    def __init__(
        self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(f"chd {chd.__version__}")  # to stdout, as argparse's own version action
        parser.exit()


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: an argument it does not know is its own error (its usage), with a
    near flag suggested as a misspelt configuration key is; argparse would leave it to the
    top-level parser, which shows only ``chd [-h] [--version] COMMAND``. No abbreviations:
    ``chd serve --buffer 5`` started a daemon with buffer_size 5 (newcomer pass, issue 30), and
    an abbreviation that works today breaks when a key is added beside it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            # Compared without the dashes every long flag shares, which would
            # make "--bogus-key" look like "--tls-key" (newcomer recheck, issue 30).
            flags = [
                o[2:] for action in self._actions for o in action.option_strings if o[:2] == "--"
            ]
            hints = [
                f"did you mean {' or '.join('--' + c for c in close)}?"
                for extra in extras
                if extra.startswith("--")
                and (close := config.close_names(extra.split("=", 1)[0][2:], flags))
            ]
            self.error("; ".join([f"unrecognized arguments: {' '.join(extras)}", *hints]))
        return parsed, extras


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chd", description="chd, the Conversation History Daemon")
    parser.add_argument(
        "--version", action=_Version, help="show the program's version number and exit"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)

    serve = commands.add_parser("serve", help="run the daemon", description=SERVE_DESCRIPTION)
    config.add_arguments(serve)
    # Set by chd serve --processes N on the processes it starts (daemon/service/group.py): the
    # parent's pid, which the child checks before it shares the port with SO_REUSEPORT.
    serve.add_argument("--group-member", type=int, default=None, help=argparse.SUPPRESS)
    show = commands.add_parser(
        "config",
        help="check and print the effective serve configuration (secrets masked)",
        description="Check the configuration as `chd serve` would, without serving; print it as TOML "
        "with each value's source. Exits 2 on what `chd serve` refuses.",
    )
    config.add_arguments(show)
    add_client_commands(commands)
    add_mcp_command(commands)
    add_transfer_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _run(argv)
        sys.stdout.flush()  # inside the try: a reader gone fails here, not at exit
        return code
    except BrokenPipeError:
        # Python flushes stdout again at exit and would report the broken
        # pipe there; point stdout at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _run(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    if args.command in ("serve", "config"):
        try:
            effective = config.from_arguments(args, os.environ)
        except config.ConfigError as exc:
            print(f"chd: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if args.command == "config":
            print(config.render(effective))
            return 0
        given = list(sys.argv[1:] if argv is None else argv)
        return _serve(effective, given[given.index("serve") + 1 :], args.group_member)
    if args.command in ("export", "import"):
        return run_transfer(args)
    if args.command == "mcp":
        return run_mcp(args)
    return run_client(args)


def _serve(
    effective: config.Config, argv: Sequence[str] = (), group_member: int | None = None
) -> int:
    """Serve until SIGTERM; ``argv`` (what followed ``serve``) is passed on to a group's processes."""
    from chd.service.app import start
    from chd.service.group import check_parent, run_group
    from chd.service.server import ListenError, serve_forever, stop_signals
    from chd.service.tracelog import configure_logging

    configure_logging(effective.log_level, effective.log_format)
    stopping = stop_signals()
    if group_member is not None:
        try:
            check_parent(group_member)
        except RuntimeError as exc:
            print(f"chd: {exc}", file=sys.stderr)
            return EXIT_USAGE
    # Storage opens before the port does: a bad data dir fails fast, in one line.
    backend = open_storage(
        effective.backend,
        effective.data_dir,
        effective.durability,
        serving=True,
        **config.backend_options(effective),
    )
    if backend is None:
        return 1
    if effective.processes > 1:
        # Opened once above so a bad data dir or Redis URL fails here in one
        # line; each serving process opens its own.
        backend.close()
        return run_group(effective, argv, stopping)
    try:
        server = start(effective, backend=backend, reuse_port=group_member is not None)
    except config.ConfigError as exc:
        backend.close()
        print(f"chd: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ListenError as exc:  # names the port (gRPC or metrics) and why
        backend.close()
        print(f"chd: {exc}", file=sys.stderr)
        return 1
    except (OSError, RuntimeError) as exc:
        backend.close()
        print(f"chd: cannot start: {exc}", file=sys.stderr)
        return 1
    settle_heap()
    # One parseable line, flushed, so scripts and tests can learn the port.
    print(f"chd listening on {effective.host}:{server.port}", flush=True)
    if server.metrics_port is not None:
        print(
            f"chd metrics on http://{_url_host(effective.metrics_host)}:{server.metrics_port}/metrics",
            flush=True,
        )
    _log_summarizer(server.history.writer)
    reader = _read_long_queries_in_a_child()
    try:
        serve_forever(server, effective.shutdown_grace, effective.shutdown_drain, stopping)
    finally:
        reader.close()
    return 0


def _read_long_queries_in_a_child() -> ReadingProcess:
    """Long queries' rules run in a child process, off this one's GIL (reading_process says why)."""
    from chd.core.language.parser import read_queries_with, reading_of
    from chd.core.language.reading_process import ReadingProcess

    reader = ReadingProcess(reading_of)
    read_queries_with(reader)
    return reader


def _url_host(host: str) -> str:
    """``host`` as a URL's host part: an IPv6 address goes in brackets (RFC 3986)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def settle_heap() -> None:
    """Collect start-up's garbage, then keep what start-up built out of every later collection.

    Modules, gRPC, the token table (100,000 entries) and the grammar live as
    long as the daemon; without this every full collection walked them again,
    a 50 ms pause holding the GIL every few seconds under stores (the
    store p99 of bench/bench_scale.py; issue 17). ``gc.freeze`` moves them
    to a generation the collector skips; whatever is made later is
    collected as before.
    """
    gc.collect()
    gc.freeze()


def _log_summarizer(writer: Any) -> None:
    # After the listening line: a daemon that fails to start says so in one line.
    primary = writer.primary
    where = f" at {primary.base_url}" if hasattr(primary, "base_url") else ""
    logging.getLogger("chd").info("summarizer: %s%s", writer.name, where)


if __name__ == "__main__":
    sys.exit(main())
