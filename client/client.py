"""`Client`: both services behind one object, and `send` (upload attachments, then accept).

with Client() as sb:                              # SCROLLBACK_*_ADDR or the defaults
                                                  # (tls=TlsOptions(...) or SCROLLBACK_TLS_*)
    accepted = sb.send("abc", "look", images=["shot.png"])
    for entry in sb.history.iter_window("abc"):
        ...
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from client._base import Closing
from client._core import new_txn_id
from client.history import HistoryClient
from client.media import ImageSource, MediaClient
from scrollback.history.v1 import history_pb2 as hpb


class Client(Closing):
    """A history client and a media client; keyword options go to both."""

    def __init__(
        self, history_addr: str | None = None, media_addr: str | None = None, **options: Any
    ) -> None:
        cache = options.pop("cache", None)
        self.history = HistoryClient(history_addr, **options)
        self.media = MediaClient(media_addr, cache=cache, **options)

    def close(self) -> None:
        """Close both channels."""
        self.history.close()
        self.media.close()

    def send(
        self,
        session_id: str | None,
        text: str,
        images: Iterable[ImageSource] = (),
        *,
        chat_key: str | None = None,
        txn_id: str | None = None,
    ) -> hpb.AcceptedMessage:
        """Send a message: upload the images the store lacks, then AcceptMessage.

        One client_txn_id (generated unless given) is used for every retry, so
        the message is accepted exactly once however often the call is retried;
        calling `send` again with the same `txn_id` is also safe.
        """
        uploads = self.media.upload(images)
        response = self.history.accept_message(
            text,
            session_id=session_id,
            chat_key=chat_key,
            attachments=uploads,
            txn_id=txn_id or new_txn_id(),
        )
        return response.message
