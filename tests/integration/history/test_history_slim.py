"""SlimSession over a real history server on lines larger than the max line size.

A line over the max line size is never held whole: its payloads are found and
pinned in bounded reads (`probe_line_streamed`) and the copy is written from
bounded reads between the replacements. Here the max line size is 64 KiB and
the image lines are several times that.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from scrollback.contract.stripping import MIN_INLINE_LIMIT, find_payload_spans
from scrollback.history.v1 import history_pb2 as hpb
from tests.support.history import HarnessFactory
from tests.support.rescue import b64, image_block, line, noisy_png, picture

MAX_LINE = 64 * 1024


async def _slim(stub: Any, session_id: str, **fields: Any) -> tuple[bytes, hpb.SlimFileEnd]:
    data = bytearray()
    end = hpb.SlimFileEnd()
    async for message in stub.SlimSession(hpb.SlimSessionRequest(session_id=session_id, **fields)):
        if message.HasField("data"):
            data += message.data
        elif message.HasField("file_end"):
            end = message.file_end
    return bytes(data), end


async def test_lines_over_the_max_line_size_are_slimmed_in_bounded_reads(
    history_server: HarnessFactory,
) -> None:
    big = noisy_png(300, 200)  # a real PNG of about 100 KB
    noise = bytes((i * 131 + 7) % 256 for i in range(150_000))  # not an image
    async with history_server(max_line_size=MAX_LINE) as harness:
        first = {
            "type": "user",
            "uuid": "big-1",
            "parentUuid": None,
            "sessionId": "old",
            "message": {
                "role": "user",
                "content": [{"type": "text", "text": "x"}, image_block(big)],
            },
            "toolUseResult": {"file": {"base64": b64(big), "type": "image/png"}},
        }
        second = {
            "type": "user",
            "uuid": "big-2",
            "parentUuid": "big-1",
            "sessionId": "old",
            "message": {"role": "user", "content": [image_block(noise, "image/png")]},
        }
        lines = [line(first), line(second)]
        assert all(len(raw) > MAX_LINE for raw in lines)
        path = harness.transcript("huge")
        tail = b'{"type":"user","message":{"content":"' + b"A" * 90_000  # half-written
        path.write_bytes(b"".join(lines) + tail)
        before = hashlib.sha256(path.read_bytes()).hexdigest()

        copy, end = await _slim(harness.stub, "huge", fork_session_id="forked")
        assert hashlib.sha256(path.read_bytes()).hexdigest() == before
        assert end.lines == 2 and end.omitted_tail_bytes == len(tail)
        assert (end.images_replaced, end.copies_replaced) == (2, 1)
        rows = [json.loads(raw) for raw in copy.splitlines()]
        assert [r["uuid"] for r in rows] == ["big-1", "big-2"]
        assert all(r["sessionId"] == "forked" for r in rows)
        for raw in copy.splitlines():
            assert find_payload_spans(raw, MIN_INLINE_LIMIT) == []
        text = rows[0]["message"]["content"][1]["text"]
        assert "300x200 px" in text and hashlib.sha256(big).hexdigest() in text
        assert "huge/big-1/0" in text
        assert hashlib.sha256(big).hexdigest() in rows[0]["toolUseResult"]["file"]["base64"]
        assert "150,000 bytes" in rows[1]["message"]["content"][0]["text"]

        listed = [
            m.image
            async for m in harness.stub.ListImages(hpb.ListImagesRequest(session_id="huge"))
            if m.HasField("image")
        ]
        assert [(i.api_path, i.width, list(i.problems)) for i in listed] == [
            ("messages.0.content.1", 300, []),
            ("messages.0.content.2", 0, ["undecodable"]),
        ]


async def test_a_multi_block_session_keeps_every_plain_line_byte_for_byte(
    history_server: HarnessFactory,
) -> None:
    """Runs of plain lines are copied whole across block boundaries; image lines are not."""
    picture_bytes = noisy_png(120, 80)
    lines: list[bytes] = []
    for number in range(2400):
        uuid = f"e{number}"
        if number % 400 == 7:
            content: list[object] = [image_block(picture_bytes)]
        elif number % 97 == 3:
            content = [{"type": "text", "text": "long run without a quote " * 60}]
        else:
            content = [{"type": "text", "text": '"quoted" words, ' * 60}]
        lines.append(
            line({"type": "user", "uuid": uuid, "sessionId": "s", "message": {"content": content}})
        )
    lines.insert(
        1000, line({"type": "user", "uuid": "huge", "message": {"content": "x " * 700_000}})
    )
    lines.insert(
        1500,
        line(
            {
                "type": "user",
                "uuid": "huge-image",
                "message": {"content": [image_block(noisy_png(700, 500))]},
            }
        ),
    )
    async with history_server() as harness:
        harness.transcript("blocks").write_bytes(b"".join(lines))
        copy, end = await _slim(harness.stub, "blocks", fork_session_id="f2")
        listed = [
            m.image
            async for m in harness.stub.ListImages(hpb.ListImagesRequest(session_id="blocks"))
            if m.HasField("image")
        ]
    assert [i.line_number for i in listed] == [
        number + 1 for number, raw in enumerate(lines) if b'"image"' in raw
    ]
    copies = copy.split(b"\n")[:-1]
    assert len(copies) == len(lines) == end.lines
    assert end.images_replaced == 7
    for before, after in zip(lines, copies, strict=True):
        if b'"image"' in before:
            assert b"image cut by scrollback slim" in after and len(after) < 2000
        else:
            assert after == before.rstrip(b"\n").replace(b'"sessionId":"s"', b'"sessionId":"f2"')


async def test_downscale_matches_media_type_to_the_new_bytes(
    history_server: HarnessFactory,
) -> None:
    """Transparency stays PNG; a JPEG declared as PNG is re-encoded and declared as what it is."""
    import base64
    import io

    from PIL import Image

    clear = io.BytesIO()
    Image.new("RGBA", (3000, 1000), (10, 20, 30, 0)).save(clear, format="PNG")
    mislabelled = picture(800, 600, "JPEG")
    entry = {
        "type": "user",
        "uuid": "d1",
        "message": {
            "content": [image_block(clear.getvalue()), image_block(mislabelled, "image/png")]
        },
    }
    async with history_server() as harness:
        harness.transcript("down").write_bytes(line(entry))
        copy, end = await _slim(harness.stub, "down", images=hpb.SLIM_IMAGES_DOWNSCALE)
    assert end.images_downscaled == 2
    blocks = json.loads(copy)["message"]["content"]
    sizes = []
    for block in blocks:
        data = base64.b64decode(block["source"]["data"], validate=True)
        with Image.open(io.BytesIO(data)) as image:
            assert block["source"]["media_type"] == Image.MIME[image.format or ""]
            sizes.append((image.format, image.size, image.mode))
    assert sizes == [("PNG", (2000, 667), "RGBA"), ("JPEG", (800, 600), "RGB")]


async def test_a_copy_is_sent_in_pieces_of_at_most_one_mib_whatever_its_lines(
    history_server: HarnessFactory,
) -> None:
    """A payload-less text line of 5 MB, and a run of plain lines longer than a piece, are
    copied whole, in data pieces of at most 1 MiB (under gRPC's 4 MiB message limit)."""
    lines = [
        line({"type": "user", "uuid": "a", "message": {"content": "short"}}),
        line({"type": "user", "uuid": "big", "message": {"content": "words " * 900_000}}),
        *(
            line({"type": "user", "uuid": f"r{n}", "message": {"content": "run " * 2000}})
            for n in range(400)
        ),
    ]
    original = b"".join(lines)
    async with history_server() as harness:
        harness.transcript("texts").write_bytes(original)
        pieces = [
            message.data
            async for message in harness.stub.SlimSession(
                hpb.SlimSessionRequest(session_id="texts")
            )
            if message.HasField("data")
        ]
    assert b"".join(pieces) == original
    assert max(map(len, pieces)) <= 1024 * 1024
    assert all(len(piece) == 1024 * 1024 for piece in pieces[:-1])
