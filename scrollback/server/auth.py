"""Who is calling, and what they may see: bearer tokens, principals, and the security settings.

No grpc here: the auth interceptor (`scrollback.server.interceptors.authenticate`) reads the
`authorization: Bearer <token>` metadata, looks the token up in a `TokenTable`
and sets the caller's `Principal` for the rest of the call
(`scrollback.server.caller`); the servicers pass it to the domain code as an
argument. With no auth configured there is no principal and everything is
visible (the embedded loopback default).

Token file (YAML or JSON, `SCROLLBACK_AUTH_TOKENS` / `--auth-tokens`)::

    tokens:
      - token_sha256: "<64 hex: sha256 of the token text>"   # preferred
        principal: alice
        projects: ["-Users-alice-proj"]
      - token: "plain-token-text"                            # accepted, discouraged
        principal: ops
        projects: ["*"]                                      # every project
      - token_sha256: "<64 hex>"
        principal: gateway
        delegate: [ReadMedia, StatMedia]    # the RPCs it may call for another principal
        delegate_for_all_projects: false    # the default: never for a principal of ["*"]

Tokens are compared by their sha256 in constant time, against every entry.

A delegate (the HTTP gateway, serving a photo URL it signed for alice) may
send `scrollback-on-behalf-of: alice` beside its token: the call is then
alice's in every respect, her projects and her budget of concurrent calls,
never wider than what alice's own token gets. A delegate acts only in the
RPCs its entry lists (`delegate: [ReadMedia, StatMedia]`, short method names
of the three services), and only for principals that do not see every
project (`projects: ["*"]`) unless its entry says `delegate_for_all_projects:
true`. `delegate: true` means the gateway's photo reads, ReadMedia and
StatMedia (`GATEWAY_DELEGATION`), never more; `false` or `[]` is no delegate.
The name must belong to exactly one principal of the file: one that is no
delegate, whose entries (a name may have several tokens) all list the same
projects. A token not marked `delegate` that sends the header is refused
(PERMISSION_DENIED, reason `DELEGATION_NOT_ALLOWED`), as is a delegate
calling an RPC its entry does not list or acting for a principal of every
project without leave; a delegate naming no such principal gets reason
`UNKNOWN_PRINCIPAL`. Without auth the header means nothing and is ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from scrollback.contract.text import NUL
from scrollback.principals import ALL_PROJECTS, Principal

log = logging.getLogger(__name__)

_HEX = frozenset("0123456789abcdef")
DEFAULT_MAX_STREAMS_PER_PRINCIPAL = 64
# The call metadata in which a delegate token names the principal it acts for.
ON_BEHALF_OF = "scrollback-on-behalf-of"


# What `delegate: true` allows: the media reads of a photo URL the gateway signed.
GATEWAY_DELEGATION = ("ReadMedia", "StatMedia")


class AuthConfigError(ValueError):
    """A token file or security setting that cannot be used (never echoes a token)."""


@cache
def rpc_names() -> frozenset[str]:
    """The short names of every RPC of the three services (what `delegate` may list)."""
    from scrollback.history.v1 import history_pb2
    from scrollback.media.v1 import media_pb2
    from scrollback.search.v1 import search_pb2

    return frozenset(
        method.name
        for module in (history_pb2, media_pb2, search_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    )


@dataclass(frozen=True, slots=True)
class Delegation:
    """What a delegate token may do for another principal: which RPCs, for whom."""

    methods: frozenset[str]
    # May it act for a principal that sees every project (`projects: ["*"]`)?
    for_all_projects: bool = False

    def allows(self, method: str) -> bool:
        """True if the token may call `method` (a short RPC name) for another principal."""
        return method in self.methods

    def may_act_for(self, principal: Principal) -> bool:
        """True if the token may act for `principal` (one of every project needs leave)."""
        return self.for_all_projects or ALL_PROJECTS not in principal.projects


def _delegation(item: Mapping[str, Any], number: int) -> Delegation | None:
    """The delegation a token entry declares, or None (AuthConfigError when malformed)."""
    declared = item.get("delegate", False)
    for_all = item.get("delegate_for_all_projects", False)
    if not isinstance(for_all, bool):
        raise AuthConfigError(
            f"token entry {number}: delegate_for_all_projects must be true or false"
        )
    if declared is True:
        methods = frozenset(GATEWAY_DELEGATION)
        log.info(
            "token entry %d: delegate: true lets it call %s for another principal, nothing else",
            number,
            " and ".join(GATEWAY_DELEGATION),
        )
    elif declared is False:
        methods = frozenset()
    elif isinstance(declared, list) and all(isinstance(m, str) for m in declared):
        unknown = sorted(set(declared) - rpc_names())
        if unknown:
            raise AuthConfigError(
                f"token entry {number}: delegate names no RPC of the services: {unknown[0]!r}"
                " (short method names, e.g. [ReadMedia, StatMedia])"
            )
        methods = frozenset(declared)
    else:
        raise AuthConfigError(
            f"token entry {number}: delegate must be true, false or a list of RPC names"
        )
    if not methods:
        if for_all:
            raise AuthConfigError(f"token entry {number}: delegate_for_all_projects needs delegate")
        return None
    return Delegation(methods, for_all)


def token_digest(token: str) -> bytes:
    """The sha256 of a token's text (what the table stores)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class TokenTable:
    """Token digests -> principals, looked up in constant time per entry."""

    def __init__(
        self,
        entries: list[tuple[bytes, Principal]],
        delegates: Mapping[bytes, Delegation] | None = None,
    ) -> None:
        if not entries:
            raise AuthConfigError("the token file lists no tokens")
        self._entries = entries
        # The delegations of the tokens marked `delegate`, by digest.
        self._delegates: Mapping[bytes, Delegation] = dict(delegates or {})
        self._by_name = _principals_by_name(entries, frozenset(self._delegates))

    @property
    def principals(self) -> list[Principal]:
        """Every principal in the table."""
        return [principal for _, principal in self._entries]

    def _find(self, token: str) -> tuple[bytes, Principal] | None:
        digest = token_digest(token)
        found: tuple[bytes, Principal] | None = None
        for stored, principal in self._entries:
            if hmac.compare_digest(stored, digest) and found is None:
                found = (stored, principal)
        return found

    def lookup(self, token: str) -> Principal | None:
        """The principal of a token, or None; compares against every entry."""
        found = self._find(token)
        return None if found is None else found[1]

    def resolve(self, token: str) -> tuple[Principal, Delegation | None] | None:
        """The principal of a token and what it may do for others (None: no delegate), or None."""
        found = self._find(token)
        return None if found is None else (found[1], self._delegates.get(found[0]))

    def delegated(self, name: str) -> Principal | None:
        """The principal a delegate may act for under `name`, or None (see the module doc)."""
        return self._by_name.get(name)

    @classmethod
    def from_data(cls, data: Any) -> TokenTable:
        """Build from the parsed file (`{"tokens": [...]}`)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("tokens"), list):
            raise AuthConfigError("the token file must hold a 'tokens' list")
        entries: list[tuple[bytes, Principal]] = []
        delegates: dict[bytes, Delegation] = {}
        for number, item in enumerate(data["tokens"], 1):
            if not isinstance(item, Mapping):
                raise AuthConfigError(f"token entry {number} is not a mapping")
            name = item.get("principal")
            if not isinstance(name, str) or not name:
                raise AuthConfigError(f"token entry {number} needs a principal name")
            if NUL in name:
                # A name is stored as text (scrollback.contract.text's rule: no U+0000 but in
                # a message's text), and never collides with the server's own "\0" keys.
                raise AuthConfigError(f"token entry {number}: the principal name holds U+0000")
            projects = item.get("projects", [])
            if not isinstance(projects, list) or not all(isinstance(p, str) for p in projects):
                raise AuthConfigError(f"token entry {number}: projects must be a list of names")
            hashed, plain = item.get("token_sha256"), item.get("token")
            if isinstance(hashed, str) and len(hashed) == 64 and set(hashed.lower()) <= _HEX:
                digest = bytes.fromhex(hashed)
            elif isinstance(plain, str) and plain:
                digest = token_digest(plain)
            else:
                raise AuthConfigError(f"token entry {number} needs token_sha256 (64 hex) or token")
            delegation = _delegation(item, number)
            if delegation is not None:
                delegates[digest] = delegation
            entries.append((digest, Principal(name, frozenset(projects))))
        return cls(entries, delegates)

    @classmethod
    def from_file(cls, path: Path) -> TokenTable:
        """Read a YAML or JSON token file."""
        try:
            text = path.read_bytes()
        except OSError:
            raise AuthConfigError(
                "the token file (SCROLLBACK_AUTH_TOKENS) cannot be read"
            ) from None
        # PyYAML is loaded by a process that reads a YAML token file only.
        import yaml

        try:
            data = orjson.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (orjson.JSONDecodeError, yaml.YAMLError):
            raise AuthConfigError("the token file is not valid YAML or JSON") from None
        return cls.from_data(data)


def _principals_by_name(
    entries: list[tuple[bytes, Principal]], delegates: frozenset[bytes]
) -> dict[str, Principal]:
    """The principals a delegate may name: no delegate, one project list across their entries."""
    seen: dict[str, set[Principal]] = {}
    excluded: set[str] = set()
    for digest, principal in entries:
        seen.setdefault(principal.name, set()).add(principal)
        if digest in delegates:
            excluded.add(principal.name)
    return {
        name: next(iter(found))
        for name, found in seen.items()
        if len(found) == 1 and name not in excluded
    }


def _optional_path(env: Mapping[str, str], name: str) -> Path | None:
    value = env.get(name)
    return Path(value).expanduser() if value else None


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    """Auth, TLS, per-principal limits and the metrics endpoint of one server."""

    auth_tokens: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    max_streams_per_principal: int = DEFAULT_MAX_STREAMS_PER_PRINCIPAL
    # HOST:PORT of the Prometheus endpoint; empty = off.
    metrics_addr: str = ""

    @property
    def auth_configured(self) -> bool:
        """True when bearer tokens are required."""
        return self.auth_tokens is not None

    @property
    def tls_configured(self) -> bool:
        """True when the server speaks TLS."""
        return self.tls_cert is not None

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, metrics_var: str = ""
    ) -> SecuritySettings:
        """SCROLLBACK_AUTH_TOKENS, SCROLLBACK_TLS_{CERT,KEY,CLIENT_CA},
        SCROLLBACK_MAX_STREAMS_PER_PRINCIPAL and the service's metrics variable."""
        source = os.environ if env is None else env
        streams_text = source.get("SCROLLBACK_MAX_STREAMS_PER_PRINCIPAL", "")
        try:
            streams = int(streams_text) if streams_text else DEFAULT_MAX_STREAMS_PER_PRINCIPAL
        except ValueError:
            raise AuthConfigError(
                "SCROLLBACK_MAX_STREAMS_PER_PRINCIPAL must be an integer"
            ) from None
        return cls(
            auth_tokens=_optional_path(source, "SCROLLBACK_AUTH_TOKENS"),
            tls_cert=_optional_path(source, "SCROLLBACK_TLS_CERT"),
            tls_key=_optional_path(source, "SCROLLBACK_TLS_KEY"),
            tls_client_ca=_optional_path(source, "SCROLLBACK_TLS_CLIENT_CA"),
            max_streams_per_principal=streams,
            metrics_addr=source.get(metrics_var, "") if metrics_var else "",
        )

    def validate(self) -> SecuritySettings:
        """Return self if usable; AuthConfigError otherwise (files are read at start)."""
        if self.max_streams_per_principal < 1:
            raise AuthConfigError("the max streams per principal must be at least 1")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise AuthConfigError("SCROLLBACK_TLS_CERT and SCROLLBACK_TLS_KEY go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise AuthConfigError("SCROLLBACK_TLS_CLIENT_CA needs SCROLLBACK_TLS_CERT and _KEY")
        for name, path in (
            ("SCROLLBACK_AUTH_TOKENS", self.auth_tokens),
            ("SCROLLBACK_TLS_CERT", self.tls_cert),
            ("SCROLLBACK_TLS_KEY", self.tls_key),
            ("SCROLLBACK_TLS_CLIENT_CA", self.tls_client_ca),
        ):
            if path is not None and not path.is_file():
                raise AuthConfigError(f"{name} does not name a readable file")
        if self.metrics_addr and ":" not in self.metrics_addr:
            raise AuthConfigError("the metrics address must be HOST:PORT")
        return self

    def token_table(self) -> TokenTable | None:
        """The token table, read now, or None without auth."""
        return None if self.auth_tokens is None else TokenTable.from_file(self.auth_tokens)
