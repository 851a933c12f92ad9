"""``chd query``, ``chd purpose``, ``chd instructions``: one call to a running daemon, through ``chd.client``.

Everything a call needs (the query from an argument or stdin, JSON from an
argument, a file or stdin, TLS files) is read and checked before dialing,
so a mistake is one line and exit 2, never a half-made connection. A failed
call exits 64 + its gRPC status code, as grpcurl does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from chd.cli.answer import human

if TYPE_CHECKING:
    import grpc

    from chd.client import TLS

__all__ = [
    "add_client_commands",
    "run_client",
    "DEFAULT_TARGET",
    "DEFAULT_TIMEOUT",
    "EXIT_RPC_BASE",
]

DEFAULT_TARGET = "127.0.0.1:50051"
DEFAULT_TIMEOUT = 30.0
EXIT_USAGE = 2
EXIT_RPC_BASE = 64

QUERY_EPILOG = f"""\
examples:
  chd query "Add user utterance: 'Is it sunny in Paris?'" -c trip
  chd query "Get the last 5 utterances" -c trip --json
  echo "Get summary" | chd query -
  chd query --data '{{"operation": "retrieve", "last_n": 5}}'
  chd query "Add utterance" --data @utterance.json --metadata @meta.json

exit codes:
  0     the daemon answered
  2     usage error (a flag, JSON, a file, a TLS file, text that is not Unicode); nothing was sent
  64+N  the call failed with gRPC status N, as with grpcurl: 67 INVALID_ARGUMENT,
        68 DEADLINE_EXCEEDED (no answer within --timeout, default {DEFAULT_TIMEOUT:g} s),
        69 NOT_FOUND, 72 RESOURCE_EXHAUSTED, 78 UNAVAILABLE (no daemon), 80 UNAUTHENTICATED
"""


class UsageError(ValueError):
    """A flag or input that makes the call impossible; nothing was sent."""


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds greater than 0, got {text!r}"
        )
    return value


def add_client_commands(commands: argparse._SubParsersAction) -> None:
    env = os.environ.get
    for name, help_text in (
        ("query", "send a query"),
        ("purpose", "print the purpose"),
        ("instructions", "print the instructions (every query form)"),
    ):
        extra: dict[str, Any] = {}
        if name == "query":
            extra = {
                "epilog": QUERY_EPILOG,
                "formatter_class": argparse.RawDescriptionHelpFormatter,
                "description": "Send one query to a running daemon and print its answer.",
            }
        sub = commands.add_parser(name, help=help_text, **extra)
        sub.add_argument(
            "--target",
            default=env("CHD_TARGET", DEFAULT_TARGET),
            help=f"host:port of the daemon (CHD_TARGET, default {DEFAULT_TARGET})",
        )
        sub.add_argument(
            "--timeout",
            type=_seconds,
            default=DEFAULT_TIMEOUT,
            metavar="SECONDS",
            help=f"seconds to wait for the answer (default {DEFAULT_TIMEOUT:g})",
        )
        _add_security_arguments(sub)
        if name == "query":
            sub.add_argument(
                "text",
                nargs="?",
                metavar="QUERY",
                help='the query, e.g. "Get the last 5 utterances"; - reads it from stdin; '
                'may be left out when --data has an "operation"',
            )
            sub.add_argument("--metadata", metavar="JSON", help="JSON object, @FILE or @- (stdin)")
            sub.add_argument("--data", metavar="JSON", help="JSON object, @FILE or @- (stdin)")
            sub.add_argument("--conversation", "-c", help="shorthand for metadata.conversation_id")
            sub.add_argument(
                "--json", action="store_true", help="print the response as JSON (keys sorted)"
            )


def _add_security_arguments(sub: argparse.ArgumentParser) -> None:
    env = os.environ.get
    sub.add_argument(
        "--auth-token", default=env("CHD_AUTH_TOKEN"), help="bearer token (CHD_AUTH_TOKEN)"
    )
    sub.add_argument(
        "--tls", action="store_true", help="connect with TLS (implied by the other --tls-* flags)"
    )
    sub.add_argument(
        "--tls-ca",
        default=env("CHD_TLS_CA"),
        help="PEM CA to trust instead of the system's (CHD_TLS_CA)",
    )
    sub.add_argument(
        "--tls-cert",
        default=env("CHD_CLIENT_TLS_CERT"),
        help="PEM client certificate, with --tls-key (CHD_CLIENT_TLS_CERT)",
    )
    sub.add_argument(
        "--tls-key",
        default=env("CHD_CLIENT_TLS_KEY"),
        help="PEM key of --tls-cert (CHD_CLIENT_TLS_KEY)",
    )
    sub.add_argument(
        "--tls-server-name",
        default=env("CHD_TLS_SERVER_NAME"),
        help="name to check the server certificate against (CHD_TLS_SERVER_NAME)",
    )


def _json_object(flag: str, value: str | None, stdin: TextIO) -> dict[str, Any]:
    if value is None:
        return {}
    text = value
    if value.startswith("@"):
        source = value[1:]
        if source == "-":
            text = _read(stdin, f"{flag} @-")
        else:
            try:
                text = Path(source).expanduser().read_text(encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"{flag} {value}: cannot read {source}: {exc.strerror}") from None
            except UnicodeDecodeError:
                raise UsageError(f"{flag} {value}: {source} is not UTF-8 text") from None
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag}: not valid JSON: {exc}") from None
    except ValueError as exc:  # an integer of more than 4,300 digits (sys.get_int_max_str_digits)
        if "integer string conversion" in str(exc):
            raise UsageError(
                f"{flag}: an integer has more than {sys.get_int_max_str_digits():,} digits"
            ) from None
        raise UsageError(f"{flag}: not valid JSON: {_first_sentence(exc)}") from None
    except RecursionError:
        raise UsageError(f"{flag}: JSON nested too deeply to read") from None
    if not isinstance(parsed, dict):
        raise UsageError(f'{flag} must be a JSON object, like {{"key": "value"}}')
    return parsed


def _check_text(args: argparse.Namespace) -> None:
    """Refuse a target, token or server name the client could not send (one line, before dialing)."""
    from chd.client.channel import text_problem, token_problem

    for flag, variable, value in (
        ("--target", "CHD_TARGET", args.target),
        ("--tls-server-name", "CHD_TLS_SERVER_NAME", args.tls_server_name),
    ):
        problem = value and text_problem(value)
        if problem:
            raise UsageError(f"{flag} (or {variable}) {problem}")
    problem = args.auth_token and token_problem(args.auth_token)
    if problem:
        raise UsageError(f"--auth-token (or CHD_AUTH_TOKEN) {problem}")


def _security(args: argparse.Namespace) -> TLS | None:
    from chd.client import TLS

    _check_text(args)
    if bool(args.tls_cert) != bool(args.tls_key):
        given, missing = (
            ("--tls-key", "--tls-cert") if args.tls_key else ("--tls-cert", "--tls-key")
        )
        raise UsageError(f"{given} needs {missing}: a client certificate and its key go together")
    for flag, path in (
        ("--tls-ca", args.tls_ca),
        ("--tls-cert", args.tls_cert),
        ("--tls-key", args.tls_key),
    ):
        if not path:
            continue
        file = Path(path).expanduser()
        if file.is_dir():
            raise UsageError(f"{flag} {path}: is a directory; give the path of a file in it")
        if not file.is_file():
            raise UsageError(f"{flag} {path}: no such file")
        try:
            file.read_bytes()
        except OSError as exc:
            raise UsageError(f"{flag} {path}: cannot read it: {exc.strerror}") from None
    if not (args.tls or args.tls_ca or args.tls_cert or args.tls_server_name):
        return None
    return TLS(
        ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key, server_name=args.tls_server_name
    )


def _query_request(
    args: argparse.Namespace, stdin: TextIO
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The query's text, metadata and data, read and checked before dialing."""
    readers = [
        who
        for who, reads in (
            ("the query -", args.text == "-"),
            ("--metadata @-", args.metadata == "@-"),
            ("--data @-", args.data == "@-"),
        )
        if reads
    ]
    if len(readers) > 1:
        raise UsageError(
            f"{' and '.join(readers)} cannot all read stdin; put the others in files (@FILE)"
        )
    metadata = _json_object("--metadata", args.metadata, stdin)
    data = _json_object("--data", args.data, stdin)
    if args.text == "-":
        text = _read(stdin, "the query on stdin").strip()
    elif args.text is None:
        if "operation" not in data:
            raise UsageError(
                'give the query (or - to read it from stdin), or --data with an "operation"'
            )
        text = ""
    else:
        text = args.text
    if args.conversation:
        metadata["conversation_id"] = _text("--conversation", args.conversation)
    _text("the query", text)
    _check_struct("--metadata", metadata)
    _check_struct("--data", data)
    return text, metadata, data


def _read(stdin: TextIO, what: str) -> str:
    try:
        return stdin.read()
    except UnicodeDecodeError:
        raise UsageError(f"{what} is not UTF-8 text") from None


def _text(what: str, text: str) -> str:
    """``text``, if it can be sent: a lone surrogate (from JSON, or bytes that are not UTF-8 in an argument) cannot."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(
            f"{what} is not valid Unicode text: it holds {text[exc.start]!r} at character {exc.start} "
            "(a lone surrogate, or bytes that are not UTF-8)"
        ) from None
    return text


def _check_struct(flag: str, value: dict[str, Any]) -> None:
    """A UsageError saying what in ``value`` a Struct cannot carry, before dialing."""
    from google.protobuf import struct_pb2

    try:
        struct_pb2.Struct().update(value)
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start] if isinstance(exc.object, str) else "?"
        raise UsageError(
            f"{flag}: a string holds {bad!r}, which is not valid Unicode text "
            "(a lone surrogate, or bytes that are not UTF-8)"
        ) from None
    except OverflowError:
        raise UsageError(
            f"{flag}: a number is too large (JSON numbers are sent as doubles, at most about 1.8e308)"
        ) from None
    except RecursionError:
        raise UsageError(f"{flag}: JSON nested too deeply to send") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{flag}: cannot be sent: {_first_sentence(exc)}") from None


def _first_sentence(exc: BaseException) -> str:
    return str(exc).split(";")[0][:200]


def run_client(args: argparse.Namespace, stdin: TextIO | None = None) -> int:
    """One call as ``args`` say; prints the answer (stdout) or one line why not (stderr)."""
    # Here, not at the top: `chd export`/`chd import` load this module for
    # its commands' arguments, and grpc and protobuf were a third of their
    # start-up (issue 17).
    from chd.client import ChdError, Client

    try:
        tls = _security(args)
        request = _query_request(args, stdin or sys.stdin) if args.command == "query" else None
    except UsageError as exc:
        print(f"chd: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # One try: a person or a script at the prompt decides whether to ask again.
    with Client(
        args.target, token=args.auth_token or None, tls=tls, timeout=args.timeout, retries=0
    ) as chd:
        try:
            if args.command == "purpose":
                print(chd.purpose())
                return 0
            if args.command == "instructions":
                print(chd.instructions())
                return 0
            assert request is not None
            text, metadata, data = request
            response = chd.query(text, metadata=metadata, data=data)
        except ChdError as error:
            print(f"chd: {_explain(error.status, error.message, args)}", file=sys.stderr)
            return EXIT_RPC_BASE + error.status.value[0]
    # chd.client reads whole numbers back as ints: 5, not 5.0.
    answer = {
        "operation": response.operation,
        "result": response.result,
        "metadata": response.metadata,
    }
    if args.json:
        # Sorted, so the same answer is the same bytes (diffs, caches, tests).
        print(json.dumps(answer, indent=2, ensure_ascii=False, sort_keys=True))
    else:
        print(human(answer))
    return 0


def _explain(code: grpc.StatusCode, details: str, args: argparse.Namespace) -> str:
    """One line: the status, and for the two a newcomer meets first, what to do."""
    import grpc

    if code == grpc.StatusCode.UNAVAILABLE and "failed to connect" in details.lower():
        cause = "connection refused" if "connection refused" in details.lower() else details
        return (
            f"UNAVAILABLE: no chd daemon answers at {args.target} ({cause}); "
            "start one with `chd serve`, or point --target (CHD_TARGET) at a running one"
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and details == "Deadline Exceeded":
        # The client's own deadline (the daemon's request_timeout says more).
        return (
            f"DEADLINE_EXCEEDED: no answer from {args.target} within {args.timeout:g} s "
            "(--timeout); is it a chd daemon, and is it overloaded?"
        )
    return f"{code.name}: {details}"
