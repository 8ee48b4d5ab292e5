"""The stripped-media marker, read from its one definition in ref.proto.

The marker is the `(scrollback.ref.v1.stripped_media_marker)` file option of
`protos/scrollback/ref/v1/ref.proto`; nothing else spells it out.
"""

from __future__ import annotations

from scrollback.ref.v1 import options_pb2, ref_pb2


def _read_marker() -> str:
    options = ref_pb2.DESCRIPTOR.GetOptions()
    marker: str = options.Extensions[options_pb2.stripped_media_marker]
    if not marker or '"' in marker or "\\" in marker or not marker.isascii():
        # The marker is written between JSON quotes as is: it must need no escaping.
        raise RuntimeError("ref.proto's stripped_media_marker option is missing or unsafe")
    return marker


STRIPPED_MEDIA_MARKER: str = _read_marker()
STRIPPED_MEDIA_MARKER_BYTES: bytes = STRIPPED_MEDIA_MARKER.encode("ascii")
