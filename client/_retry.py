"""Running one call with retries: the sync and asyncio loops over the shared RetryPolicy.

Only idempotent calls go through here (and AcceptMessage, made idempotent by
its client_txn_id). Any grpc error that the policy does not retry, or the last
one, is raised as the typed exception of client.errors.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from client._core import RetryPolicy, rpc_code
from client.errors import from_rpc_error

T = TypeVar("T")


def retry_sync(
    attempt: Callable[[], T], policy: RetryPolicy, rng: random.Random, addr: str = ""
) -> T:
    """Run `attempt` until it succeeds, its error is not retryable, or attempts run out.

    The raised error carries `addr`, the address called (for "which service?").
    """
    number = 0
    while True:
        try:
            return attempt()
        except grpc.RpcError as error:
            number += 1
            if number >= policy.max_attempts or not policy.retryable(rpc_code(error)):
                raise from_rpc_error(error, addr=addr) from None
            time.sleep(policy.delay(number - 1, rng))


async def retry_async(
    attempt: Callable[[], Awaitable[T]], policy: RetryPolicy, rng: random.Random, addr: str = ""
) -> T:
    """The asyncio twin of retry_sync."""
    number = 0
    while True:
        try:
            return await attempt()
        except grpc.RpcError as error:
            number += 1
            if number >= policy.max_attempts or not policy.retryable(rpc_code(error)):
                raise from_rpc_error(error, addr=addr) from None
            await asyncio.sleep(policy.delay(number - 1, rng))
