"""TLS and mutual TLS for the clients' channels: `TlsOptions`, from arguments or the environment.

    Client(tls=TlsOptions(ca=Path("ca.pem")))                      # TLS, a private CA
    Client(tls=TlsOptions(ca=..., cert=Path("me.pem"), key=...))   # mutual TLS

Without `tls=`, a client reads the environment: `SCROLLBACK_TLS_CA` (PEM roots),
`SCROLLBACK_TLS_CLIENT_CERT` / `SCROLLBACK_TLS_CLIENT_KEY` (the client's
certificate for mutual TLS), `SCROLLBACK_TLS_SERVER_NAME` (the name the server
certificate must carry, when it differs from the address' host) and
`SCROLLBACK_TLS=1` (TLS with the system's roots). None set: a plaintext
channel. The client variables differ from the servers'
`SCROLLBACK_TLS_CERT` / `_KEY` / `_CLIENT_CA`, so one shell can set both.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

TLS_ENV = "SCROLLBACK_TLS"
TLS_CA_ENV = "SCROLLBACK_TLS_CA"
TLS_CLIENT_CERT_ENV = "SCROLLBACK_TLS_CLIENT_CERT"
TLS_CLIENT_KEY_ENV = "SCROLLBACK_TLS_CLIENT_KEY"
TLS_SERVER_NAME_ENV = "SCROLLBACK_TLS_SERVER_NAME"
_TRUE = frozenset({"1", "true", "yes", "on"})


class TlsConfigError(ValueError):
    """TLS options that cannot be used (a missing file, a certificate without its key)."""


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """How a channel speaks TLS: trusted roots, an optional client certificate, a server name."""

    ca: Path | None = None  # PEM roots; None: the system's roots
    cert: Path | None = None  # the client certificate chain (mutual TLS), with `key`
    key: Path | None = None
    server_name: str = ""  # checked against the server certificate instead of the host

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TlsOptions | None:
        """The options the SCROLLBACK_TLS_* variables give; None when none is set."""
        source = os.environ if env is None else env

        def path(name: str) -> Path | None:
            text = source.get(name, "")
            return Path(text).expanduser() if text else None

        options = cls(
            ca=path(TLS_CA_ENV),
            cert=path(TLS_CLIENT_CERT_ENV),
            key=path(TLS_CLIENT_KEY_ENV),
            server_name=source.get(TLS_SERVER_NAME_ENV, ""),
        )
        enabled = source.get(TLS_ENV, "").strip().lower() in _TRUE
        return options if enabled or options != cls() else None

    def _read(self, path: Path, what: str) -> bytes:
        try:
            return path.read_bytes()
        except OSError:
            # The variable, not the path: error texts carry no filesystem paths.
            raise TlsConfigError(f"cannot read the {what}") from None

    def ssl_context(self) -> ssl.SSLContext:
        """A Python ssl client context that checks the server as the channel does (reads the
        PEM files; TlsConfigError when they are not what they should be)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._load(context)
        if self.ca is None:
            context.load_default_certs()
        return context

    def _load(self, context: ssl.SSLContext) -> tuple[bytes | None, bytes | None, bytes | None]:
        """Load the roots and client certificate into `context`; the PEM bytes read."""
        if (self.cert is None) != (self.key is None):
            raise TlsConfigError(
                f"a client certificate and its key go together ({TLS_CLIENT_CERT_ENV} / "
                f"{TLS_CLIENT_KEY_ENV}, --tls-cert / --tls-key)"
            )
        roots = self._read(self.ca, f"TLS CA file ({TLS_CA_ENV}, --tls-ca)") if self.ca else None
        chain = (
            self._read(self.cert, f"client certificate ({TLS_CLIENT_CERT_ENV}, --tls-cert)")
            if self.cert
            else None
        )
        key = (
            self._read(self.key, f"client key ({TLS_CLIENT_KEY_ENV}, --tls-key)")
            if self.key
            else None
        )
        if roots is not None:
            try:
                context.load_verify_locations(cadata=roots.decode("latin-1"))
            except (ssl.SSLError, ValueError):
                raise TlsConfigError(
                    f"the TLS CA file ({TLS_CA_ENV}, --tls-ca) is not a PEM certificate"
                ) from None
        if self.cert is not None and self.key is not None:
            try:
                context.load_cert_chain(self.cert, self.key)
            except (ssl.SSLError, ValueError):
                raise TlsConfigError(
                    f"the client certificate and key ({TLS_CLIENT_CERT_ENV} / "
                    f"{TLS_CLIENT_KEY_ENV}, --tls-cert / --tls-key) are not a PEM certificate "
                    "and its matching key"
                ) from None
        return roots, chain, key

    def credentials(self) -> grpc.ChannelCredentials:
        """The channel credentials (reads the PEM files)."""
        # gRPC takes any bytes here and only fails the handshake later, as if no server
        # answered; Python's ssl says now whether they are certificates and keys.
        roots, chain, key = self._load(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
        return grpc.ssl_channel_credentials(
            root_certificates=roots, private_key=key, certificate_chain=chain
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        """Extra channel options (the server name override, when set)."""
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


HANDSHAKE_FAILED = "the TLS handshake failed"
PLAINTEXT_SERVER = f"{HANDSHAKE_FAILED}: the server speaks plaintext, not TLS"
UNTRUSTED = f"{HANDSHAKE_FAILED}: the server's certificate is not signed by a trusted CA"
EXPIRED = f"{HANDSHAKE_FAILED}: the server's certificate has expired"
NOT_YET_VALID = f"{HANDSHAKE_FAILED}: the server's certificate is not valid yet"
NAME_MISMATCH = (
    f"{HANDSHAKE_FAILED}: the server's certificate is for another name "
    f"({TLS_SERVER_NAME_ENV} or --tls-server-name sets the name it must carry)"
)
CLIENT_CERT_REQUIRED = (
    f"{HANDSHAKE_FAILED}: the server requires a client certificate (mutual TLS: "
    f"{TLS_CLIENT_CERT_ENV} / {TLS_CLIENT_KEY_ENV}, --tls-cert / --tls-key)"
)
CLIENT_CERT_REFUSED = (
    f"{HANDSHAKE_FAILED}: the server refused the client certificate "
    "(not signed by a CA it trusts for clients)"
)
TLS_EXPECTED = (
    "the server speaks TLS and this client plaintext: give it the CA "
    f"({TLS_CA_ENV} or --tls-ca), or {TLS_ENV}=1 / --tls for the system's roots"
)
# OpenSSL's verify results (X509_V_ERR_*) a handshake of Python's ssl reports.
_VERIFY_CODES = {9: NOT_YET_VALID, 10: EXPIRED, 62: NAME_MISMATCH, 64: NAME_MISMATCH}
# The alerts a server sends when it refuses the client's certificate or has none.
_CLIENT_CERT_ALERTS = (
    "CERTIFICATE_REQUIRED",
    "UNKNOWN_CA",
    "BAD_CERTIFICATE",
    "CERTIFICATE_UNKNOWN",
    "ACCESS_DENIED",
    "HANDSHAKE_FAILURE",
    "DECRYPT_ERROR",
)
# An HTTP/2 client preface and an empty SETTINGS frame: a gRPC server answers with its
# own SETTINGS once it has accepted the connection (and the client's certificate).
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
# The address gRPC names in an UNAVAILABLE's details: `ipv4:1.2.3.4:50051`, `ipv6:[::1]:50051`.
_DETAILS_ADDR = re.compile(r"ipv[46]:(\[[0-9a-fA-F:.]+\]|[0-9.]+):(\d+)")


def handshake_failure(details: str) -> str | None:
    """What a failed TLS handshake named in an UNAVAILABLE's details means; None if none failed.

    gRPC reports a handshake that failed as UNAVAILABLE, like a server that is not there.
    """
    lowered = details.lower()
    if "hostname verification" in lowered or "peer name" in lowered:
        return NAME_MISMATCH
    if "handshake failed" not in lowered and "handshaker" not in lowered:
        return None
    if "wrong_version_number" in lowered or "http_request" in lowered:
        return PLAINTEXT_SERVER
    if "certificate has expired" in lowered:
        return EXPIRED
    if "certificate is not yet valid" in lowered:
        return NOT_YET_VALID
    if "certificate_verify_failed" in lowered or "unable to get local issuer" in lowered:
        return UNTRUSTED
    if "hostname" in lowered:
        return NAME_MISMATCH
    if "certificate_required" in lowered or "peer did not return a certificate" in lowered:
        return CLIENT_CERT_REQUIRED
    return HANDSHAKE_FAILED


def _probe_target(details: str, addr: str) -> tuple[str, int] | None:
    """The host and port to probe: the one gRPC named, else the first of `addr`."""
    found = _DETAILS_ADDR.search(details)
    if found:
        return found.group(1).strip("[]"), int(found.group(2))
    first = addr.split(",")[0].strip()
    for prefix in ("ipv4:", "ipv6:", "dns:///", "dns:"):
        first = first.removeprefix(prefix)
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _verify_failure(error: ssl.SSLCertVerificationError) -> str:
    return _VERIFY_CODES.get(error.verify_code, UNTRUSTED)


def _alert_failure(error: ssl.SSLError, sent_certificate: bool) -> str | None:
    """The failure a TLS alert (or a close right after the handshake) names; None: another."""
    reason = (error.reason or "").upper()
    if "WRONG_VERSION_NUMBER" in reason or "HTTP_REQUEST" in reason or "RECORD_LAYER" in reason:
        return PLAINTEXT_SERVER
    if any(alert in reason for alert in _CLIENT_CERT_ALERTS):
        return CLIENT_CERT_REFUSED if sent_certificate else CLIENT_CERT_REQUIRED
    return None


def probe_tls(host: str, port: int, tls: TlsOptions | None, timeout: float = 2.0) -> str | None:
    """Why a channel with these settings cannot talk to HOST:PORT, found by a handshake of
    Python's ssl with the same settings; None when nothing answers or the handshake works.

    The gRPC core names some failures only as a closed socket (a plaintext client
    at a TLS server, a client certificate the server refused or missed) and some
    not at all (an expired certificate looks untrusted): this handshake says which.
    """
    try:
        raw = socket.create_connection((host, port), timeout)
    except OSError:
        return None  # nothing answers: not a TLS matter
    with raw:
        raw.settimeout(timeout)
        if tls is None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            try:
                with context.wrap_socket(raw, server_hostname=host):
                    return TLS_EXPECTED
            except (ssl.SSLError, OSError):
                return None  # not a TLS server either
        try:
            context = tls.ssl_context()
        except TlsConfigError:
            return None  # said at start-up, where the options are read
        context.set_alpn_protocols(["h2"])
        sent_certificate = tls.cert is not None
        try:
            with context.wrap_socket(raw, server_hostname=tls.server_name or host) as channel:
                # TLS 1.3 servers check the client's certificate after the handshake.
                channel.sendall(_H2_PREFACE)
                answer = channel.recv(9)
        except ssl.SSLCertVerificationError as error:
            return _verify_failure(error)
        except ssl.SSLError as error:
            return _alert_failure(error, sent_certificate)
        except (ConnectionError, TimeoutError, OSError):
            return None
        if answer:
            return None  # the server speaks to this client: the failure was not TLS's
        return CLIENT_CERT_REFUSED if sent_certificate else CLIENT_CERT_REQUIRED


def explain_unavailable(
    details: str, addr: str, tls: TlsOptions | None, timeout: float = 2.0
) -> str | None:
    """What an UNAVAILABLE from `addr` means when TLS is the cause; None when it is not.

    Reads the status details first, then, when they do not say, probes the
    server with the same settings (probe_tls). A server that refuses the TCP
    connection is not probed.
    """
    failure = handshake_failure(details)
    if failure is not None and failure != HANDSHAKE_FAILED:
        return failure
    lowered = details.lower()
    if "connection refused" in lowered or "dns resolution" in lowered:
        return failure
    target = _probe_target(details, addr)
    probed = probe_tls(*target, tls, timeout) if target is not None else None
    return probed or failure


def resolve_tls(tls: TlsOptions | bool | None) -> TlsOptions | None:
    """`tls=` of a client: options as given, False for plaintext, None for the environment."""
    if tls is False:
        return None
    if tls is True:
        return TlsOptions.from_env() or TlsOptions()
    return tls if tls is not None else TlsOptions.from_env()
