"""How many photo downloads may be open at once: per photo URL's grant and per client address.

A photo download holds one ReadMedia stream in the media service, counted
against the budget of the principal it is read for, for as long as the
browser takes to read it. A leaked URL fetched by many connections that never
read, or one address opening many downloads, would hold that budget; so the
gateway bounds both before it opens the stream: at most `per_url` downloads of
one grant (ref, pin and principal: the same photo whatever the URL's expiry
or thumbnail size) and `per_client` from one client address (the peer's, or
the address a proxy of SCROLLBACK_GATEWAY_TRUSTED_PROXIES forwards). One more is
429 with a text that says which bound it hit. The counts live in the
gateway's event loop; a download gives its place back when its response ends,
however it ends.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from gateway.errors import HttpError

RETRY_AFTER = {"Retry-After": "1"}
PER_URL_MESSAGE = (
    "too many downloads of this photo are open at once (max_downloads_per_url);"
    " try again when one has finished"
)
PER_CLIENT_MESSAGE = (
    "too many photo downloads from your address are open at once (max_downloads_per_client);"
    " try again when one has finished"
)


class DownloadLimits:
    """Open photo downloads, counted per grant and per client address."""

    def __init__(self, per_url: int, per_client: int) -> None:
        self._per_url = per_url
        self._per_client = per_client
        self._urls: Counter[str] = Counter()
        self._clients: Counter[str] = Counter()

    def open(self, grant: str, client: str) -> Callable[[], None]:
        """Count one more download; its release (idempotent). HttpError 429 over a bound."""
        if self._urls[grant] >= self._per_url:
            raise HttpError(429, "TOO_MANY_DOWNLOADS", PER_URL_MESSAGE, RETRY_AFTER)
        if self._clients[client] >= self._per_client:
            raise HttpError(429, "TOO_MANY_DOWNLOADS", PER_CLIENT_MESSAGE, RETRY_AFTER)
        self._urls[grant] += 1
        self._clients[client] += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            for counts, key in ((self._urls, grant), (self._clients, client)):
                counts[key] -= 1
                if counts[key] <= 0:
                    del counts[key]

        return release

    @property
    def open_count(self) -> int:
        """Downloads open in all."""
        return sum(self._clients.values())

    def open_downloads(self, grant: str = "", client: str = "") -> tuple[int, int]:
        """Downloads open of a grant and from a client address."""
        return self._urls[grant], self._clients[client]
