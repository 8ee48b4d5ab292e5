"""Accepted-message stores: the Protocol and its backends.

The Protocol is `history_service.store.base.AcceptedMessageStore` (as the media
service's is `media_service.store.base.BlobMetadataStore`); the SQLite backend
is `history_service.store.sqlite`, and the PostgreSQL one
`history_service.store.postgres`, imported only when a database URL selects it.
"""

from history_service.store.base import AcceptedMessageStore

__all__ = ["AcceptedMessageStore"]
