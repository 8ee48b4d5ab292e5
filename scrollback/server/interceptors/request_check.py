"""The request-text interceptor: every request message is checked once before a servicer sees it.

A message that does not deserialize (bad wire format, a string not UTF-8) is
INVALID_ARGUMENT with reason MALFORMED_REQUEST, and so is one holding U+0000
in any string but a message's text (reason INVALID_ARGUMENT; the rule is
scrollback.contract.text's). A unary request is refused before the handler
runs; the messages of a request stream are checked as the servicer reads
them (it ends with the same status, mapped by scrollback.server.grpc_support).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from google.protobuf.message import Message

from scrollback.contract.reasons import Reason
from scrollback.contract.text import nul_field
from scrollback.server.grpc_support import MalformedRequestError, NulInTextError
from scrollback.server.interceptors.call import Context, Interceptor, Route, behavior_of, rewrap
from scrollback.server.status import abort_with_reason

MALFORMED_MESSAGE = "malformed request message"


class _Malformed:
    """Stands for a request message that did not deserialize."""


class _NulInText:
    """Stands for a request message with U+0000 where the contract forbids it."""


_MALFORMED = _Malformed()
_NUL_IN_TEXT = _NulInText()


def _safe_deserializer(inner: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """A deserializer that returns _MALFORMED instead of raising (bad wire format, bad UTF-8),
    and _NUL_IN_TEXT for a message the U+0000 rule refuses (scrollback.contract.text)."""
    if inner is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            message = inner(data)
        except Exception:
            return _MALFORMED
        # A string holding U+0000 puts a zero byte on the wire: most messages skip the walk.
        if b"\0" in data and isinstance(message, Message) and nul_field(message) is not None:
            return _NUL_IN_TEXT
        return message

    return deserialize


async def _checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if request is _MALFORMED:
            raise MalformedRequestError()
        if request is _NUL_IN_TEXT:
            raise NulInTextError()
        yield request


class RequestCheck(Interceptor):
    """Refuses request messages that do not parse or break the U+0000 rule."""

    def wrap(self, handler: Any, route: Route) -> Any:
        inner = behavior_of(handler)
        deserializer = _safe_deserializer(handler.request_deserializer)
        if handler.request_streaming:

            async def checked_stream(requests: Any, context: Context) -> Any:
                return await inner(_checked(requests), context)

            return rewrap(handler, checked_stream, deserializer)

        async def checked(request: Any, context: Context) -> Any:
            if request is _MALFORMED:
                await abort_with_reason(context, Reason.MALFORMED_REQUEST, MALFORMED_MESSAGE)
            if request is _NUL_IN_TEXT:
                await abort_with_reason(context, Reason.INVALID_ARGUMENT, str(NulInTextError()))
            return await inner(request, context)

        return rewrap(handler, checked, deserializer)
