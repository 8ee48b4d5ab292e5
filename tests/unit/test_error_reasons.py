"""The error reasons: one table, each reason with one status code, documented and typed once."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from client import errors
from history_service.errors import ERROR_TABLE as HISTORY_TABLE
from media_service.errors import ERROR_TABLE as MEDIA_TABLE
from scrollback.contract.reasons import STATUS_OF, Reason

REPO = Path(__file__).resolve().parents[2]
# Reasons that name only their status code: the client raises the status code's class.
GENERIC = {Reason.INVALID_ARGUMENT, Reason.UNAUTHENTICATED, Reason.INTERNAL}


def test_every_reason_has_one_status_code() -> None:
    assert set(STATUS_OF) == set(Reason)
    for code in STATUS_OF.values():
        assert grpc.StatusCode[code] is not grpc.StatusCode.OK


@pytest.mark.parametrize("table", [HISTORY_TABLE, MEDIA_TABLE], ids=["history", "media"])
def test_the_error_tables_map_to_reasons(table: dict[type[BaseException], Reason]) -> None:
    assert all(isinstance(reason, Reason) for reason in table.values())


def test_every_reason_is_documented_where_clients_read() -> None:
    protos = "".join(p.read_text() for p in (REPO / "protos").rglob("*.proto"))
    contract = (REPO / "docs" / "contract.md").read_text()
    for reason in Reason:
        assert reason.value in protos, reason
        assert f"`{reason.value}`" in contract, reason


def test_the_client_has_a_class_per_reason_under_its_code() -> None:
    for reason in Reason:
        cls = errors.error_class(grpc.StatusCode[STATUS_OF[reason]], reason)
        if reason in GENERIC:
            assert cls.default_reason is None
        else:
            assert cls.default_reason == reason, reason
        assert cls.default_code.name == STATUS_OF[reason]


def test_an_unknown_or_misplaced_reason_gets_its_status_class() -> None:
    assert errors.error_class(grpc.StatusCode.NOT_FOUND, "SOMETHING_NEW") is errors.NotFound
    # a reason sent with another code than its own is not trusted for the class
    assert errors.error_class(grpc.StatusCode.NOT_FOUND, Reason.PIN_MISMATCH) is errors.NotFound
    assert errors.error_class(grpc.StatusCode.FAILED_PRECONDITION, Reason.PIN_MISMATCH) is (
        errors.PinMismatch
    )
