"""Opening a channel to chd: plaintext or TLS, sync or asyncio, and the bearer token.

The same options as ``chd query`` (``--tls``, ``--tls-ca``, ``--tls-cert``/
``--tls-key``, ``--tls-server-name``, ``--auth-token``), written here rather
than imported from chd.service.tls so the client needs nothing of the
server's ring, and so grpc.aio channels are made the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio

__all__ = [
    "TLS",
    "open_channel",
    "open_aio_channel",
    "auth_metadata",
    "token_problem",
    "text_problem",
]


@dataclass(frozen=True, slots=True)
class TLS:
    """Connect with TLS, trusting ``ca`` (a PEM file; the system's roots if None).

    ``cert``/``key`` present a client certificate; ``server_name`` is the name
    checked against the server's certificate (to reach 127.0.0.1 with a
    certificate issued for ``localhost``, say).
    """

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if bool(self.cert) != bool(self.key):
            raise ValueError(
                "a client certificate and its key go together: give both cert and key, or neither"
            )

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: str | None) -> bytes | None:
            return Path(path).expanduser().read_bytes() if path else None

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca),
            private_key=read(self.key),
            certificate_chain=read(self.cert),
        )

    def options(self) -> list[tuple[str, str]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


# gRPC's default 4 MB receive limit is below what a daemon answers for a full
# buffer (200 stores of 31,000 characters are 6 MB): the reply is the
# daemon's, whose own limits bound it, so the client takes any size.
_REPLIES = [("grpc.max_receive_message_length", -1)]


def open_channel(target: str, tls: TLS | None) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(target, options=_REPLIES)
    return grpc.secure_channel(target, tls.credentials(), options=[*tls.options(), *_REPLIES])


def open_aio_channel(target: str, tls: TLS | None) -> grpc.aio.Channel:
    if tls is None:
        return grpc.aio.insecure_channel(target, options=_REPLIES)
    return grpc.aio.secure_channel(target, tls.credentials(), options=[*tls.options(), *_REPLIES])


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...] | None:
    """The call metadata that authenticates with ``token`` (chd.service.auth checks it)."""
    if token is None:
        return None
    if not token:
        raise ValueError("an empty token authenticates nobody; leave it out instead")
    problem = token_problem(token)
    if problem:
        raise ValueError(f"the token {problem}")
    return (("authorization", f"Bearer {token}"),)


# What a token can hold: gRPC metadata and HTTP header values carry visible
# ASCII; `café`, a newline or a byte that is not UTF-8 made the client's own
# grpc answer "INTERNAL: Invalid metadata" or a UnicodeEncodeError traceback
# (outside review of issue 28). Spaces are left out too: HTTP trims them.
_TOKEN = re.compile(r"[!-~]+")


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be sent as a bearer token (None: it can). Never quotes the token."""
    if _TOKEN.fullmatch(token):
        return None
    bad = next(c for c in token if not _TOKEN.fullmatch(c))
    what = "a byte that is not UTF-8" if "\udc80" <= bad <= "\udcff" else f"U+{ord(bad):04X}"
    return (
        f"holds {what}; a token must be visible ASCII characters (! to ~, no spaces or accents), "
        "all a gRPC or HTTP client can send"
    )


def text_problem(value: str) -> str | None:
    """Why ``value`` (a target, host or name from argv, the environment or a file) is not text (None: it is)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "holds bytes that are not UTF-8 (or a lone surrogate); give it as text"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return "holds a control character (a newline, say)"
    return None
