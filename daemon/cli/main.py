"""The ``chd`` command: run the daemon and talk to it.

    chd serve [--config FILE] [--host H] [--port P] [--buffer-size N] ...
    chd config [same options as serve]       # effective configuration, secrets masked
    chd query "TEXT" [--metadata JSON] [--data JSON] [--json] [--target H:P]
              [--auth-token T] [--tls] [--tls-ca PEM] [--tls-cert PEM --tls-key PEM]
    chd purpose | chd instructions
    chd serve ... [--backend memory|disk|module:Class] [--data-dir DIR] [--durability normal|full]
    chd export [--conversation ID] --data-dir DIR | chd import [FILE] --data-dir DIR

A failed RPC exits with 64 + the gRPC status code, as grpcurl does, so a
script can treat both tools alike; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any, Sequence

import grpc
from google.protobuf import json_format

from chd.service import config

__all__ = ["main"]

DEFAULT_TARGET = "127.0.0.1:50051"
EXIT_RPC_BASE = 64


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, like {\"key\": \"value\"}")
    return value


def _parser() -> argparse.ArgumentParser:
    from chd.cli.storage import add_transfer_commands

    parser = argparse.ArgumentParser(prog="chd", description="chd, the Conversation History Daemon")
    commands = parser.add_subparsers(dest="command", required=True)

    # Serve options are the configuration keys (daemon/service/config.py): flag, CHD_* or TOML file.
    serve = commands.add_parser("serve", help="run the daemon")
    config.add_arguments(serve)
    add_transfer_commands(commands)
    show = commands.add_parser("config", help="print the effective serve configuration (secrets masked)")
    config.add_arguments(show)

    for name, help_text in (("query", "send a query"), ("purpose", "print the purpose"),
                            ("instructions", "print the instructions")):
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("--target", default=os.environ.get("CHD_TARGET", DEFAULT_TARGET),
                         help=f"host:port of the daemon (CHD_TARGET, default {DEFAULT_TARGET})")
        sub.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the answer")
        _add_security_arguments(sub)
        if name == "query":
            sub.add_argument("text", help='the query, e.g. "Get the last 5 utterances"')
            sub.add_argument("--metadata", type=_json_object, default={}, help="JSON object")
            sub.add_argument("--data", type=_json_object, default={}, help="JSON object")
            sub.add_argument("--conversation", "-c", help="shorthand for metadata.conversation_id")
            sub.add_argument("--json", action="store_true", help="print the response as JSON")
    return parser


def _add_security_arguments(sub: argparse.ArgumentParser) -> None:
    env = os.environ.get
    sub.add_argument("--auth-token", default=env("CHD_AUTH_TOKEN"), help="bearer token (CHD_AUTH_TOKEN)")
    sub.add_argument("--tls", action="store_true", help="connect with TLS (implied by the other --tls-* flags)")
    sub.add_argument("--tls-ca", default=env("CHD_TLS_CA"), help="PEM CA to trust instead of the system's (CHD_TLS_CA)")
    sub.add_argument("--tls-cert", default=env("CHD_CLIENT_TLS_CERT"),
                     help="PEM client certificate (CHD_CLIENT_TLS_CERT)")
    sub.add_argument("--tls-key", default=env("CHD_CLIENT_TLS_KEY"), help="PEM client key (CHD_CLIENT_TLS_KEY)")
    sub.add_argument("--tls-server-name", default=env("CHD_TLS_SERVER_NAME"),
                     help="name to check the server certificate against (CHD_TLS_SERVER_NAME)")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("serve", "config"):
        try:
            effective = config.from_arguments(args, os.environ)
        except config.ConfigError as exc:
            print(f"chd: {exc}", file=sys.stderr)
            return 2
        if args.command == "config":
            print(config.render(effective))
            return 0
        return _serve(args, effective)
    if args.command in ("export", "import"):
        from chd.cli.storage import run_transfer

        return run_transfer(args)
    return _client(args)


def _serve(args: argparse.Namespace, effective: config.Config) -> int:
    from chd.service.app import start
    from chd.service.server import serve_forever, stop_signals
    from chd.cli.storage import open_storage
    from chd.service.tracelog import configure_logging

    configure_logging(effective.log_level, effective.log_format)
    stopping = stop_signals()
    # Storage opens before the port does: a bad data dir fails fast, in one line.
    backend = open_storage(effective.backend, effective.data_dir, effective.durability, serving=True,
                           **config.backend_options(effective))
    if backend is None:
        return 1
    try:
        server = start(effective, backend=backend)
    except config.ConfigError as exc:
        backend.close()
        print(f"chd: {exc}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError) as exc:
        backend.close()
        print(f"chd: cannot listen on {effective.host}:{effective.port}: {exc}", file=sys.stderr)
        return 1
    # One parseable line, flushed, so scripts and tests can learn the port.
    print(f"chd listening on {effective.host}:{server.port}", flush=True)
    if server.metrics_port is not None:
        print(f"chd metrics on http://{effective.metrics_host}:{server.metrics_port}/metrics", flush=True)
    _log_summarizer(server.history.writer)
    serve_forever(server, effective.shutdown_grace, effective.shutdown_drain, stopping)
    return 0


def _log_summarizer(writer: Any) -> None:
    # After the listening line: a daemon that fails to start says so in one line.
    primary = writer.primary
    where = f" at {primary.base_url}" if hasattr(primary, "base_url") else ""
    logging.getLogger("chd").info("summarizer: %s%s", writer.name, where)


def _client(args: argparse.Namespace) -> int:
    from chd.service.auth import bearer_metadata
    from chd.service.tls import ClientSecurity, open_channel
    from chd.v1 import daemon_pb2, daemon_pb2_grpc

    security = ClientSecurity(
        tls=bool(args.tls or args.tls_ca or args.tls_cert or args.tls_server_name),
        ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key, server_name=args.tls_server_name,
    )
    call = {"timeout": args.timeout, "metadata": bearer_metadata(args.auth_token) if args.auth_token else None}
    with open_channel(args.target, security) as channel:
        stub = daemon_pb2_grpc.DaemonStub(channel)
        try:
            if args.command == "purpose":
                print(stub.GetPurpose(daemon_pb2.GetPurposeRequest(), **call).purpose)
                return 0
            if args.command == "instructions":
                print(stub.GetInstructions(daemon_pb2.GetInstructionsRequest(), **call).instructions)
                return 0
            metadata = dict(args.metadata)
            if args.conversation:
                metadata["conversation_id"] = args.conversation
            request = daemon_pb2.QueryRequest(query=args.text)
            request.metadata.update(metadata)
            request.data.update(args.data)
            response = stub.Query(request, **call)
        except grpc.RpcError as error:
            code = error.code()
            print(f"chd: {code.name}: {error.details()}", file=sys.stderr)
            return EXIT_RPC_BASE + code.value[0]
    answer = {
        "operation": response.operation,
        "result": _plain(json_format.MessageToDict(response.result)),
        "metadata": _plain(json_format.MessageToDict(response.metadata)),
    }
    if args.json:
        print(json.dumps(answer, indent=2, ensure_ascii=False))
    else:
        print(_human(answer))
    return 0


def _plain(value: Any) -> Any:
    """Struct numbers come back as doubles; show 5.0 as 5."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _human(answer: dict[str, Any]) -> str:
    result, meta = answer["result"], answer["metadata"]
    lines = [
        f"{answer['operation']} · conversation {meta.get('conversation_id', '?')} · "
        f"{meta.get('items_affected', 0)} item(s) · {meta.get('tokens_used', 0)} token(s)"
    ]
    if "context" in result:
        # The text to paste into a prompt, shown as is.
        lines.append(f"context ({result['tokens']} of {result['token_limit']} tokens):")
        lines.append("  " + (result["context"].replace("\n", "\n  ") or "(empty)"))
        return "\n".join(lines)
    if "utterance" in result:
        lines.append(_line(result["utterance"]))
    if result.get("evicted"):
        lines.append(f"evicted: {', '.join(f'#{s}' for s in result['evicted'])}")
    for u in result.get("utterances", []):
        lines.append(_line(u))
    if "removed" in result:
        removed = result["removed"]
        lines.append(f"removed: {', '.join(f'#{s}' for s in removed) if removed else 'nothing'}")
        # Forgetting reaches the summary too; say so, or "nothing" would mislead.
        for what in ("dropped", "rebuilt"):
            count = result.get(f"summary_segments_{what}", 0)
            if count:
                lines.append(f"summary segments {what}: {count}")
    if "summary_hit" in result:
        hit = result["summary_hit"]
        lines.append(f"summary matches too, score {hit['score']:.3f}: {hit['text']}")
    if answer["operation"] in ("configure", "stats"):
        lines.extend(f"{key}: {json.dumps(value, sort_keys=True)}" for key, value in sorted(result.items()))
    if "summary" in result:
        tokens = result.get("tokens", result.get("summary_tokens", 0))
        lines.append(f"summary ({tokens} tokens):")
        lines.append("  " + (result["summary"].replace("\n", "\n  ") or "(empty)"))
    return "\n".join(lines)


def _line(u: dict[str, Any]) -> str:
    score = f"  score {u['score']:.3f}" if "score" in u else ""
    return f"#{u['seq']} [turn {u['turn_number']}] {u['speaker']}: {u['text']}{score}"


if __name__ == "__main__":
    sys.exit(main())
