"""A stderr log handler that writes the lines one event-loop iteration logged in one write.

Every RPC logs one line when it ends (scrollback.server.interceptors). A plain
StreamHandler writes and flushes each line on its own: one write syscall per
call on the event loop thread, which releases the GIL and, under concurrent
calls (the window worker threads want the GIL too), waits to get it back. That
measured ~0.15 ms of the loop's time per call under 16 clients.

`LoopBatchedHandler` keeps the lines logged by the event loop's thread while
the loop runs and writes them together from a callback at the next loop
iteration: the same lines, in the same order, a moment (one iteration) later.
A WARNING or worse, a line logged where no loop runs (start-up, other threads)
and `flush()`/`close()` (logging.shutdown at exit) write what is pending first,
then at once, so nothing is reordered or lost on a clean exit.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TextIO


class LoopBatchedHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler whose INFO lines from a running event loop go out once per iteration."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self._pending: list[str] = []
        # The loop a flush is scheduled on (None: none is).
        self._scheduled: asyncio.AbstractEventLoop | None = None

    def emit(self, record: logging.LogRecord) -> None:
        # Called with self.lock held (Handler.handle).
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        loop: asyncio.AbstractEventLoop | None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or record.levelno >= logging.WARNING:
            self._pending.append(line)
            self._write_pending(record)
            return
        self._pending.append(line)
        if self._scheduled is not loop:
            self._scheduled = loop
            loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write what is pending, then flush the stream."""
        self.acquire()
        try:
            self._scheduled = None
            self._write_pending(None)
        finally:
            self.release()

    def close(self) -> None:
        """Write what is pending, then close as a StreamHandler does."""
        self.flush()
        super().close()

    def _write_pending(self, record: logging.LogRecord | None) -> None:
        if not self._pending:
            super().flush()
            return
        text = "".join(self._pending)
        self._pending.clear()
        try:
            self.stream.write(text)
            super().flush()
        except Exception:
            if record is not None:
                self.handleError(record)
