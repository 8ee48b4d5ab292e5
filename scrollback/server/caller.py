"""The caller of the RPC in progress, as the auth interceptor established it.

`scrollback.server.interceptors.authenticate` sets the caller's `Principal` (None without
auth) for the call with `set_principal` and resets it at the end. Only the
servicers read it, once per call, through `current_principal()`, and pass it
to the domain code as an argument: no domain module imports this one
(import-linter checks it), so a CLI, a GC job or a test calling the domain
code directly cannot get silently different results.
"""

from __future__ import annotations

import contextlib
import contextvars

from scrollback.principals import Principal

_principal: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "scrollback_principal", default=None
)


def current_principal() -> Principal | None:
    """The caller of the current RPC, or None when auth is not configured (servicers only)."""
    return _principal.get()


def set_principal(principal: Principal | None) -> contextvars.Token[Principal | None]:
    """Set the caller for the current context (the interceptor does this)."""
    return _principal.set(principal)


def reset_principal(token: contextvars.Token[Principal | None]) -> None:
    """Undo `set_principal` (ignored if the context changed meanwhile)."""
    with contextlib.suppress(ValueError):
        _principal.reset(token)
