"""Which `Host` names the gateway answers for: a guard against DNS rebinding.

A web page on `evil.example` can point its own name at 127.0.0.1 and then
read whatever a loopback gateway answers, since the browser sees one origin.
The request still names `evil.example` in its `Host` header, so the gateway
answers only for the names it is meant to be reached by: the loopback names
(`localhost`, `127.0.0.1`, `[::1]`, on any port), the host of its own
listening address (unless that is a wildcard such as `0.0.0.0`) and the names
of `SCROLLBACK_GATEWAY_ALLOWED_HOSTS`. `*` there answers every name, which only
a gateway with auth may use. Anything else, or no `Host` at all, is 421
(Misdirected Request) with the gateway's JSON error body. Ports are not
compared: a rebinding page controls the name, not the port.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import error_response

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ANY_HOST = "*"
# A DNS name or IPv4 address, or an IPv6 address in brackets: what an allow-list may hold.
_HOST_NAME = re.compile(r"[a-z0-9.-]+|\[[0-9a-f:.]+\]")


def is_host_name(name: str) -> bool:
    """True for a name an allow-list may hold (no scheme, port, path or wildcard)."""
    text = name.strip().lower()
    return _HOST_NAME.fullmatch(text) is not None and host_of_header(text) is not None


def normalize_host(name: str) -> str:
    """A host name as compared: lower case, an IPv6 address without brackets."""
    return name.strip().lower().removeprefix("[").removesuffix("]")


def host_of_header(value: str) -> str | None:
    """The host of a `Host` header (`name`, `name:port`, `[v6]`, `[v6]:port`); None if malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or not host:
            return None
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return None
    else:
        host, _, port = value.partition(":")
        rest = f":{port}" if ":" in value else ""
        if not host or ":" in port:
            return None
    if rest and not (rest.startswith(":") and rest[1:].isascii() and rest[1:].isdigit()):
        return None
    return host


def is_wildcard_host(host: str) -> bool:
    """True for an address that means "every interface" (`0.0.0.0`, `::`, empty)."""
    if not host:
        return True
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


class HostRule:
    """The names one gateway answers for."""

    def __init__(self, listen_host: str, allowed: Iterable[str]) -> None:
        names = set(LOOPBACK_NAMES)
        listen = normalize_host(listen_host)
        if not is_wildcard_host(listen):
            names.add(listen)
        extra = {normalize_host(name) for name in allowed}
        self.any_host = ANY_HOST in extra
        self.names = frozenset(names | (extra - {ANY_HOST}))

    def allows(self, header: str | None) -> bool:
        """True if a request with this `Host` header value is answered."""
        if header is None:
            return False
        host = host_of_header(header)
        if host is None:
            return False
        return self.any_host or host in self.names


class HostGuard:
    """ASGI middleware answering 421 to a request for a name its `HostRule` does not allow."""

    def __init__(self, app: ASGIApp, rule: HostRule) -> None:
        self.app = app
        self.rule = rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = next(
                (value.decode("latin-1") for key, value in scope["headers"] if key == b"host"),
                None,
            )
            if not self.rule.allows(host):
                response = error_response(421, "MISDIRECTED_REQUEST")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
