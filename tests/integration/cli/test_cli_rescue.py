"""`scrollback slim` and `scrollback images` over real servers, on a session images have broken."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from client import Client, media_selector
from client.errors import InvalidArgument, RefInvalid
from scrollback.contract.blocks import iter_objects
from scrollback.contract.stripping import MIN_INLINE_LIMIT, find_payload_spans
from scrollback_app.cli import main
from tests.support.rescue import (
    AGENT,
    PROJECT,
    SESSION,
    BrokenSession,
    broken_session,
    image_block,
    line,
    noisy_png,
    picture,
)
from tests.support.servers import ServerPair


def run(capsys: pytest.CaptureFixture[str], pair: ServerPair, *argv: str) -> tuple[int, str, str]:
    addrs = ["--history-addr", pair.history_addr, "--media-addr", pair.media_addr]
    command, *rest = argv
    code = main([command, *addrs, *rest])
    out, err = capsys.readouterr()
    return code, out, err


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_copy(original: bytes, copy: bytes, *, expected_lines: int, session_id: str = "") -> None:
    """The copy keeps every complete line, the uuid chain and all but the media, byte for byte."""
    originals = original.split(b"\n")[:expected_lines]
    copies = copy.split(b"\n")
    assert copy.endswith(b"\n") and len(copies) - 1 == expected_lines
    for before, after in zip(originals, copies, strict=False):
        assert find_payload_spans(after, MIN_INLINE_LIMIT) == []
        if not before.strip():
            assert after == before
            continue
        old, new = json.loads(before), json.loads(after)
        assert (old.get("uuid"), old.get("parentUuid")) == (new.get("uuid"), new.get("parentUuid"))
        if "sessionId" in old:
            assert new["sessionId"] == (session_id or old["sessionId"])
        if b'"image"' not in before and b'"document"' not in before and not session_id:
            assert after == before
        for obj in iter_objects(new):
            assert not (obj.get("type") in ("image", "document") and "source" in obj)
            if obj.get("type") == "text":
                assert isinstance(obj["text"], str) and obj["text"].strip()
        content = new.get("message", {}).get("content")
        if content is not None:
            assert isinstance(content, list) and isinstance(old["message"]["content"], list)
            assert len(content) == len(old["message"]["content"])
            for a, b in zip(old["message"]["content"], content, strict=True):
                if a.get("type") == "tool_result":
                    assert b["type"] == "tool_result" and b["tool_use_id"] == a["tool_use_id"]
                    assert isinstance(b["content"], list)


def test_slim_to_a_file_cuts_every_image_and_keeps_every_line(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair, tmp_path: Path
) -> None:
    session = broken_session(cli_servers.root)
    before = (sha(session.path), sha(session.subagent_path))
    out = tmp_path / "out" / "rescued.jsonl"
    out.parent.mkdir()
    code, printed, err = run(capsys, cli_servers, "slim", SESSION, "-o", str(out), "--json")
    assert code == 0, err
    summary = json.loads(printed)
    assert (sha(session.path), sha(session.subagent_path)) == before
    copy = out.read_bytes()
    check_copy(session.path.read_bytes(), copy, expected_lines=session.complete_lines)
    main_file, agent_file = summary["files"]
    assert main_file["images_replaced"] == 4 and main_file["documents_replaced"] == 1
    assert main_file["copies_replaced"] == 1
    assert main_file["omitted_tail_bytes"] == len(session.tail)

    rows = [json.loads(x) for x in copy.splitlines() if x.strip()]
    screenshot_text = rows[1]["message"]["content"][1]["text"]
    assert "image/png" in screenshot_text and "2400x1600 px" in screenshot_text
    assert hashlib.sha256(session.screenshot).hexdigest() in screenshot_text
    assert f"{len(session.screenshot):,} bytes" in screenshot_text
    read_copy = rows[3]["toolUseResult"]["file"]["base64"]
    assert "image/jpeg" in read_copy and hashlib.sha256(session.read_image).hexdigest() in read_copy
    assert "application/pdf" in rows[5]["message"]["content"][1]["text"]

    # The ref a stand-in names still serves the exact bytes it cut.
    ref, pin = screenshot_text.split("ref ")[1].split(",")[0].split(" pin ")
    with Client(cli_servers.history_addr, cli_servers.media_addr) as sb:
        assert sb.media.read_media(media_selector(ref, pin)).data == session.screenshot

    agent_copy = out.parent / "rescued" / "subagents" / f"{AGENT}.jsonl"
    assert agent_file["output"] == str(agent_copy)
    check_copy(session.subagent_path.read_bytes(), agent_copy.read_bytes(), expected_lines=2)
    assert "640x480 px" in agent_copy.read_text()

    # To stdout: the same bytes (the session alone).
    code, printed, err = run(capsys, cli_servers, "slim", SESSION)
    assert code == 0 and printed.encode() == copy and "images and 1 documents cut" in err


def test_slim_fork_install_writes_the_new_id_everywhere(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair
) -> None:
    session = broken_session(cli_servers.root)
    before = (sha(session.path), sha(session.subagent_path))
    code, printed, err = run(
        capsys,
        cli_servers,
        "slim",
        SESSION,
        "--fork",
        "--install",
        "--projects-dir",
        str(cli_servers.root),
        "--json",
    )
    assert code == 0, err
    summary = json.loads(printed)
    new_id = summary["copy_session_id"]
    assert new_id != SESSION and summary["installed"]
    assert (sha(session.path), sha(session.subagent_path)) == before
    project = cli_servers.root / PROJECT
    copy = (project / f"{new_id}.jsonl").read_bytes()
    check_copy(
        session.path.read_bytes(), copy, expected_lines=session.complete_lines, session_id=new_id
    )
    agent = (project / new_id / "subagents" / f"{AGENT}.jsonl").read_bytes()
    check_copy(session.subagent_path.read_bytes(), agent, expected_lines=2, session_id=new_id)
    # Only the refs in the stand-ins still name the original: it is what serves the bytes.
    assert f'"sessionId":"{SESSION}"'.encode() not in copy + agent
    assert not list(project.rglob("*.slim-partial"))

    # The installed copy is a session Scrollback serves, and it holds no image.
    code, printed, err = run(capsys, cli_servers, "images", new_id, "--json", "--no-subagents")
    assert code == 0, err
    assert json.loads(printed)["images"] == []


def test_slim_install_in_place_moves_the_original_to_a_backup(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair
) -> None:
    session = broken_session(cli_servers.root)
    original = session.path.read_bytes()
    before = sha(session.path)
    code, printed, err = run(
        capsys, cli_servers, "slim", SESSION, "--install", "--projects-dir", str(cli_servers.root)
    )
    assert code == 0, err
    backups = list(session.path.parent.glob(f"{SESSION}.jsonl.backup-*"))
    assert len(backups) == 1 and sha(backups[0]) == before
    assert f"is now {backups[0]}" in printed and f"claude --resume {SESSION}" in printed
    check_copy(original, session.path.read_bytes(), expected_lines=session.complete_lines)
    agent_backups = list(session.subagent_path.parent.glob("*.backup-*"))
    assert len(agent_backups) == 1


def _decoded_images(copy: bytes) -> list[tuple[dict[str, Any], bytes]]:
    found = []
    for raw in copy.splitlines():
        if not raw.strip():
            continue
        for obj in iter_objects(json.loads(raw)):
            if obj.get("type") == "image" and "source" in obj:
                found.append((obj, base64.b64decode(obj["source"]["data"], validate=True)))
    return found


def test_slim_downscale_keeps_images_within_the_limits(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair, tmp_path: Path
) -> None:
    session = broken_session(cli_servers.root)
    out = tmp_path / "small.jsonl"
    code, printed, err = run(
        capsys, cli_servers, "slim", SESSION, "-o", str(out), "--images", "downscale", "--json"
    )
    assert code == 0, err
    copy = out.read_bytes()
    images = _decoded_images(copy)
    assert len(images) == 4  # screenshot, read image, the tiny one twice; the PDF is text
    for block, data in images:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            assert max(image.size) <= 2000 and len(data) <= 5 * 1024 * 1024
            assert block["source"]["media_type"] == Image.MIME[image.format or ""]
    _, screenshot = images[0]
    with Image.open(io.BytesIO(screenshot)) as image:
        assert image.size == (2000, 1333)
    assert images[1][1] == session.read_image  # already within the limits: kept as it was
    assert summary_of(printed)["images_downscaled"] == 1
    assert find_payload_spans(copy.splitlines()[3], MIN_INLINE_LIMIT) != []

    code, printed, err = run(
        capsys,
        cli_servers,
        "slim",
        SESSION,
        "-o",
        str(out),
        "--images",
        "downscale",
        "--max-side",
        "500",
        "--max-bytes",
        "40000",
    )
    assert code == 0, err
    for _, data in _decoded_images(out.read_bytes()):
        with Image.open(io.BytesIO(data)) as image:
            assert max(image.size) <= 500 and len(data) <= 40000

    code, printed, err = run(
        capsys, cli_servers, "slim", SESSION, "-o", str(out), "--keep-last", "1", "--json"
    )
    assert code == 0, err
    kept = _decoded_images(out.read_bytes())
    assert [data for _, data in kept] == [session.tiny]  # the last message.content image
    assert summary_of(printed)["images_kept"] == 1


def summary_of(printed: str) -> dict[str, Any]:
    files: list[dict[str, Any]] = json.loads(printed)["files"]
    return files[0]


def test_images_json_agrees_with_the_pixels(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair
) -> None:
    session = broken_session(cli_servers.root)
    code, printed, err = run(capsys, cli_servers, "images", SESSION, "--json")
    assert code == 0, err
    listing = json.loads(printed)
    rows = [
        (i["sessionId"], i["apiPath"], i["kind"], i.get("index"), i["width"], i["height"])
        for i in listing["images"]
    ]
    assert rows == [
        (SESSION, "messages.0.content.1", "image", 0, 2400, 1600),
        (SESSION, "messages.2.content.0.content.0", "image", 0, 900, 700),
        (SESSION, "messages.2.content.2", "document", None, 0, 0),
        (SESSION, "messages.2.content.3", "image", 0, 4, 4),
        (AGENT, "messages.0.content.2", "image", 0, 640, 480),  # two user entries, one message
    ]
    blobs = [session.screenshot, session.read_image, session.pdf, session.tiny, session.agent_image]
    for info, data in zip(listing["images"], blobs, strict=True):
        assert info["sizeBytes"] == str(len(data))
        assert info["sha256"] == hashlib.sha256(data).hexdigest()
        assert info["problems"] == []
    assert listing["images"][0]["ref"]["uri"] == f"{SESSION}/u-1/0"
    assert [i["lineNumber"] for i in listing["images"]] == ["2", "4", "6", "6", "2"]
    assert listing["totals"] == {
        "images": 4,
        "documents": 1,
        "withProblems": 0,
        "sizeBytes": str(sum(len(b) for b in blobs)),
    }

    code, printed, err = run(
        capsys,
        cli_servers,
        "images",
        SESSION,
        "--json",
        "--at",
        "messages.2.content.0: image exceeds 5 MB maximum",
    )
    assert code == 0, err
    assert [i["apiPath"] for i in json.loads(printed)["images"]] == [
        "messages.2.content.0.content.0"
    ]
    code, printed, err = run(capsys, cli_servers, "images", SESSION, "--at", "messages.9.content.0")
    assert code == 3 and "no image" in err


def test_images_names_the_problems(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair
) -> None:
    wide = picture(2100, 60)
    huge_side = picture(8100, 20)
    undecodable = b"\x89PNG\r\n\x1a\n" + b"not really" * 200
    lines = [
        line(
            {
                "type": "user",
                "uuid": f"u{n}",
                "parentUuid": f"u{n - 1}" if n else None,
                "message": {"role": "user", "content": [image_block(wide)]},
            }
        )
        for n in range(21)
    ]
    lines.append(
        line(
            {
                "type": "assistant",
                "uuid": "a",
                "parentUuid": "u20",
                "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            }
        )
    )
    lines.append(
        line(
            {
                "type": "user",
                "uuid": "last",
                "parentUuid": "a",
                "message": {
                    "role": "user",
                    "content": [image_block(huge_side), image_block(undecodable)],
                },
            }
        )
    )
    cli_servers.transcript("many").write_bytes(b"".join(lines))
    code, printed, err = run(capsys, cli_servers, "images", "many", "--json")
    assert code == 0, err
    images = json.loads(printed)["images"]
    assert len(images) == 23
    # 21 consecutive user entries are one API message; the assistant's is the next.
    assert images[20]["apiPath"] == "messages.0.content.20"
    assert all(i["problems"] == ["over_2000_px_with_many_images"] for i in images[:21])
    assert images[21]["apiPath"] == "messages.2.content.0"
    # The two rules are independent: a side over 8000 px among many images breaks both.
    assert images[21]["problems"] == ["over_8000_px", "over_2000_px_with_many_images"]
    assert images[22]["problems"] == ["undecodable"]
    assert json.loads(printed)["totals"]["withProblems"] == 23

    code, out, err = run(capsys, cli_servers, "images", "many")
    assert code == 0 and "over 8000 px" in out and "23 with problems" in out


def test_empty_session_and_errors(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair, tmp_path: Path
) -> None:
    cli_servers.transcript("empty").write_bytes(b"")
    out = tmp_path / "e.jsonl"
    code, printed, err = run(capsys, cli_servers, "slim", "empty", "-o", str(out), "--json")
    assert code == 0, err
    assert out.read_bytes() == b"" and summary_of(printed)["lines"] == 0
    code, printed, err = run(capsys, cli_servers, "images", "empty", "--json")
    assert code == 0 and json.loads(printed)["images"] == []

    code, printed, err = run(capsys, cli_servers, "slim", "missing", "-o", str(out))
    assert code == 3 and err.startswith("scrollback: NOT_FOUND")
    code, printed, err = run(capsys, cli_servers, "images", "missing")
    assert code == 3

    with Client(cli_servers.history_addr, cli_servers.media_addr) as sb:
        with pytest.raises(RefInvalid):
            list(sb.history.slim_session("empty", fork_session_id="not/an id"))
        with pytest.raises(InvalidArgument) as caught:
            list(sb.history.slim_session("empty", downscale=True, max_side=3))
        assert caught.value.reason == "INVALID_ARGUMENT"


def _unused(session: BrokenSession) -> None:
    del session


def test_downscale_says_why_images_were_cut(
    capsys: pytest.CaptureFixture[str], cli_servers: ServerPair, tmp_path: Path
) -> None:
    small = noisy_png(16, 16)
    bomb = small[:16] + (9000).to_bytes(4, "big") * 2 + small[24:]  # its IHDR claims 81 MP
    entry = {"type": "user", "uuid": "w1",
             "message": {"role": "user", "content": [image_block(bomb)]}}  # fmt: skip
    cli_servers.transcript("why").write_bytes(line(entry))
    out = tmp_path / "why.jsonl"
    code, printed, err = run(
        capsys, cli_servers, "slim", "why", "-o", str(out), "--images", "downscale"
    )
    assert code == 0, err
    assert "1 cut, not downscaled: over 64,000,000 pixels, never decoded" in printed, printed
    code, printed, err = run(
        capsys, cli_servers, "slim", "why", "-o", str(out), "--images", "downscale", "--json"
    )
    (file,) = json.loads(printed)["files"]
    assert file["not_downscaled"] == [
        {"reason": "over 64,000,000 pixels, never decoded", "images": 1}
    ]
