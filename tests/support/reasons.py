"""Reading the ErrorInfo reason of a failed call, as any gRPC client would, from the status details."""

from __future__ import annotations

from typing import cast

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from scrollback.contract.reasons import DOMAIN, STATUS_OF, Reason


def error_infos(error: grpc.RpcError) -> list[error_details_pb2.ErrorInfo]:
    """Every ErrorInfo in the call's google.rpc.Status details (none when it sent no Status)."""
    status = rpc_status.from_call(cast(grpc.Call, error))
    if status is None:
        return []
    infos = []
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            infos.append(info)
    return infos


def assert_reason(error: grpc.RpcError, reason: Reason | None = None) -> Reason:
    """The call carries exactly one Scrollback ErrorInfo, agreeing with its status code.

    With `reason`, it must be that one. Returns the reason sent.
    """
    infos = error_infos(error)
    assert len(infos) == 1, (error.code(), infos)  # type: ignore[attr-defined]
    info = infos[0]
    assert info.domain == DOMAIN
    sent = Reason(info.reason)
    assert STATUS_OF[sent] == error.code().name, (sent, error.code())  # type: ignore[attr-defined]
    if reason is not None:
        assert sent == reason, (sent, reason)
    return sent
