"""The gateway in front of TLS services: it speaks TLS as the CLI does, or the log says why not.

The services serve TLS (mutual TLS for some tests) with certificates of a
throwaway CA; the gateway is configured with the client settings the CLI reads
(client.tls), or with wrong ones, and answers real HTTP requests.
"""

from __future__ import annotations

import logging
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from client.tls import TlsOptions
from scrollback.server.auth import SecuritySettings
from tests.support.cli import SCROLLBACK, cli_env
from tests.support.gateway import SESSION, GatewayStack, photo_session
from tests.support.security import wait_until
from tests.support.servers import free_port
from tests.support.tls import TestCa

GATEWAY_LOG = "scrollback.gateway"


@pytest.fixture
def ca(tmp_path: Path) -> TestCa:
    """The throwaway CA of the services' and the gateway's certificates."""
    return TestCa(tmp_path / "pki", "ours")


def _tls_stack(tmp_path: Path, ca: TestCa, mutual: bool) -> GatewayStack:
    server = ca.server()
    security = SecuritySettings(
        tls_cert=server.cert, tls_key=server.key, tls_client_ca=ca.cert if mutual else None
    )
    stack = GatewayStack(tmp_path, security=security)
    photo_session(stack, entries=6, photos=1)
    return stack


@pytest.fixture
def mutual(tmp_path: Path, ca: TestCa) -> Iterator[GatewayStack]:
    """Both services serving mutual TLS."""
    stack = _tls_stack(tmp_path, ca, mutual=True)
    try:
        yield stack
    finally:
        stack.close()


def _failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == GATEWAY_LOG and "cannot talk" in r.getMessage()
    ]


def test_the_gateway_speaks_mutual_tls_to_the_services(mutual: GatewayStack, ca: TestCa) -> None:
    client = ca.client("gateway")
    mutual.start_gateway(tls=TlsOptions(ca=ca.cert, cert=client.cert, key=client.key))
    window = httpx.get(f"{mutual.url}/api/v1/sessions/{SESSION}/window", timeout=10)
    assert window.status_code == 200, window.text
    photo = next(e for e in window.json()["entries"] if e["mediaRefs"])["mediaRefs"][0]
    answer = httpx.get(mutual.url + photo["url"], timeout=10)
    assert answer.status_code == 200 and answer.content.startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("settings", "cause"),
    [
        ("plaintext", "the server speaks TLS and this client plaintext"),
        ("no client certificate", "the server requires a client certificate"),
    ],
)
def test_a_gateway_that_cannot_talk_says_why_once(
    mutual: GatewayStack,
    ca: TestCa,
    caplog: pytest.LogCaptureFixture,
    settings: str,
    cause: str,
) -> None:
    caplog.set_level(logging.INFO, logger=GATEWAY_LOG)
    mutual.start_gateway(tls=None if settings == "plaintext" else TlsOptions(ca=ca.cert))
    for _ in range(5):
        answer = httpx.get(f"{mutual.url}/api/v1/sessions", timeout=20)
        assert answer.status_code == 503
    assert wait_until(lambda: len(_failures(caplog)) >= 2, 10), _failures(caplog)
    logged = _failures(caplog)
    # One line per service, naming it and the cause; the same cause is not logged again.
    assert len(logged) == 2, logged
    assert any("history service" in line for line in logged)
    assert any("media service" in line for line in logged)
    assert all(cause in line for line in logged), logged


def test_up_with_gateway_serves_over_tls(tmp_path: Path, ca: TestCa) -> None:
    """`scrollback up --gateway` with the services' certificate: the gateway talks TLS."""
    server = ca.server()
    root = tmp_path / "root" / "proj"
    root.mkdir(parents=True)
    (root / "s1.jsonl").write_text(
        '{"type":"user","uuid":"u1","message":{"role":"user","content":"hi"}}\n'
    )
    port = free_port()
    env = cli_env(
        SCROLLBACK_TLS_CERT=str(server.cert),
        SCROLLBACK_TLS_KEY=str(server.key),
        SCROLLBACK_TLS_CA=str(ca.cert),
        GRPC_VERBOSITY="NONE",
    )
    argv = [
        SCROLLBACK, "up", "--gateway", "--gateway-addr", f"127.0.0.1:{port}",
        "--transcripts", str(tmp_path / "root"), "--state", str(tmp_path / "state"),
        "--history-addr", "127.0.0.1:0", "--media-addr", "127.0.0.1:0",
    ]  # fmt: skip
    process = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "the viewer at" in line, (line, process.poll())
        answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/sessions", timeout=20)
        assert answer.status_code == 200, answer.text
        assert [s["sessionId"] for s in answer.json()["sessions"]] == ["s1"]
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)


def test_up_with_gateway_under_mutual_tls_needs_a_client_certificate(
    tmp_path: Path, ca: TestCa
) -> None:
    server = ca.server()
    (tmp_path / "root" / "proj").mkdir(parents=True)
    env = cli_env(
        SCROLLBACK_TLS_CERT=str(server.cert),
        SCROLLBACK_TLS_KEY=str(server.key),
        SCROLLBACK_TLS_CLIENT_CA=str(ca.cert),
        SCROLLBACK_TLS_CA=str(ca.cert),
    )
    up = subprocess.run(
        [SCROLLBACK, "up", "--gateway", "--gateway-addr", "127.0.0.1:0",
         "--transcripts", str(tmp_path / "root"), "--state", str(tmp_path / "state"),
         "--history-addr", "127.0.0.1:0", "--media-addr", "127.0.0.1:0"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert up.returncode == 2, up.stderr
    assert "SCROLLBACK_TLS_CLIENT_CERT" in up.stderr and str(tmp_path) not in up.stderr
