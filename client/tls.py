"""TLS and mutual TLS for the clients' channels: `TlsOptions`, from arguments or the environment.

    Client(tls=TlsOptions(ca=Path("ca.pem")))                      # TLS, a private CA
    Client(tls=TlsOptions(ca=..., cert=Path("me.pem"), key=...))   # mutual TLS

Without `tls=`, a client reads the environment: `SCROLLBACK_TLS_CA` (PEM roots),
`SCROLLBACK_TLS_CLIENT_CERT` / `SCROLLBACK_TLS_CLIENT_KEY` (the client's
certificate for mutual TLS), `SCROLLBACK_TLS_SERVER_NAME` (the name the server
certificate must carry, when it differs from the address' host) and
`SCROLLBACK_TLS=1` (TLS with the system's roots). None set: a plaintext
channel, as before. The client variables differ from the servers'
`SCROLLBACK_TLS_CERT` / `_KEY` / `_CLIENT_CA`, so one shell can set both.
"""

from __future__ import annotations

import os
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

    def credentials(self) -> grpc.ChannelCredentials:
        """The channel credentials (reads the PEM files)."""
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
        # gRPC takes any bytes here and only fails the handshake later, as if no server
        # answered; Python's ssl says now whether they are certificates and keys.
        checker = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if roots is not None:
            try:
                checker.load_verify_locations(cadata=roots.decode("latin-1"))
            except (ssl.SSLError, ValueError):
                raise TlsConfigError(
                    f"the TLS CA file ({TLS_CA_ENV}, --tls-ca) is not a PEM certificate"
                ) from None
        if self.cert is not None and self.key is not None:
            try:
                checker.load_cert_chain(self.cert, self.key)
            except (ssl.SSLError, ValueError):
                raise TlsConfigError(
                    f"the client certificate and key ({TLS_CLIENT_CERT_ENV} / "
                    f"{TLS_CLIENT_KEY_ENV}, --tls-cert / --tls-key) are not a PEM certificate "
                    "and its matching key"
                ) from None
        return grpc.ssl_channel_credentials(
            root_certificates=roots, private_key=key, certificate_chain=chain
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        """Extra channel options (the server name override, when set)."""
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def handshake_failure(details: str) -> str | None:
    """What a failed TLS handshake named in an UNAVAILABLE's details means; None if none failed.

    gRPC reports a handshake that failed as UNAVAILABLE, like a server that is not there.
    """
    lowered = details.lower()
    if "handshake failed" not in lowered and "handshaker" not in lowered:
        return None
    if "wrong_version_number" in lowered or "http_request" in lowered:
        return "the TLS handshake failed: the server speaks plaintext, not TLS"
    if "certificate_verify_failed" in lowered or "unable to get local issuer" in lowered:
        return "the TLS handshake failed: the server's certificate is not signed by a trusted CA"
    if "peer name" in lowered or "hostname" in lowered:
        return "the TLS handshake failed: the server's certificate does not carry its name"
    if "certificate_required" in lowered or "peer did not return a certificate" in lowered:
        return "the TLS handshake failed: the server asks for a client certificate"
    return "the TLS handshake failed"


def resolve_tls(tls: TlsOptions | bool | None) -> TlsOptions | None:
    """`tls=` of a client: options as given, False for plaintext, None for the environment."""
    if tls is False:
        return None
    if tls is True:
        return TlsOptions.from_env() or TlsOptions()
    return tls if tls is not None else TlsOptions.from_env()
