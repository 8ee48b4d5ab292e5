"""The errors every state backend raises alike, whatever the database behind it.

The services map them to statuses (`STORE_BUSY`, UNAVAILABLE) without knowing
which backend is configured, so they live beside the stores' interface, not in
one backend.
"""

from __future__ import annotations


class StoreBusyError(Exception):
    """The state database could not answer in time: locked past its busy timeout, or unreachable."""

    def __init__(self, message: str = "the state database is busy; retry later") -> None:
        super().__init__(message)
