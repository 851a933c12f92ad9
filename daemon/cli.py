"""The ``chd`` command: run the daemon and talk to it.

    chd serve [--host H] [--port P] [--buffer-size N] [--max-tokens N] ...
    chd query "TEXT" [--metadata JSON] [--data JSON] [--json] [--target H:P]
    chd purpose | chd instructions

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

__all__ = ["main"]

DEFAULT_TARGET = "127.0.0.1:50051"
EXIT_RPC_BASE = 64


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"chd: {name} must be a whole number, got {raw!r}") from None


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"chd: {name} must be a number, got {raw!r}") from None


def _env_flag(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise SystemExit(f"chd: {name} must be true or false, got {raw!r}")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, like {\"key\": \"value\"}")
    return value


def _parser() -> argparse.ArgumentParser:
    from daemon.settings import Settings

    defaults = Settings()
    parser = argparse.ArgumentParser(prog="chd", description="chd, the Conversation History Daemon")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the daemon")
    serve.add_argument("--host", default=os.environ.get("CHD_HOST", "127.0.0.1"))
    serve.add_argument("--port", type=int, default=_env_int("CHD_PORT", 50051),
                       help="0 picks a free port (printed at start)")
    serve.add_argument("--buffer-size", type=_positive,
                       default=_env_int("CHD_BUFFER_SIZE", defaults.buffer_size),
                       help="utterances kept per conversation (CHD_BUFFER_SIZE)")
    serve.add_argument("--max-tokens", type=_positive,
                       default=_env_int("CHD_MAX_TOKENS", defaults.max_tokens),
                       help="tokens kept per conversation buffer (CHD_MAX_TOKENS)")
    serve.add_argument("--summary-token-limit", type=_positive,
                       default=_env_int("CHD_SUMMARY_TOKEN_LIMIT", defaults.summary_token_limit),
                       help="token budget of each running summary (CHD_SUMMARY_TOKEN_LIMIT)")
    serve.add_argument("--max-utterance-chars", type=_positive,
                       default=_env_int("CHD_MAX_UTTERANCE_CHARS", defaults.max_utterance_chars),
                       help="longest utterance accepted (CHD_MAX_UTTERANCE_CHARS)")
    serve.add_argument("--eviction-batch", type=_positive,
                       default=_env_int("CHD_EVICTION_BATCH", defaults.eviction_batch),
                       help="utterances evicted together once the buffer overflows (CHD_EVICTION_BATCH)")
    _add_summarizer_arguments(serve, defaults)
    serve.add_argument("--log-level", default=os.environ.get("CHD_LOG_LEVEL", "INFO"))

    for name, help_text in (("query", "send a query"), ("purpose", "print the purpose"),
                            ("instructions", "print the instructions")):
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("--target", default=os.environ.get("CHD_TARGET", DEFAULT_TARGET),
                         help=f"host:port of the daemon (CHD_TARGET, default {DEFAULT_TARGET})")
        sub.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the answer")
        if name == "query":
            sub.add_argument("text", help='the query, e.g. "Get the last 5 utterances"')
            sub.add_argument("--metadata", type=_json_object, default={}, help="JSON object")
            sub.add_argument("--data", type=_json_object, default={}, help="JSON object")
            sub.add_argument("--conversation", "-c", help="shorthand for metadata.conversation_id")
            sub.add_argument("--json", action="store_true", help="print the response as JSON")
    return parser


def _add_summarizer_arguments(serve: argparse.ArgumentParser, defaults: Any) -> None:
    """Flags of the summarization pipeline (docs/summarization.md)."""
    from daemon.summarizer import DEFAULT_CLAUDE_MODEL as DEFAULT_MODEL
    from daemon.summarizer import SUMMARIZER_CHOICES

    group = serve.add_argument_group("summarization")
    group.add_argument("--summarizer", choices=SUMMARIZER_CHOICES,
                       default=os.environ.get("CHD_SUMMARIZER", "auto"),
                       help="auto: Claude when ANTHROPIC_API_KEY is set, else offline (CHD_SUMMARIZER)")
    group.add_argument("--anthropic-model", default=os.environ.get("CHD_ANTHROPIC_MODEL", DEFAULT_MODEL),
                       help=f"Claude model (CHD_ANTHROPIC_MODEL, default {DEFAULT_MODEL})")
    group.add_argument("--anthropic-max-tokens", type=_positive,
                       default=_env_int("CHD_ANTHROPIC_MAX_TOKENS", 1024),
                       help="max_tokens of each Claude reply (CHD_ANTHROPIC_MAX_TOKENS)")
    group.add_argument("--anthropic-max-retries", type=int,
                       default=_env_int("CHD_ANTHROPIC_MAX_RETRIES", 2),
                       help="the SDK's own retries per call (CHD_ANTHROPIC_MAX_RETRIES)")
    group.add_argument("--summarizer-timeout", type=_seconds,
                       default=_env_float("CHD_SUMMARIZER_TIMEOUT", 30.0),
                       help="seconds per Claude HTTP attempt (CHD_SUMMARIZER_TIMEOUT)")
    group.add_argument("--summarizer-attempts", type=_positive,
                       default=_env_int("CHD_SUMMARIZER_ATTEMPTS", 3),
                       help="tries per batch before the offline fallback (CHD_SUMMARIZER_ATTEMPTS)")
    group.add_argument("--summarizer-backoff", type=_seconds,
                       default=_env_float("CHD_SUMMARIZER_BACKOFF", 1.0),
                       help="seconds before the 2nd try, doubled after (CHD_SUMMARIZER_BACKOFF)")
    group.add_argument("--summary-segments", type=_positive,
                       default=_env_int("CHD_SUMMARY_SEGMENTS", defaults.summary_segments),
                       help="segments the summary is split into at most (CHD_SUMMARY_SEGMENTS)")
    group.add_argument("--archive-evicted", action="store_true", default=_env_flag("CHD_ARCHIVE_EVICTED"),
                       help="keep folded utterances in the backend, searchable (CHD_ARCHIVE_EVICTED)")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    return _client(args)


def _serve(args: argparse.Namespace) -> int:
    from daemon.core import ConversationHistory
    from daemon.server import build_server, serve_forever
    from daemon.settings import Settings

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings(
        buffer_size=args.buffer_size,
        max_tokens=args.max_tokens,
        summary_token_limit=args.summary_token_limit,
        max_utterance_chars=args.max_utterance_chars,
        eviction_batch=args.eviction_batch,
        summary_segments=args.summary_segments,
        archive_evicted=args.archive_evicted,
    )
    try:
        writer = _summary_writer(args)
    except ValueError as exc:
        print(f"chd: {exc}", file=sys.stderr)
        return 2
    history = ConversationHistory(settings=settings, writer=writer)
    try:
        server = build_server(history, args.host, args.port)
    except (OSError, RuntimeError) as exc:
        print(f"chd: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    # One parseable line, flushed, so scripts and tests can learn the port.
    print(f"chd listening on {args.host}:{server.port}", flush=True)
    _log_summarizer(writer)
    serve_forever(server)
    return 0


def _summary_writer(args: argparse.Namespace) -> Any:
    from daemon.summarizer import build_writer
    from daemon.tokens import default_counter

    writer = build_writer(
        args.summarizer,
        default_counter(),
        attempts=args.summarizer_attempts,
        backoff=args.summarizer_backoff,
        model=args.anthropic_model,
        max_tokens=args.anthropic_max_tokens,
        timeout=args.summarizer_timeout,
        max_retries=args.anthropic_max_retries,
    )
    return writer


def _log_summarizer(writer: Any) -> None:
    # After the listening line: a daemon that fails to start says so in one line.
    primary = writer.primary
    where = f" at {primary.base_url}" if hasattr(primary, "base_url") else ""
    logging.getLogger("chd").info("summarizer: %s%s", writer.name, where)


def _client(args: argparse.Namespace) -> int:
    from daemon.v1 import daemon_pb2, daemon_pb2_grpc

    with grpc.insecure_channel(args.target) as channel:
        stub = daemon_pb2_grpc.DaemonStub(channel)
        try:
            if args.command == "purpose":
                print(stub.GetPurpose(daemon_pb2.GetPurposeRequest(), timeout=args.timeout).purpose)
                return 0
            if args.command == "instructions":
                print(stub.GetInstructions(daemon_pb2.GetInstructionsRequest(), timeout=args.timeout).instructions)
                return 0
            metadata = dict(args.metadata)
            if args.conversation:
                metadata["conversation_id"] = args.conversation
            request = daemon_pb2.QueryRequest(query=args.text)
            request.metadata.update(metadata)
            request.data.update(args.data)
            response = stub.Query(request, timeout=args.timeout)
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
