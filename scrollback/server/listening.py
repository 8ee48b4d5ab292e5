"""Binding rules of the servers, without grpc: which addresses a server may listen on,
why a listen failed (docs/contract.md §6), and the wait for the signal that stops a server.

Kept apart from `grpc_support` so that a service's parent process, which
supervises its workers and serves no RPC, checks its address without loading
grpc (scrollback.server.service_cli `run_service`).
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import signal
import socket

from scrollback.server.worker_role import current_role

log = logging.getLogger(__name__)


class BindRefusedError(ValueError):
    """A non-loopback address without auth and without --insecure."""


class ListenError(ValueError):
    """The server could not listen on its address (port in use, host not of this machine).

    The text names the address and the reason; callers add the flag or
    variable that moves it, which only they know.
    """

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"cannot listen on {address}: {reason}")
        self.address = address


def listening_at(address: str, port: int) -> str:
    """`host:port` a server listens on: its configured host, with the port it got (port 0
    asks for any)."""
    if address.startswith("unix:"):
        return address
    host = host_of(address)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def url_of(address: str, port: int) -> str:
    """The http:// URL a browser on this machine opens for a server on `address` (a wildcard
    host, 0.0.0.0 or ::, is reached on loopback)."""
    host = host_of(address)
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{listening_at(host + ':0', port)}/"


def listening_line(service: str, address: str, port: int) -> str:
    """The start-up line of a server: `history service listening on 127.0.0.1:50051`, and
    which worker says it when the service runs as several worker processes."""
    role = current_role()
    worker = (
        f" (worker {role.index + 1} of {role.count}, pid {os.getpid()})" if role is not None else ""
    )
    return f"{service} listening on {listening_at(address, port)}{worker}"


def listen_failure(error: ListenError, flag: str, variable: str) -> str:
    """The one line every server command prints when it cannot listen: where, why, and the
    flag or variable that moves it (`cannot listen on A: the port is in use; choose another
    with --addr or SCROLLBACK_HISTORY_ADDR`); the command then exits 2."""
    return f"{error}; choose another with {flag} or {variable}"


_LISTEN_REASONS = {
    errno.EADDRINUSE: "the port is in use",
    errno.EADDRNOTAVAIL: "the host is not an address of this machine",
    errno.EACCES: "permission denied (a port below 1024?)",
}


def listen_reason(error: OSError) -> str:
    """Why a bind failed, in the words ListenError uses."""
    return _LISTEN_REASONS.get(error.errno or 0, error.strerror or "bind failed")


def probe_listen(address: str, *, reuse_port: bool = False) -> None:
    """Try the bind with a plain socket first, for a precise reason (grpc only says "failed")."""
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]")
    if not port_text.isdigit() or int(port_text) == 0:
        return
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return  # a host name: grpc resolves it, and its failure is reported below
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As grpc binds: connections of a previous server in TIME_WAIT do not count,
        # a socket listening on the port does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:  # a worker: its parent and siblings hold the port with SO_REUSEPORT
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            probe.bind((host, int(port_text)))
        except OSError as error:
            raise ListenError(address, listen_reason(error)) from None


def host_of(address: str) -> str:
    """The host part of `host:port`, `[v6]:port` or `unix:` addresses."""
    if address.startswith("unix:"):
        return "localhost"
    host, _, _ = address.rpartition(":")
    return host.strip("[]")


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8, ::1, localhost and unix sockets."""
    return is_loopback_host(host_of(address))


def is_loopback_host(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind_allowed(address: str, *, auth_configured: bool, insecure: bool) -> None:
    """Refuse a non-loopback bind without auth unless explicitly insecure."""
    if is_loopback(address) or auth_configured:
        return
    if insecure:
        log.warning("binding a non-loopback address without auth (--insecure)")
        return
    raise BindRefusedError(
        "refusing to bind a non-loopback address without auth; configure auth or pass --insecure"
    )


async def wait_for_shutdown_signal() -> None:
    """Return when SIGINT or SIGTERM arrives."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
