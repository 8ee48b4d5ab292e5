"""The services' stderr log handler: one write per loop iteration, nothing lost or reordered."""

from __future__ import annotations

import asyncio
import io
import logging

from scrollback.server.log_batching import LoopBatchedHandler


class _Writes(io.StringIO):
    """A stream that counts its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def _logger(stream: _Writes) -> tuple[logging.Logger, LoopBatchedHandler]:
    handler = LoopBatchedHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger(f"test.log_batching.{id(stream)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    return logger, handler


async def test_lines_of_one_loop_iteration_are_one_write_in_order() -> None:
    stream = _Writes()
    logger, _handler = _logger(stream)
    for index in range(5):
        logger.info("rpc %d", index)
    assert stream.getvalue() == ""  # not yet: at the next iteration
    await asyncio.sleep(0)
    assert stream.getvalue() == "".join(f"INFO rpc {i}\n" for i in range(5))
    assert stream.writes == 1
    logger.info("later")
    await asyncio.sleep(0)
    assert stream.getvalue().endswith("INFO rpc 4\nINFO later\n")
    assert stream.writes == 2


async def test_a_warning_goes_out_at_once_after_what_is_pending() -> None:
    stream = _Writes()
    logger, _handler = _logger(stream)
    logger.info("first")
    logger.warning("stalled")
    assert stream.getvalue() == "INFO first\nWARNING stalled\n"
    await asyncio.sleep(0)
    assert stream.getvalue() == "INFO first\nWARNING stalled\n"


async def test_flush_and_close_write_what_is_pending() -> None:
    stream = _Writes()
    logger, handler = _logger(stream)
    logger.info("pending")
    handler.flush()
    assert stream.getvalue() == "INFO pending\n"
    logger.info("at exit")
    handler.close()
    assert stream.getvalue() == "INFO pending\nINFO at exit\n"


def test_outside_a_loop_each_line_is_written_at_once() -> None:
    stream = _Writes()
    logger, _handler = _logger(stream)
    logger.info("starting")
    assert stream.getvalue() == "INFO starting\n"


def test_a_loop_that_ended_with_lines_pending_does_not_hold_later_ones() -> None:
    stream = _Writes()
    logger, handler = _logger(stream)

    async def log_and_leave() -> None:
        logger.info("in the loop")

    def log_and_stop() -> None:
        logger.info("in the loop")
        loop.stop()  # callbacks scheduled now (the flush) never run

    loop = asyncio.new_event_loop()
    loop.call_soon(log_and_stop)
    loop.run_forever()
    loop.close()
    assert stream.getvalue() == ""
    logger.info("after")  # no loop: written at once, the pending line first
    assert stream.getvalue() == "INFO in the loop\nINFO after\n"
    asyncio.run(log_and_leave())
    assert stream.getvalue().endswith("INFO in the loop\n")
    handler.close()
