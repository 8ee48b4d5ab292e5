"""Blob metadata stores: the Protocol and its backends (SQLite now, PostgreSQL later)."""

from media_service.store.base import BlobMetadataStore, BlobRow
from media_service.store.sqlite import SqliteBlobMetadataStore

__all__ = ["BlobMetadataStore", "BlobRow", "SqliteBlobMetadataStore"]
