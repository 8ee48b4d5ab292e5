"""The Node example of docs/other-languages.md, run against real servers.

npm installs the example's pinned @grpc/grpc-js and @grpc/proto-loader into
`.tools/node-example/` (a cache kept between runs), then `node read_photo.js`
reads a window and a photo; the photo must be byte-exact. Skipped when node
or npm is missing (under CI=true it fails instead).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.servers import ServerPair, png, user_line

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "docs" / "examples" / "node"
CACHE = REPO / ".tools" / "node-example"


def _node_modules() -> Path:
    """The example's dependencies, installed once per package.json."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs node and npm for the Node example")
        pytest.skip("node or npm not installed")
    manifest = (EXAMPLE / "package.json").read_bytes()
    CACHE.mkdir(parents=True, exist_ok=True)
    installed = CACHE / "package.json"
    modules = CACHE / "node_modules"
    if not (installed.exists() and installed.read_bytes() == manifest and modules.is_dir()):
        installed.write_bytes(manifest)
        subprocess.run(
            ["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(CACHE)],
            check=True,
            timeout=600,
            capture_output=True,
        )
    return modules


def test_node_example_reads_a_window_and_a_byte_exact_photo(
    client_servers: ServerPair, tmp_path: Path
) -> None:
    modules = _node_modules()
    photo = png(11, 160)
    client_servers.transcript("node1").write_bytes(
        user_line("u0", "before") + user_line("p0", "a photo", images=(photo,))
    )
    out = tmp_path / "photo.png"
    result = subprocess.run(
        [
            "node",
            str(EXAMPLE / "read_photo.js"),
            "node1",
            str(out),
            client_servers.history_addr,
            client_servers.media_addr,
        ],
        env={**os.environ, "NODE_PATH": str(modules)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["entries"] == 2 and summary["ref"] == "node1/p0/0"
    assert summary["content_type"] == "image/png"
    assert out.read_bytes() == photo


def test_node_example_reads_the_reason_of_an_error(
    client_servers: ServerPair, tmp_path: Path
) -> None:
    modules = _node_modules()
    result = subprocess.run(
        [
            "node",
            str(EXAMPLE / "read_photo.js"),
            "no-such-session",
            str(tmp_path / "photo.png"),
            client_servers.history_addr,
            client_servers.media_addr,
        ],
        env={**os.environ, "NODE_PATH": str(modules)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    failure = json.loads(result.stderr.strip().splitlines()[-1])
    assert failure["code"] == "NOT_FOUND" and failure["reason"] == "SESSION_NOT_FOUND"


def test_node_example_outside_the_repo_finds_its_protos_or_says_where(
    client_servers: ServerPair, tmp_path: Path
) -> None:
    modules = _node_modules()
    photo = png(12, 160)
    client_servers.transcript("node2").write_bytes(user_line("p0", "a photo", images=(photo,)))
    elsewhere = tmp_path / "my-project"
    elsewhere.mkdir()
    shutil.copy(EXAMPLE / "read_photo.js", elsewhere)
    env = {k: v for k, v in os.environ.items() if k != "SCROLLBACK_PROTOS"}
    argv = ["node", str(elsewhere / "read_photo.js"), "node2", str(tmp_path / "photo.png"),
            client_servers.history_addr, client_servers.media_addr]  # fmt: skip

    def run(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, env={**env, "NODE_PATH": str(modules), **extra}, cwd=elsewhere,
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    lost = run()
    assert lost.returncode == 2, lost.stderr
    assert lost.stderr.count("\n") == 1 and "SCROLLBACK_PROTOS" in lost.stderr
    assert "ENOENT" not in lost.stderr and "    at " not in lost.stderr  # no stack trace
    found = run(SCROLLBACK_PROTOS=str(REPO / "protos"))
    assert found.returncode == 0, found.stderr
    assert (tmp_path / "photo.png").read_bytes() == photo
    # `npm install` beside the example leaves nothing for git to show.
    ignored = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "-q", str(EXAMPLE / "package-lock.json")],
        check=False,
    )
    assert ignored.returncode == 0
