"""Ending a call with a status that carries its reason (`google.rpc.ErrorInfo`) on the wire.

Every abort of both services goes through `abort_with_reason`: the reason's status
code (`STATUS_OF`) and a safe message, plus a `google.rpc.Status` in the trailing metadata
(`grpc-status-details-bin`, the standard rich-error channel every gRPC language
reads) whose one detail is an `ErrorInfo` with the stable reason
(`scrollback.contract.reasons`). The message stays the human text; the reason is
what programs branch on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from scrollback.contract.reasons import DOMAIN, STATUS_OF, Reason


def error_info(
    reason: Reason, metadata: Mapping[str, str] | None = None
) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo of a reason, in the services' domain."""
    return error_details_pb2.ErrorInfo(reason=reason.value, domain=DOMAIN, metadata=metadata or {})


def status_code(reason: Reason) -> grpc.StatusCode:
    """The status code a reason is always sent with."""
    return grpc.StatusCode[STATUS_OF[reason]]


def status_metadata(
    reason: Reason, message: str, metadata: Mapping[str, str] | None = None
) -> tuple[tuple[str, str | bytes], ...]:
    """The trailing metadata that carries a status with its ErrorInfo."""
    code = status_code(reason)
    detail = any_pb2.Any()
    detail.Pack(error_info(reason, metadata))
    status = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    return tuple(rpc_status.to_status(status).trailing_metadata)


async def abort_with_reason(
    context: grpc.aio.ServicerContext[Any, Any],
    reason: Reason,
    message: str,
    metadata: Mapping[str, str] | None = None,
) -> NoReturn:
    """Abort the call with the reason's status code, `message` and an ErrorInfo naming `reason`.

    Trailing metadata set earlier in the call (the worker's pid) is kept: abort's
    own trailing metadata would otherwise replace it.
    """
    earlier = tuple(context.trailing_metadata() or ())
    trailing = earlier + status_metadata(reason, message, metadata)
    await context.abort(status_code(reason), message, trailing_metadata=trailing)
    raise AssertionError("unreachable")  # context.abort always raises
