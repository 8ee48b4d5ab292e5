"""Rescue of a Codex rollout: `scrollback images` lists its data-URL images, `scrollback slim`
replaces them with valid items (never a data URL holding a note), and `--images downscale`
re-encodes them in place. Real servers on 127.0.0.1 over a Codex sessions root."""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from scrollback.contract.data_url import split_data_url
from tests.support.cli import cli
from tests.support.codex import Rollout, full_rollout, write_rollout
from tests.support.servers import ServerPair

# Whole processes, real terminals or many servers: CI runs these, the quick loop leaves them out.
pytestmark = pytest.mark.slow

SESSION = "0199a7c2-5b1e-7d30-9c4f-3f2a6e8b1d77"


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[ServerPair]:
    codex = tmp_path / "codex" / "sessions"
    codex.mkdir(parents=True)
    pair = ServerPair(tmp_path / "root", tmp_path / "state", codex=codex)
    try:
        pair.start_history(0)
        pair.start_media(0)
        yield pair
    finally:
        pair.close()


def _screenshot(width: int, height: int) -> bytes:
    image = Image.new("RGB", (width, height), (245, 245, 245))
    for y in range(0, height, 20):
        image.paste((30, 30, 30), (30, y, width - 30, y + 2))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _rollout(tmp_path: Path) -> Rollout:
    rollout = full_rollout(SESSION)
    rollout.user("and the wide one", [_screenshot(2600, 1200)])
    write_rollout(tmp_path / "codex" / "sessions", rollout)
    return rollout


def _objects(path: Path) -> list[dict[str, Any]]:
    """The copy's lines that parse (the rollout's torn line is copied as it was)."""
    found = []
    for text in path.read_text().splitlines():
        try:
            found.append(json.loads(text))
        except json.JSONDecodeError:
            continue
    return found


def _wide_prompt(lines: list[dict[str, Any]]) -> dict[str, Any]:
    return next(
        line
        for line in lines
        if line.get("type") == "response_item"
        and line["payload"].get("role") == "user"
        and "wide one" in json.dumps(line)
    )


def _urls(value: object) -> Iterator[str]:
    if isinstance(value, str):
        if value.startswith("data:"):
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _urls(item)
    elif isinstance(value, list):
        for item in value:
            yield from _urls(item)


def test_images_lists_a_rollouts_data_url_images(servers: ServerPair, tmp_path: Path) -> None:
    _rollout(tmp_path)
    listed = cli(servers, "images", SESSION, "--json")
    assert listed.returncode == 0, listed.stderr
    images = json.loads(listed.stdout)["images"]
    # The message images (2 + 1), the tool output's and the compaction's: the items sent.
    assert len(images) == 5, images
    assert all(i["ref"]["entryUuid"].startswith("at-") for i in images)
    wide = images[-1]
    assert (wide["width"], wide["height"], wide["mediaType"]) == (2600, 1200, "image/png")
    assert "over_2000_px_with_many_images" not in wide["problems"]
    fetched = cli(servers, "media", f"{SESSION}/{wide['ref']['entryUuid']}/{wide['index']}",
                  "--pin", wide["ref"]["pin"], "-o", str(tmp_path / "wide.png"))  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr
    table = cli(servers, "images", SESSION)
    assert table.returncode == 0 and "(not sent)" not in table.stdout, table.stdout
    assert f"line {wide['lineNumber']}" in table.stdout, table.stdout


def test_slim_replaces_rollout_images_with_valid_items(servers: ServerPair, tmp_path: Path) -> None:
    _rollout(tmp_path)
    out = tmp_path / "slim.jsonl"
    slimmed = cli(servers, "slim", SESSION, "-o", str(out))
    assert slimmed.returncode == 0, slimmed.stderr
    lines = _objects(out)
    notes = []
    for line in lines:
        for url in _urls(line):  # every data URL left is a valid image
            split = split_data_url(url)
            assert split is not None, url[:80]
            base64.b64decode(split[1], validate=True)
        text = json.dumps(line)
        assert "[payload cut" not in text and "cut by scrollback slim" not in "".join(_urls(line))
        notes += [m for m in text.split('"') if m.startswith("[image cut by scrollback slim")]
    assert len(notes) == 5 and all(f"ref {SESSION}/at-" in n for n in notes), notes
    user = _wide_prompt(lines)
    assert [c["type"] for c in user["payload"]["content"]] == ["input_text", "input_text"]


def test_downscale_reencodes_a_rollout_image_in_place(servers: ServerPair, tmp_path: Path) -> None:
    _rollout(tmp_path)
    out = tmp_path / "small.jsonl"
    slimmed = cli(servers, "slim", SESSION, "-o", str(out), "--images", "downscale")
    assert slimmed.returncode == 0, slimmed.stderr
    lines = _objects(out)
    user = _wide_prompt(lines)
    item = user["payload"]["content"][1]
    assert item["type"] == "input_image"
    split = split_data_url(item["image_url"])
    assert split is not None and split[0] == "image/png"
    with Image.open(io.BytesIO(base64.b64decode(split[1]))) as image:
        assert image.size == (2000, 923)


def test_install_puts_a_rollout_copy_in_codexs_sessions_tree(
    servers: ServerPair, tmp_path: Path
) -> None:
    original = write_rollout(tmp_path / "codex" / "sessions", _rollout(tmp_path))
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "CODEX_HOME": str(tmp_path / "codex")}
    forked = cli(servers, "slim", SESSION, "--fork", "--install", **env)
    assert forked.returncode == 0, forked.stderr
    resume = re.search(r"codex resume (\S+)", forked.stdout)
    assert resume is not None, forked.stdout
    new_id = resume.group(1)
    (copy,) = (tmp_path / "codex" / "sessions").rglob(f"rollout-*-{new_id}.jsonl")
    assert re.fullmatch(r"\d{4}/\d{2}/\d{2}", copy.parent.relative_to(
        tmp_path / "codex" / "sessions").as_posix())  # fmt: skip
    meta = json.loads(copy.read_text().splitlines()[0])
    assert meta["type"] == "session_meta" and meta["payload"]["id"] == new_id
    assert not (home / ".claude").exists(), "never into Claude Code's projects"
    listed = cli(servers, "images", new_id, "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["images"] == []  # served, its images cut
    replaced = cli(servers, "slim", SESSION, "--install", **env)
    assert replaced.returncode == 0, replaced.stderr
    assert f"codex resume {SESSION}" in replaced.stdout
    assert "cut by scrollback slim" in original.read_text()
    (backup,) = original.parent.glob(original.name + ".backup-*")
    assert "cut by scrollback slim" not in backup.read_text()


def test_keep_last_keeps_a_rollouts_last_images(servers: ServerPair, tmp_path: Path) -> None:
    _rollout(tmp_path)
    out = tmp_path / "kept.jsonl"
    slimmed = cli(servers, "slim", SESSION, "-o", str(out), "--keep-last", "1")
    assert slimmed.returncode == 0, slimmed.stderr
    item = _wide_prompt(_objects(out))["payload"]["content"][1]
    assert item["type"] == "input_image" and item["image_url"].startswith("data:image/png;base64,")
    text = out.read_text()
    assert text.count("[image cut by scrollback slim") == 4, "the other four are cut"
