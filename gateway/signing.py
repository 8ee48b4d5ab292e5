"""Signed photo URLs: an HMAC over (ref, pin, principal, expiry), checked on every photo GET.

An `<img>` cannot send the caller's bearer token, so the window JSON gives
each photo a URL the gateway signed for the caller who was allowed to see it;
the signature maps the request back to that caller. Expiries are rounded up
to a quarter of the lifetime so the same photo keeps the same URL for a while
(the browser's cache is keyed by URL).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Callable
from dataclasses import dataclass


class SignatureError(Exception):
    """A photo URL whose signature is missing, wrong or expired (the reason, for logs)."""


@dataclass(frozen=True, slots=True)
class Grant:
    """What a valid signature grants: one ref (with its pin) to one principal."""

    ref: str
    pin: str
    principal: str
    expires: int


class UrlSigner:
    """Signs and checks (ref, pin, principal, expiry)."""

    def __init__(
        self, key: bytes, ttl_seconds: int, clock: Callable[[], float] = time.time
    ) -> None:
        self._key = key
        self._ttl = ttl_seconds
        self._step = max(1, ttl_seconds // 4)
        self._clock = clock

    def _mac(self, ref: str, pin: str, principal: str, expires: int) -> str:
        # Unit separators keep the fields apart: none of them may contain \x1f.
        message = "\x1f".join((ref, pin, principal, str(expires))).encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def sign(self, ref: str, pin: str, principal: str) -> tuple[int, str]:
        """The expiry (unix seconds) and signature of a URL for `principal`."""
        expires = math.ceil((self._clock() + self._ttl) / self._step) * self._step
        return expires, self._mac(ref, pin, principal, expires)

    def check(self, ref: str, pin: str, principal: str, expires: str, signature: str) -> Grant:
        """The grant of a valid, unexpired signature; SignatureError otherwise."""
        if not signature or not (expires.isascii() and expires.isdigit()) or len(expires) > 12:
            raise SignatureError("missing signature")
        expected = self._mac(ref, pin, principal, int(expires))
        if not hmac.compare_digest(expected, signature):
            raise SignatureError("bad signature")
        if int(expires) < self._clock():
            raise SignatureError("expired signature")
        return Grant(ref, pin, principal, int(expires))
