"""Blob metadata stores: the Protocol and its backends.

`SqliteBlobMetadataStore` (the embedded default) is exported here; the
PostgreSQL backend lives in media_service.store.postgres and is imported only
when a database URL selects it (`media_service.server.open_metadata_store`).
"""

from media_service.store.base import BlobMetadataStore, BlobRow
from media_service.store.sqlite import SqliteBlobMetadataStore

__all__ = ["BlobMetadataStore", "BlobRow", "SqliteBlobMetadataStore"]
