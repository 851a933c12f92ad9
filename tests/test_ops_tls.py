"""TLS with certificates made in the test: server-only and mutual."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from conftest import DaemonProcess, run_chd
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from ops_support import ask, code_of, config, health_status, running

from chd.service.config import ConfigError
from chd.service.tls import ClientSecurity, open_channel


@dataclass(frozen=True)
class Pki:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    stranger_cert: str
    stranger_key: str


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _issue(
    subject: str, key, issuer_name: x509.Name, issuer_key, *, ca: bool = False, server: bool = False
):  # type: ignore[no-untyped-def]
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    elif not ca:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write(directory: Path, name: str, cert, key) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:  # type: ignore[no-untyped-def]
    """A CA, a server certificate for localhost/127.0.0.1, a client it signed and one it did not."""
    directory = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _issue("chd test CA", ca_key, _name("chd test CA"), ca_key, ca=True)
    ca_path, _ = _write(directory, "ca", ca_cert, ca_key)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _write(
        directory,
        "server",
        _issue("localhost", server_key, ca_cert.subject, ca_key, server=True),
        server_key,
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _write(
        directory, "client", _issue("orchestrator", client_key, ca_cert.subject, ca_key), client_key
    )
    other_ca_key = ec.generate_private_key(ec.SECP256R1())
    stranger_key = ec.generate_private_key(ec.SECP256R1())
    stranger = _write(
        directory,
        "stranger",
        _issue("stranger", stranger_key, _name("other CA"), other_ca_key),
        stranger_key,
    )
    return Pki(ca_path, *server, *client, *stranger)


class TestServerTls:
    """With tls_cert and tls_key the daemon speaks TLS only."""

    def test_a_client_trusting_the_ca_is_answered(self, pki):
        """Query and health work over TLS for a client that trusts the CA."""
        with running(tls_cert=pki.server_cert, tls_key=pki.server_key) as server:
            with open_channel(
                f"localhost:{server.port}", ClientSecurity(tls=True, ca=pki.ca)
            ) as channel:
                assert ask(channel, "Add utterance: over TLS").operation == "store"
                assert health_status(channel) == "SERVING"

    def test_a_plaintext_client_cannot_talk_to_a_tls_daemon(self, pki):
        """A plaintext channel gets UNAVAILABLE, never an answer."""
        with running(tls_cert=pki.server_cert, tls_key=pki.server_key) as server:
            with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                assert (
                    code_of(ask, channel, "Get the last 5 utterances", timeout=3)
                    == grpc.StatusCode.UNAVAILABLE
                )

    def test_a_client_that_does_not_trust_the_ca_is_refused(self, pki):
        """Trusting only another CA (the stranger's certificate) fails the handshake."""
        with running(tls_cert=pki.server_cert, tls_key=pki.server_key) as server:
            with open_channel(
                f"localhost:{server.port}", ClientSecurity(tls=True, ca=pki.stranger_cert)
            ) as channel:
                assert (
                    code_of(ask, channel, "Get the last 5 utterances", timeout=3)
                    == grpc.StatusCode.UNAVAILABLE
                )


class TestMutualTls:
    """With tls_client_ca, clients must present a certificate that CA signed."""

    def test_a_client_with_a_signed_certificate_is_answered(self, pki):
        with running(
            tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca
        ) as server:
            security = ClientSecurity(tls=True, ca=pki.ca, cert=pki.client_cert, key=pki.client_key)
            with open_channel(f"localhost:{server.port}", security) as channel:
                assert ask(channel, "Add utterance: mutual").operation == "store"

    @pytest.mark.parametrize("who", ["nobody", "stranger"])
    def test_a_client_without_a_signed_certificate_is_refused(self, pki, who):
        """No certificate, or one from another CA: the handshake fails."""
        with running(
            tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca
        ) as server:
            cert, key = (pki.stranger_cert, pki.stranger_key) if who == "stranger" else (None, None)
            security = ClientSecurity(tls=True, ca=pki.ca, cert=cert, key=key)
            with open_channel(f"localhost:{server.port}", security) as channel:
                assert (
                    code_of(ask, channel, "Get the last 5 utterances", timeout=3)
                    == grpc.StatusCode.UNAVAILABLE
                )

    def test_mutual_tls_counts_as_authentication_for_a_public_host(self, pki):
        """A non-loopback host is allowed with a client CA and no token."""
        cfg = config(
            host="0.0.0.0", tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca
        )
        assert cfg.host == "0.0.0.0"


class TestTlsConfiguration:
    """TLS settings are checked before start-up."""

    def test_a_certificate_without_its_key_is_refused_naming_tls_key(self, pki):
        with pytest.raises(ConfigError) as refused:
            config(tls_cert=pki.server_cert)
        assert refused.value.key == "tls_key"

    def test_a_missing_certificate_file_is_refused_naming_tls_cert(self, tmp_path):
        with pytest.raises(ConfigError) as refused:
            config(tls_cert=str(tmp_path / "absent.pem"), tls_key=str(tmp_path / "absent.key"))
        assert refused.value.key == "tls_cert"

    @pytest.mark.parametrize("key", ["tls_cert", "tls_key", "tls_client_ca"])
    def test_a_path_that_is_a_directory_is_refused_as_one(self, pki, tmp_path, key):
        """It said "no such file" of a path that exists (issue 28 review)."""
        files = {"tls_cert": pki.server_cert, "tls_key": pki.server_key, key: str(tmp_path)}
        with pytest.raises(ConfigError) as refused:
            config(**files)
        assert refused.value.key == key
        assert f"{tmp_path} is a directory; give the path of a file in it" in str(refused.value)


class TestBadTlsFilesAreNamed:
    """A garbage certificate, a key of another certificate or a garbage client CA is refused naming it (issue 28, item 8).

    grpc only logs why and fails to bind, and ``chd serve`` blamed the port.
    """

    @pytest.fixture
    def garbage(self, tmp_path) -> str:  # type: ignore[no-untyped-def]
        path = tmp_path / "garbage.pem"
        path.write_text(
            "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n"
        )
        return str(path)

    @pytest.mark.parametrize(
        "case",
        ["garbage certificate", "garbage key", "key of another certificate", "garbage client CA"],
    )
    def test_each_bad_file_is_refused_naming_its_key(self, pki, garbage, case):
        files = {
            "garbage certificate": (
                {"tls_cert": garbage, "tls_key": pki.server_key},
                "tls_cert",
                "no PEM certificate",
            ),
            "garbage key": (
                {"tls_cert": pki.server_cert, "tls_key": garbage},
                "tls_key",
                "not a PEM private key",
            ),
            "key of another certificate": (
                {"tls_cert": pki.server_cert, "tls_key": pki.stranger_key},
                "tls_key",
                "is not the private key of tls_cert",
            ),
            "garbage client CA": (
                {"tls_cert": pki.server_cert, "tls_key": pki.server_key, "tls_client_ca": garbage},
                "tls_client_ca",
                "no PEM certificate",
            ),
        }
        values, key, message = files[case]
        with pytest.raises(ConfigError) as refused:
            config(**values)
        assert refused.value.key == key and message in str(refused.value)

    def test_chd_serve_says_which_file_in_one_line_and_does_not_blame_the_port(self, pki):
        done = run_chd(
            "serve", "--port", "0", "--tls-cert", pki.server_cert, "--tls-key", pki.stranger_key
        )
        assert done.returncode == 2 and "listening" not in done.stdout
        assert done.stderr.strip().splitlines() == [
            f"chd: configuration key 'tls_key' (flag --tls-key): {pki.stranger_key} is not the private key "
            f"of tls_cert {pki.server_cert}"
        ]

    def test_good_files_still_pass_the_check(self, pki):
        assert (
            config(tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca).tls_cert
            == pki.server_cert
        )


class TestCliOverTls:
    """`chd serve` and `chd query` with token and TLS together, as separate processes."""

    def test_chd_query_over_tls_with_a_token(self, pki):
        process = DaemonProcess(
            "--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--auth-token", "tok"
        )
        try:
            answered = run_chd(
                "query",
                "Add utterance: secure hello",
                "--target",
                f"localhost:{process.port}",
                "--tls-ca",
                pki.ca,
                "--auth-token",
                "tok",
                "--json",
            )
            assert answered.returncode == 0, answered.stderr
            assert '"operation": "store"' in answered.stdout
            plaintext = run_chd(
                "query",
                "Get the last 5 utterances",
                "--target",
                process.target,
                "--auth-token",
                "tok",
                "--timeout",
                "3",
            )
            assert plaintext.returncode == 64 + grpc.StatusCode.UNAVAILABLE.value[0]
        finally:
            process.kill()
