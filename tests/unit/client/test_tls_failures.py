"""What the gRPC core's details of a failed handshake mean (client.tls.handshake_failure)."""

from __future__ import annotations

import pytest

from client.tls import (
    EXPIRED,
    NAME_MISMATCH,
    PLAINTEXT_SERVER,
    UNTRUSTED,
    explain_unavailable,
    handshake_failure,
)

PREFIX = "connections to all backends failing; last error: UNKNOWN: ipv4:127.0.0.1:4242: "


@pytest.mark.parametrize(
    ("details", "meaning"),
    [
        (
            "Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL "
            "routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: certificate has expired: OK",
            EXPIRED,
        ),
        (
            "Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL "
            "routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: unable to get local issuer "
            "certificate: OK",
            UNTRUSTED,
        ),
        (
            "Custom verification check failed with error: UNAUTHENTICATED: Hostname "
            "Verification Check failed.",
            NAME_MISMATCH,
        ),
        (
            "Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:100000f7:SSL "
            "routines:OPENSSL_internal:WRONG_VERSION_NUMBER",
            PLAINTEXT_SERVER,
        ),
        ("Socket closed", None),
        ("failed to connect to all addresses; Connection refused", None),
    ],
)
def test_details_name_the_failure(details: str, meaning: str | None) -> None:
    assert handshake_failure(PREFIX + details) == meaning


def test_a_refused_connection_is_not_probed() -> None:
    # Port 1 on loopback refuses; the details say so, and nothing is probed.
    details = "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: "
    assert explain_unavailable(details + "Connection refused", "127.0.0.1:1", None) is None
