"""The content type of media, from its magic numbers only (docs/contract.md §10).

PNG, JPEG, GIF, WebP, AVIF and HEIC/HEIF are images, safe to show inline;
everything else (SVG and HTML included) is application/octet-stream, not
safe inline. The declared media type is never consulted. The media service
types what it stores with it; clients check with it that a file sent as an
image is one.
"""

from __future__ import annotations

from dataclasses import dataclass

OCTET_STREAM = "application/octet-stream"
# How many leading bytes `sniff` needs at most.
SNIFF_BYTES = 64

_AVIF_BRANDS = frozenset({b"avif", b"avis"})
_HEIC_BRANDS = frozenset({b"heic", b"heix", b"hevc", b"heim", b"heis", b"hevm", b"hevs"})
_HEIF_BRANDS = frozenset({b"mif1", b"msf1"})


@dataclass(frozen=True, slots=True)
class Sniffed:
    """A content type and whether it may be shown inline."""

    content_type: str
    safe_inline: bool


_OPAQUE = Sniffed(OCTET_STREAM, False)


def _iso_bmff(head: bytes) -> Sniffed | None:
    if len(head) < 12 or head[4:8] != b"ftyp":
        return None
    box_size = int.from_bytes(head[0:4], "big")
    major = head[8:12]
    # Compatible brands follow the minor version, up to the box's end.
    end = min(len(head), box_size) if box_size >= 16 else 12
    brands = [major] + [head[i : i + 4] for i in range(16, end - 3, 4)]
    if major in _AVIF_BRANDS or (major not in _HEIC_BRANDS and _AVIF_BRANDS & set(brands)):
        return Sniffed("image/avif", True)
    if (_HEIC_BRANDS | _HEIF_BRANDS) & set(brands):
        # The proto names one type for the HEIF family: image/heic.
        return Sniffed("image/heic", True)
    return None


def sniff(head: bytes) -> Sniffed:
    """The content type of media whose first bytes are `head` (at least SNIFF_BYTES if it has them)."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return Sniffed("image/png", True)
    if head.startswith(b"\xff\xd8\xff"):
        return Sniffed("image/jpeg", True)
    if head.startswith((b"GIF87a", b"GIF89a")):
        return Sniffed("image/gif", True)
    if len(head) >= 12 and head[0:4] == b"RIFF" and head[8:12] == b"WEBP":
        return Sniffed("image/webp", True)
    return _iso_bmff(head) or _OPAQUE
