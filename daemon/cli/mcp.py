"""``chd mcp``: serve chd's memory to MCP hosts (Claude Desktop, Claude Code, ...).

    chd mcp [serve options]                        # stdio, over storage it opens itself
    chd mcp --http 127.0.0.1:8765 [--auth-token T] # Streamable HTTP at http://HOST:PORT/mcp
    chd mcp --target 127.0.0.1:50051               # front a running chd over gRPC

Every ``chd serve`` option applies (a flag, a CHD_* variable or the
--config file): storage, limits, summaries; ``auth_token``, which HTTP
callers must send as ``Authorization: Bearer <token>`` and which is sent to
the ``--target`` daemon; ``tls_cert``/``tls_key`` (and ``tls_client_ca``),
which make --http serve HTTPS. ``host``/``port`` are gRPC's and unused.
Over stdio nothing but the protocol is written to stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys

from chd.service import config

__all__ = ["add_mcp_command", "run_mcp"]

EXIT_USAGE = 2

DESCRIPTION = """\
Serve chd's memory over the Model Context Protocol: tools remember, recall, forget,
summarize, context and query, and resources chd://conversations/{id}/summary and
.../recent. Over stdio (an MCP host starts it) unless --http is given. It opens the
storage the serve options name, or with --target talks to a running chd instead.
"""

EPILOG = """\
examples:
  chd mcp --backend disk --data-dir ~/.local/share/chd        # stdio, for Claude Desktop / Code
  chd mcp --http 127.0.0.1:8765 --auth-token "$TOKEN"          # http://127.0.0.1:8765/mcp
  chd mcp --target 127.0.0.1:50051                              # in front of `chd serve`
"""


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(
            f"must be HOST:PORT (PORT 0-65535; 0 picks a free one), got {text!r}"
        )
    return host.strip("[]"), int(port)


def add_mcp_command(commands: argparse._SubParsersAction) -> None:
    env = os.environ.get
    sub = commands.add_parser(
        "mcp",
        help="serve chd to MCP hosts (stdio or Streamable HTTP)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # chd mcp answers in one process: --processes is chd serve's.
    config.add_arguments(sub, skip=("processes",))
    sub.add_argument("--processes", dest="mcp_processes", default=None, help=argparse.SUPPRESS)
    sub.add_argument(
        "--http",
        type=_address,
        metavar="HOST:PORT",
        help="serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    sub.add_argument(
        "--target",
        metavar="HOST:PORT",
        default=env("CHD_MCP_TARGET"),
        help="answer from a running chd over gRPC instead of opening storage (CHD_MCP_TARGET)",
    )
    sub.add_argument("--target-tls", action="store_true", help="connect to --target with TLS")
    sub.add_argument(
        "--target-tls-ca", metavar="PEM", help="CA to trust for --target (implies --target-tls)"
    )
    sub.add_argument(
        "--target-tls-server-name",
        metavar="NAME",
        help="name to check --target's certificate against (implies --target-tls)",
    )


_ONE_PROCESS = (
    "chd: --processes is for chd serve; chd mcp serves from one process "
    "(point it at a chd serve --processes N with --target)"
)


def run_mcp(args: argparse.Namespace) -> int:
    if args.mcp_processes is not None:
        print(_ONE_PROCESS, file=sys.stderr)
        return EXIT_USAGE
    try:
        effective = config.from_arguments(args, os.environ)
    except config.ConfigError as exc:
        print(f"chd: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if effective.processes > 1:  # from CHD_PROCESSES or a file: refused as the flag is
        print(_ONE_PROCESS, file=sys.stderr)
        return EXIT_USAGE
    for flag, value in (
        ("--target", args.target),
        ("--target-tls-server-name", args.target_tls_server_name),
        ("--http", args.http[0] if args.http else None),
    ):
        problem = value and config.Text().check_problem(value)
        if problem:
            print(f"chd: {flag} {problem}", file=sys.stderr)
            return EXIT_USAGE
    if args.http is not None:
        host = args.http[0]
        authenticated = effective.auth_token is not None or effective.tls_client_ca is not None
        if not config.is_loopback(host) and not authenticated and not effective.insecure:
            print(
                f"chd: --http {host!r} is reachable from other machines; set auth_token (or tls_client_ca) "
                "or pass --insecure to serve it unauthenticated",
                file=sys.stderr,
            )
            return EXIT_USAGE
    # Imported here: `chd query` and the transfers need none of the MCP SDK's start-up.
    from chd.mcp import serve
    from chd.mcp.tools import build_server
    from chd.service.tracelog import configure_logging

    # First: storage logs as it opens, and the SDK's own logging.basicConfig
    # then leaves chd's handler (stderr, chd's format and level) alone.
    configure_logging(effective.log_level, effective.log_format)
    try:
        answerer = _answerer(args, effective)
    except config.ConfigError as exc:  # an embedder that would not build
        print(f"chd: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if answerer is None:
        return 1
    try:
        server = build_server(answerer)
        if args.http is None:
            serve.run_stdio(server)
            return 0
        host, port = args.http
        shown = f"[{host}]" if ":" in host else host
        scheme = "https" if effective.tls_cert else "http"

        def listening(bound: int) -> None:
            # One parseable line, flushed, so scripts and tests can learn the port.
            print(f"chd mcp listening on {scheme}://{shown}:{bound}{serve.MCP_PATH}", flush=True)

        try:
            serve.run_http(
                server,
                host,
                port,
                effective.auth_token,
                listening,
                tls_cert=effective.tls_cert,
                tls_key=effective.tls_key,
                tls_client_ca=effective.tls_client_ca,
            )
        except OSError as exc:
            print(f"chd: cannot listen on {shown}:{port}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        return 0
    finally:
        answerer.close()


def _answerer(args: argparse.Namespace, effective: config.Config) -> object | None:
    from chd.cli.storage import open_storage
    from chd.client import TLS
    from chd.mcp import serve

    if args.target:
        secure = args.target_tls or args.target_tls_ca or args.target_tls_server_name
        tls = (
            TLS(ca=args.target_tls_ca, server_name=args.target_tls_server_name) if secure else None
        )
        return serve.open_remote(args.target, effective.auth_token, tls, effective.request_timeout)
    backend = open_storage(
        effective.backend,
        effective.data_dir,
        effective.durability,
        serving=True,
        **config.backend_options(effective),
    )
    if backend is None:
        return None
    try:
        return serve.open_local(effective, backend)
    except config.ConfigError:
        backend.close()
        raise
