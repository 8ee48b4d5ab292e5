"""`client.aio.data_view`: a ReadMedia data chunk sliced out of its serialized message."""

from __future__ import annotations

import pytest

from client.aio import data_view
from client.errors import DataLoss
from scrollback.media.v1 import media_pb2


@pytest.mark.parametrize("size", [0, 1, 127, 128, 65536, 300_000])
def test_a_data_message_is_sliced(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    wire = media_pb2.ReadMediaResponse(data=data).SerializeToString()
    view = data_view(wire)
    assert view is not None and view.obj is wire and bytes(view) == data


def test_metadata_is_no_chunk() -> None:
    wire = media_pb2.ReadMediaResponse(
        metadata=media_pb2.MediaMetadata(sha256="0" * 64)
    ).SerializeToString()
    assert data_view(wire) is None


def test_other_encodings_of_a_chunk_are_parsed() -> None:
    # The data field followed by an unknown field (a newer server): parsed, not sliced.
    wire = media_pb2.ReadMediaResponse(data=b"abc").SerializeToString() + b"\x78\x01"
    view = data_view(wire)
    assert view is not None and bytes(view) == b"abc"


def test_a_message_that_does_not_parse_is_data_loss() -> None:
    with pytest.raises(DataLoss):
        data_view(b"\x12\x05ab")
