"""The auth interceptor: who calls, from the call's bearer token, or why the call is refused.

With a token table (scrollback.server.auth), `authorization: Bearer <token>`
is required; missing or unknown is UNAUTHENTICATED. The caller's principal is
set in scrollback.server.caller's context variable for the whole call (domain
code reads it; `asyncio.to_thread` carries it into worker threads). A
delegate token may name the principal it acts for (`scrollback-on-behalf-of`)
in the RPCs its entry lists: the call is then that principal's, its projects
and its budget; from any other token, in another RPC, or for a principal of
every project without leave, the header is PERMISSION_DENIED with an
`ErrorInfo` reason. Without a table there is no principal and the header
means nothing. `Health.Watch` is open to all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from scrollback.contract.reasons import Reason
from scrollback.principals import Principal
from scrollback.server.auth import ON_BEHALF_OF, TokenTable
from scrollback.server.caller import reset_principal, set_principal
from scrollback.server.interceptors.call import (
    Context,
    Interceptor,
    Route,
    RpcCall,
    behavior_of,
    current_call,
    rewrap,
)
from scrollback.server.status import abort_with_reason


@dataclass(frozen=True, slots=True)
class _Identity:
    """Who a call's metadata says is calling, or why it is refused."""

    principal: Principal | None
    failure: str = ""
    failure_reason: Reason = Reason.UNAUTHENTICATED
    via: str = ""


def _bearer(metadata: Sequence[Any] | None) -> str | None:
    for item in metadata or ():
        key, value = item[0], item[1]
        if key == "authorization":
            text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
            scheme, _, token = text.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return ""
    return None


def _on_behalf_of(metadata: Sequence[Any] | None) -> list[str]:
    """Every value of the `scrollback-on-behalf-of` metadata."""
    values = []
    for item in metadata or ():
        if item[0] == ON_BEHALF_OF:
            value = item[1]
            values.append(value.decode("utf-8", "replace") if isinstance(value, bytes) else value)
    return values


def identify(tokens: TokenTable | None, method: str, metadata: Sequence[Any] | None) -> _Identity:
    """Who calls `method` (a short RPC name) with this metadata, or why the call is refused."""
    if tokens is None:
        return _Identity(None)  # no principals: `scrollback-on-behalf-of` means nothing
    token = _bearer(metadata)
    if token is None:
        return _Identity(None, "missing bearer token")
    found = tokens.resolve(token)
    if found is None:
        return _Identity(None, "unknown bearer token")
    principal, delegation = found
    names = _on_behalf_of(metadata)
    if not names:
        return _Identity(principal)
    if delegation is None:
        return _Identity(
            None,
            f"only a delegate token may send {ON_BEHALF_OF}",
            Reason.DELEGATION_NOT_ALLOWED,
        )
    # The method first: a delegate learns no principal's name from an RPC it may not call.
    if not delegation.allows(method):
        return _Identity(
            None,
            f"this delegate token may not call {method} for another principal",
            Reason.DELEGATION_NOT_ALLOWED,
        )
    acting = tokens.delegated(names[0]) if len(names) == 1 else None
    if acting is None:
        return _Identity(
            None,
            f"{ON_BEHALF_OF} must name one principal a delegate may act for",
            Reason.UNKNOWN_PRINCIPAL,
        )
    if not delegation.may_act_for(acting):
        return _Identity(
            None,
            "this delegate token may not act for a principal that sees every project",
            Reason.DELEGATION_NOT_ALLOWED,
        )
    return _Identity(acting, via=principal.name)


class Authenticate(Interceptor):
    """Sets each call's principal from its token, or refuses the call."""

    def __init__(self, tokens: TokenTable | None) -> None:
        super().__init__()
        self._tokens = tokens

    def begin(self, call: RpcCall, route: Route, details: grpc.HandlerCallDetails) -> None:
        if route.anonymous:
            return
        identity = identify(self._tokens, route.name, details.invocation_metadata)
        principal = identity.principal
        call.principal = principal
        call.via = identity.via
        call.key = principal.name if principal else ""
        call.refusal = (identity.failure_reason, identity.failure) if identity.failure else None

    def wrap(self, handler: Any, route: Route) -> Any:
        inner = behavior_of(handler)

        async def authenticated(request: Any, context: Context) -> Any:
            call = current_call()
            if call.refusal is not None:
                await abort_with_reason(context, *call.refusal)
            token = set_principal(call.principal)
            try:
                return await inner(request, context)
            finally:
                reset_principal(token)

        return rewrap(handler, authenticated)
