"""The gateway's configuration: the services' idiom (scrollback.server.service_config).

A frozen dataclass; `GatewayConfig.from_env(env=None, **overrides)` reads the
environment (its own settings `SCROLLBACK_GATEWAY_<FIELD>`), lets the set
overrides (flags) win and validates. It reads:
- `SCROLLBACK_GATEWAY_ADDR` (default `127.0.0.1:8080`): where the gateway listens;
- `SCROLLBACK_HISTORY_ADDR` / `SCROLLBACK_MEDIA_ADDR`: the services it calls;
- `SCROLLBACK_AUTH_TOKENS`: the services' token file; when set, every API call
  needs `Authorization: Bearer <token>`, which the gateway passes through;
- `SCROLLBACK_GATEWAY_TOKEN_FILE`: a file holding the gateway's own bearer
  token, sent to the media service when it serves a signed photo URL (an
  `<img>` cannot send the caller's token) with the URL's principal as the one
  it acts for; required with auth, and the token file must list it with
  `delegate: [ReadMedia, StatMedia]` or `delegate: true` (scrollback.server.auth);
- `SCROLLBACK_GATEWAY_SIGNING_KEY_FILE`: the HMAC key of photo URLs (at least
  32 bytes; several replicas share it); unset, a random key per process;
- `SCROLLBACK_GATEWAY_URL_TTL_SECONDS` (default 3600): how long a photo URL is valid;
- `SCROLLBACK_GATEWAY_ALLOWED_HOSTS` (comma-separated names, default none): the `Host`
  names answered besides the loopback names and the listening address's host
  (gateway.hosts); `*` answers every name and needs auth;
- `SCROLLBACK_GATEWAY_HEADER_TIMEOUT_SECONDS` (default 30): a connection whose
  request headers have not all arrived this long after it opened (or after its
  next request began) is closed (gateway.server);
- `SCROLLBACK_GATEWAY_MAX_CONNECTIONS` (default 512): connections open at once;
  one more is answered 503 and closed at once;
- `SCROLLBACK_GATEWAY_MAX_CONNECTIONS_PER_CLIENT` (default 64; the global cap
  when that is lower): connections open at once from one client address (a trusted proxy's
  are not counted per address); one more is answered 503 (gateway.protocol);
- `SCROLLBACK_GATEWAY_TRUSTED_PROXIES` (comma-separated IP addresses or networks,
  default none): the peers whose `X-Forwarded-For` / `X-Forwarded-Proto` are
  believed; from any other peer they are ignored and the client address is the
  peer's;
- the services' TLS, as the CLI and client read it (client.tls):
  `SCROLLBACK_TLS_CA`, `SCROLLBACK_TLS_CLIENT_CERT` / `_KEY`,
  `SCROLLBACK_TLS_SERVER_NAME`, `SCROLLBACK_TLS=1`; none set: plaintext channels;
- `SCROLLBACK_GATEWAY_MAX_DOWNLOADS_PER_URL` (default 8) and
  `SCROLLBACK_GATEWAY_MAX_DOWNLOADS_PER_CLIENT` (default 32): photo downloads
  open at once of one photo URL's grant, and from one client address; more are
  429 (gateway.media).
Without auth the gateway binds loopback only, unless `insecure`.
`validate()` raises the shared ConfigError at start-up; no error shows a token or a key.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from client import DEFAULT_HISTORY_ADDR, DEFAULT_MEDIA_ADDR
from client.tls import TlsConfigError, TlsOptions
from gateway.defaults import DEFAULT_ADDR
from gateway.hosts import ANY_HOST, HostRule, is_host_name
from scrollback.server.auth import GATEWAY_DELEGATION, AuthConfigError, TokenTable
from scrollback.server.listening import is_loopback_host
from scrollback.server.service_config import ConfigError, read_fields, with_overrides

log = logging.getLogger(__name__)

SERVICE = "gateway"
DEFAULT_URL_TTL_SECONDS = 3600
DEFAULT_HEADER_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_CONNECTIONS = 512
DEFAULT_MAX_DOWNLOADS_PER_URL = 8
DEFAULT_MAX_DOWNLOADS_PER_CLIENT = 32
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 64
MIN_KEY_BYTES = 32
# The services' own addresses and the services' token file: read under their names.
SHARED_NAMES = {
    "history_addr": "SCROLLBACK_HISTORY_ADDR",
    "media_addr": "SCROLLBACK_MEDIA_ADDR",
    "auth_tokens": "SCROLLBACK_AUTH_TOKENS",
}

__all__ = ["DEFAULT_ADDR", "ConfigError", "GatewayConfig"]


def split_addr(addr: str) -> tuple[str, int]:
    """HOST and PORT of `HOST:PORT` (IPv6 hosts in brackets); ConfigError when malformed."""
    host, sep, port_text = addr.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError("the gateway address must be HOST:PORT")
    return host.strip("[]"), int(port_text)


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Everything the gateway needs to start."""

    addr: str = DEFAULT_ADDR
    history_addr: str = DEFAULT_HISTORY_ADDR
    media_addr: str = DEFAULT_MEDIA_ADDR
    auth_tokens: Path | None = None
    token_file: Path | None = None
    signing_key_file: Path | None = None
    url_ttl_seconds: int = DEFAULT_URL_TTL_SECONDS
    insecure: bool = False
    allowed_hosts: str = ""
    header_timeout_seconds: float = DEFAULT_HEADER_TIMEOUT_SECONDS
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_downloads_per_url: int = DEFAULT_MAX_DOWNLOADS_PER_URL
    max_downloads_per_client: int = DEFAULT_MAX_DOWNLOADS_PER_CLIENT
    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT
    trusted_proxies: str = ""
    # How the gateway's channels to the services speak TLS; None: plaintext.
    tls: TlsOptions | None = None
    # A random key when no key file is configured: photo URLs then last one process.
    generated_key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> GatewayConfig:
        """The environment's settings (os.environ by default), the set overrides winning; validated."""
        source = os.environ if env is None else env
        values = read_fields(cls, source, service=SERVICE, names=SHARED_NAMES)
        values["tls"] = TlsOptions.from_env(source)
        return cls(**with_overrides(values, overrides)).validate()

    @property
    def auth_configured(self) -> bool:
        """True when callers need bearer tokens."""
        return self.auth_tokens is not None

    def validate(self) -> GatewayConfig:
        """Return self if usable; raise ConfigError otherwise (files are read now)."""
        host, _ = split_addr(self.addr)
        for name, value in (("history", self.history_addr), ("media", self.media_addr)):
            if not value or ":" not in value:
                raise ConfigError(f"the {name} service address must be HOST:PORT")
        if not 60 <= self.url_ttl_seconds <= 7 * 86400:
            raise ConfigError("the photo URL lifetime must be from 60 seconds to 7 days")
        if not 0 < self.header_timeout_seconds <= 3600:
            raise ConfigError("the header timeout must be from above 0 to 3600 seconds")
        if self.max_connections < 1:
            raise ConfigError("the gateway's max connections must be at least 1")
        if self.max_connections_per_client < 1:
            raise ConfigError("the gateway's max connections per client must be at least 1")
        self.trusted_proxy_networks()
        if self.tls is not None:
            try:
                self.tls.credentials()
            except TlsConfigError as error:
                raise ConfigError(str(error)) from None
        if self.max_downloads_per_url < 1 or self.max_downloads_per_client < 1:
            raise ConfigError(
                "the gateway's max downloads per URL and per client must be at least 1"
            )
        for name in self.allowed_host_names:
            if name != ANY_HOST and not is_host_name(name):
                raise ConfigError(
                    "SCROLLBACK_GATEWAY_ALLOWED_HOSTS must list host names (no scheme, path or port)"
                )
        if ANY_HOST in self.allowed_host_names and not self.auth_configured:
            raise ConfigError(
                "SCROLLBACK_GATEWAY_ALLOWED_HOSTS may be '*' only with auth (SCROLLBACK_AUTH_TOKENS)"
            )
        if not self.auth_configured and not self.insecure and not is_loopback_host(host):
            raise ConfigError(
                "without SCROLLBACK_AUTH_TOKENS the gateway listens on loopback only "
                "(or pass --insecure)"
            )
        if self.auth_configured:
            self.token_table()
            if self.token_file is None:
                raise ConfigError(
                    "with auth, SCROLLBACK_GATEWAY_TOKEN_FILE must hold the gateway's own token"
                )
            self.check_service_token()
        self.signing_key()
        return self

    @property
    def allowed_host_names(self) -> tuple[str, ...]:
        """The names of `allowed_hosts`, as listed."""
        return tuple(name.strip() for name in self.allowed_hosts.split(",") if name.strip())

    def trusted_proxy_networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        """The networks of `trusted_proxies` (an address is a network of one)."""
        networks = []
        for item in self.trusted_proxies.split(","):
            if not item.strip():
                continue
            try:
                networks.append(ipaddress.ip_network(item.strip(), strict=False))
            except ValueError:
                # Names and `*` too: a proxy is trusted by the address it connects from.
                raise ConfigError(
                    "SCROLLBACK_GATEWAY_TRUSTED_PROXIES must list IP addresses or networks"
                ) from None
        return tuple(networks)

    def host_rule(self) -> HostRule:
        """The `Host` names this gateway answers for."""
        return HostRule(split_addr(self.addr)[0], self.allowed_host_names)

    def token_table(self) -> TokenTable | None:
        """The callers' token table, or None without auth."""
        if self.auth_tokens is None:
            return None
        try:
            return TokenTable.from_file(self.auth_tokens)
        except AuthConfigError as error:
            raise ConfigError(str(error)) from None

    def service_token(self) -> str | None:
        """The gateway's own bearer token, or None without a token file."""
        if self.token_file is None:
            return None
        try:
            token = self.token_file.read_text().strip()
        except (OSError, UnicodeDecodeError):
            raise ConfigError("SCROLLBACK_GATEWAY_TOKEN_FILE cannot be read") from None
        if not token:
            raise ConfigError("SCROLLBACK_GATEWAY_TOKEN_FILE is empty")
        return token

    def check_service_token(self) -> None:
        """The gateway's own token must be in the token file, a delegate for the photo reads."""
        table, token = self.token_table(), self.service_token()
        found = table.resolve(token) if table is not None and token is not None else None
        if table is None or found is None:
            raise ConfigError(
                "the gateway's own token (SCROLLBACK_GATEWAY_TOKEN_FILE) is not in the token file"
            )
        delegation = found[1]
        if delegation is None or not all(delegation.allows(m) for m in GATEWAY_DELEGATION):
            raise ConfigError(
                "the gateway's own token must be marked 'delegate: [ReadMedia, StatMedia]' (or"
                " 'delegate: true') in the token file: it reads each signed photo for the"
                " principal the URL was signed for"
            )
        everything = sorted(
            {p.name for p in table.principals if table.delegated(p.name) == p}
            - {p.name for p in table.principals if delegation.may_act_for(p)}
        )
        if everything:
            # Not an error: their photo URLs are refused, which the operator should know at start.
            log.warning(
                "photo URLs of %s (who see every project) will be refused: the gateway's token"
                " entry needs 'delegate_for_all_projects: true' to read photos for them",
                ", ".join(everything),
            )

    def signing_key(self) -> bytes:
        """The HMAC key of photo URLs."""
        if self.signing_key_file is None:
            return self.generated_key
        try:
            key = self.signing_key_file.read_bytes().strip()
        except OSError:
            raise ConfigError("SCROLLBACK_GATEWAY_SIGNING_KEY_FILE cannot be read") from None
        if len(key) < MIN_KEY_BYTES:
            raise ConfigError(f"the signing key must be at least {MIN_KEY_BYTES} bytes")
        return key
