"""The CLI and `Client()` over TLS and mutual TLS: flags and SCROLLBACK_TLS_* variables.

A throwaway CA (generated with `cryptography`) signs a server and a client
certificate; `python -m history_service` serves mutual TLS with them.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Client, RetryPolicy, TlsOptions
from client.errors import Unavailable
from scrollback.server.auth import SecuritySettings
from tests.support.servers import ServerPair, free_port, user_line
from tests.support.tls import Leaf, TestCa

# Whole processes, real terminals or many servers: CI runs these, the quick loop leaves them out.
pytestmark = pytest.mark.slow

SCROLLBACK = str(Path(sys.executable).with_name("scrollback"))


def _certificates(directory: Path) -> dict[str, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    def builder(
        subject: str, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        builder("test CA", name("test CA"), ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    files: dict[str, Path] = {"ca": directory / "ca.pem"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for label, sans in (
        ("server", [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
        ("client", None),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert_builder = builder(label, ca.subject, key)
        if sans:
            cert_builder = cert_builder.add_extension(
                x509.SubjectAlternativeName(sans), critical=False
            )
        cert = cert_builder.sign(ca_key, hashes.SHA256())
        files[label] = directory / f"{label}.pem"
        files[label].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files[label + "_key"] = directory / f"{label}.key"
        files[label + "_key"].write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return files


def _env(**extra: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SCROLLBACK_")} | extra


@pytest.fixture
def mtls_history(tmp_path: Path) -> Iterator[tuple[str, dict[str, Path]]]:
    """A history service requiring client certificates of the throwaway CA."""
    files = _certificates(tmp_path)
    root = tmp_path / "root" / "proj"
    root.mkdir(parents=True)
    (root / "s1.jsonl").write_bytes(user_line("u0", "over tls"))
    addr = f"127.0.0.1:{free_port()}"
    env = _env(
        SCROLLBACK_TLS_CERT=str(files["server"]),
        SCROLLBACK_TLS_KEY=str(files["server_key"]),
        SCROLLBACK_TLS_CLIENT_CA=str(files["ca"]),
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "history_service", "--transcripts", str(tmp_path / "root"),
         "--state", str(tmp_path / "state"), "--addr", addr],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 30
        line = ""
        while "listening" not in line:
            line = process.stderr.readline()
            assert line and time.monotonic() < deadline, "the history service did not start"
        yield addr, files
    finally:
        process.terminate()
        process.wait(20)


def _cli(addr: str, *argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCROLLBACK, "sessions", "--history-addr", addr, "--timeout", "5", *argv],
        capture_output=True, text=True, env=_env(**extra), timeout=60, check=False,
    )  # fmt: skip


def test_cli_speaks_mutual_tls_by_flags_and_by_environment(
    mtls_history: tuple[str, dict[str, Path]],
) -> None:
    addr, files = mtls_history
    plain = _cli(addr)
    assert plain.returncode == 1 and "UNAVAILABLE" in plain.stderr
    by_flags = _cli(
        addr, "--json", "--tls-ca", str(files["ca"]),
        "--tls-cert", str(files["client"]), "--tls-key", str(files["client_key"]),
    )  # fmt: skip
    assert by_flags.returncode == 0, by_flags.stderr
    assert '"s1"' in by_flags.stdout
    by_env = _cli(
        addr,
        "--json",
        SCROLLBACK_TLS_CA=str(files["ca"]),
        SCROLLBACK_TLS_CLIENT_CERT=str(files["client"]),
        SCROLLBACK_TLS_CLIENT_KEY=str(files["client_key"]),
    )
    assert by_env.returncode == 0 and '"s1"' in by_env.stdout, by_env.stderr
    no_client_cert = _cli(addr, "--tls-ca", str(files["ca"]))
    assert no_client_cert.returncode == 1
    half = _cli(addr, "--tls-ca", str(files["ca"]), "--tls-cert", str(files["client"]))
    assert half.returncode == 2 and "go together" in half.stderr
    unreadable = _cli(addr, "--tls-ca", str(files["ca"].with_name("missing.pem")))
    assert unreadable.returncode == 2 and "missing.pem" not in unreadable.stderr


def test_client_library_takes_tls_options(mtls_history: tuple[str, dict[str, Path]]) -> None:
    addr, files = mtls_history
    options = TlsOptions(ca=files["ca"], cert=files["client"], key=files["client_key"])
    with Client(addr, tls=options) as sb:
        assert [s.session_id for s in sb.history.iter_sessions()] == ["s1"]
    with (
        Client(addr, tls=TlsOptions(ca=files["ca"]), retry=RetryPolicy(max_attempts=1)) as sb,
        pytest.raises(Unavailable) as failed,
    ):
        sb.history.list_sessions()
    assert failed.value.addr == addr


def test_tls_failures_say_what_happened_in_one_line(
    mtls_history: tuple[str, dict[str, Path]], cli_servers: ServerPair, tmp_path: Path
) -> None:
    addr, files = mtls_history
    plaintext = _cli(cli_servers.history_addr, "--tls")
    assert plaintext.returncode == 1
    assert plaintext.stderr.count("\n") == 1, plaintext.stderr  # no gRPC core log lines
    assert "TLS handshake failed" in plaintext.stderr and "plaintext" in plaintext.stderr
    assert "no history service answers" not in plaintext.stderr
    # -v shows gRPC's own log lines too.
    verbose = subprocess.run(
        [SCROLLBACK, "-v", "sessions", "--history-addr", cli_servers.history_addr, "--tls",
         "--timeout", "5"],
        capture_output=True, text=True, timeout=60, check=False,
        env={k: v for k, v in _env().items() if k != "GRPC_VERBOSITY"},
    )  # fmt: skip
    assert verbose.returncode == 1 and "ssl_transport_security" in verbose.stderr
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    for argv in (["--tls-ca", str(junk)], ["--tls-ca", str(files["client_key"])]):
        refused = _cli(addr, *argv)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert "--tls-ca" in refused.stderr and "not a PEM certificate" in refused.stderr
        assert str(tmp_path) not in refused.stderr
    mismatched = _cli(
        addr, "--tls-ca", str(files["ca"]),
        "--tls-cert", str(files["client"]), "--tls-key", str(files["server_key"]),
    )  # fmt: skip
    assert mismatched.returncode == 2 and "matching key" in mismatched.stderr
    untrusted = _cli(addr, "--tls")
    assert untrusted.returncode == 1 and untrusted.stderr.count("\n") == 1, untrusted.stderr
    assert "not signed by a trusted CA" in untrusted.stderr


@pytest.fixture
def tls_cases(tmp_path: Path) -> Iterator[tuple[ServerPair, TestCa, TestCa]]:
    """A history server to restart with each test's certificates; a CA and a foreign one."""
    pair = ServerPair(tmp_path / "root", tmp_path / "state")
    (tmp_path / "root" / "proj").mkdir(parents=True)
    try:
        yield pair, TestCa(tmp_path / "pki", "ours"), TestCa(tmp_path / "pki", "foreign")
    finally:
        pair.close()


def _serve(pair: ServerPair, server: Leaf, client_ca: Path | None = None) -> str:
    pair.stop_history()
    pair.security = SecuritySettings(
        tls_cert=server.cert, tls_key=server.key, tls_client_ca=client_ca
    )
    pair.start_history(0)
    return pair.history_addr


def test_each_tls_failure_is_named(tls_cases: tuple[ServerPair, TestCa, TestCa]) -> None:
    """Plaintext at TLS, another name, expired, no or a foreign client certificate: each says so."""
    pair, ours, foreign = tls_cases
    ca = ["--tls-ca", str(ours.cert)]
    client, stranger = ours.client(), foreign.client("stranger")
    theirs = ["--tls-cert", str(stranger.cert), "--tls-key", str(stranger.key)]
    server = ours.server()
    cases: list[tuple[Leaf, Path | None, list[str], str]] = [
        (server, None, [], "the server speaks TLS and this client plaintext"),
        (ours.server("other", ("elsewhere.example",)), None, ca, "certificate is for another name"),
        (ours.server("old", expired=True), None, ca, "the server's certificate has expired"),
        (server, None, ["--tls-ca", str(foreign.cert)], "not signed by a trusted CA"),
        (server, ours.cert, ca, "the server requires a client certificate"),
        (server, ours.cert, [*ca, *theirs], "the server refused the client certificate"),
    ]
    for leaf, client_ca, argv, expected in cases:
        result = _cli(_serve(pair, leaf, client_ca), *argv)
        assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
        assert expected in result.stderr, (expected, result.stderr)
        assert "no history service answers" not in result.stderr
    # The same server with the right client certificate serves.
    mine = ["--tls-cert", str(client.cert), "--tls-key", str(client.key)]
    served = _cli(_serve(pair, server, ours.cert), "--json", *ca, *mine)
    assert served.returncode == 0, served.stderr
