"""Media replicas sharing one blobs volume: start-up cleanup spares live uploads.

A replica starting up removes temp files left by dead uploads, but never the
temp file of an upload another replica is still writing (it holds a lock on
it until the blob is published).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from media_service.blob_paths import BlobPaths
from media_service.blobs import BlobStore
from media_service.store.sqlite import SqliteBlobMetadataStore


def test_startup_cleanup_spares_another_replicas_upload_in_progress(tmp_path: Path) -> None:
    stores = [
        BlobStore(BlobPaths(tmp_path), SqliteBlobMetadataStore(tmp_path), max_blob_size=1 << 20)
        for _ in range(2)
    ]
    writer, starting = stores
    data = b"x" * 5000
    upload = writer.begin_upload(None, hashlib.sha256(data).hexdigest(), len(data), "image/png")
    upload.write(data[:1000])
    dead = writer.paths.temp_dir / "dead.part"
    dead.write_bytes(b"left by a crash")
    assert starting.remove_stale_temps() == 1
    assert not dead.exists()
    assert len(writer.paths.temp_files()) == 1, "the live upload's temp file is kept"
    upload.write(data[1000:])
    written = upload.finish()
    assert written.size_bytes == len(data) and writer.paths.temp_files() == []
    assert starting.read_verified(written.ref.removeprefix("media:"))[1] == data
    for store in stores:
        store.metadata.close()
