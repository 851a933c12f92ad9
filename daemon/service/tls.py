"""TLS for the server (certificate, key, optional client CA) and for clients."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

__all__ = ["server_credentials", "ClientSecurity", "open_channel"]


def _read(path: str | None) -> bytes | None:
    return Path(path).expanduser().read_bytes() if path else None


def server_credentials(cert: str, key: str, client_ca: str | None = None) -> grpc.ServerCredentials:
    """Credentials serving ``cert``; with ``client_ca``, clients must present a certificate it signed."""
    return grpc.ssl_server_credentials(
        [(_read(key), _read(cert))],
        root_certificates=_read(client_ca),
        require_client_auth=client_ca is not None,
    )


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
    options = [("grpc.ssl_target_name_override", security.server_name)] if security.server_name else []
    return grpc.secure_channel(target, credentials, options=options)
