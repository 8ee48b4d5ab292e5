"""Hydrating accepted-message attachments for readers (no gRPC here).

A reader that needs an attachment's bytes asks `hydrate_attachment`; a blob
that is missing, corrupt or malformed as a ref becomes the text
`[media unavailable: <name> (<mime>)]` instead of failing the whole read.
"""

from __future__ import annotations

from media_service.blobs import BlobStore
from media_service.errors import CorruptMediaError, MediaNotFoundError
from scrollback.contract.refs import RefError, parse_blob_ref


def unavailable_text(name: str, mime: str) -> str:
    """The placeholder for an attachment whose bytes are gone."""
    return f"[media unavailable: {name} ({mime})]"


def hydrate_attachment(store: BlobStore, ref: str, name: str, mime: str) -> bytes | str:
    """The verified bytes of `media:<sha256>`, or the unavailable text."""
    try:
        blob = parse_blob_ref(ref)
        _, data = store.read_verified(blob.sha256)
    except (RefError, MediaNotFoundError, CorruptMediaError):
        return unavailable_text(name, mime)
    return data
