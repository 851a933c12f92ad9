"""TLS for the server (certificate, key, optional client CA) and for clients."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

__all__ = ["server_credentials", "check_server_files", "ClientSecurity", "open_channel"]


def _read(path: str | None) -> bytes | None:
    return Path(path).expanduser().read_bytes() if path else None


def server_credentials(cert: str, key: str, client_ca: str | None = None) -> grpc.ServerCredentials:
    """Credentials serving ``cert``; with ``client_ca``, clients must present a certificate it signed."""
    return grpc.ssl_server_credentials(
        [(_read(key), _read(cert))],
        root_certificates=_read(client_ca),
        require_client_auth=client_ca is not None,
    )


def check_server_files(cert: str, key: str, client_ca: str | None = None) -> tuple[str, str] | None:
    """(key name, what is wrong) for TLS files grpc would refuse, None when they load.

    grpc only logs its reasons and fails to bind, so ``chd serve`` blamed the
    port (issue 28). Python's OpenSSL reads the same PEM files first and says
    which one is wrong.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for name, path in (("tls_cert", cert), ("tls_client_ca", client_ca)):
        if path is None:
            continue
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(
                cafile=str(Path(path).expanduser())
            )
        except (ssl.SSLError, OSError, ValueError) as exc:
            return name, f"{path} holds no PEM certificate that OpenSSL can read ({_reason(exc)})"

    def no_password() -> bytes:
        raise ValueError("encrypted")

    try:
        context.load_cert_chain(
            str(Path(cert).expanduser()), str(Path(key).expanduser()), password=no_password
        )
    except (ssl.SSLError, OSError, ValueError) as exc:
        if "KEY_VALUES_MISMATCH" in str(exc) or "key values mismatch" in str(exc):
            return "tls_key", f"{key} is not the private key of tls_cert {cert}"
        if "encrypted" in str(exc):
            return "tls_key", f"{key} is encrypted; chd needs an unencrypted PEM private key"
        return "tls_key", f"{key} is not a PEM private key OpenSSL can read ({_reason(exc)})"
    return None


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or str(exc).splitlines()[0][:120]


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How a client connects: plaintext, or TLS trusting ``ca`` (system roots if None).

    ``cert``/``key`` present a client certificate; ``server_name`` overrides the
    name checked against the server's certificate (connecting to 127.0.0.1 with a
    certificate issued for ``localhost``, say).
    """

    tls: bool = False
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None


def open_channel(target: str, security: ClientSecurity = ClientSecurity()) -> grpc.Channel:
    """A channel to ``target`` secured as ``security`` says."""
    if not security.tls:
        return grpc.insecure_channel(target)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(security.ca),
        private_key=_read(security.key),
        certificate_chain=_read(security.cert),
    )
    options = (
        [("grpc.ssl_target_name_override", security.server_name)] if security.server_name else []
    )
    return grpc.secure_channel(target, credentials, options=options)
