"""The sync and asyncio clients are one API: same methods, same signatures.

The asyncio client (client/aio.py) is written by hand beside the sync one
(client/history.py, client/media.py, client/client.py). This test is what keeps
them one source of truth: every public method of a sync class exists on its
asyncio twin with the same parameters (names, kinds, defaults, annotations),
async where the sync one blocks, and an async iterator where the sync one is
an iterator. Behaviour parity is checked over real servers in
tests/integration/client/test_client_parity_calls.py.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from client import (
    AsyncClient,
    AsyncHistoryClient,
    AsyncMediaClient,
    Client,
    HistoryClient,
    MediaClient,
)

PAIRS = [
    (HistoryClient, AsyncHistoryClient),
    (MediaClient, AsyncMediaClient),
    (Client, AsyncClient),
]

# How an asyncio annotation is spelled in the sync client.
_ASYNC_TO_SYNC = [
    (r"\bgrpc\.aio\.Channel\b", "grpc.Channel"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncIterable\b", "Iterable"),
    (r"\bAsyncClosing\b", "Closing"),
    (r"\bAsyncMediaStream\b", "MediaStream"),
    (r"\bAsync(\w+Client)\b", r"\1"),
    (r"\bAsyncClient\b", "Client"),
]


def _sync_spelling(annotation: Any) -> str:
    text = str(annotation)
    for pattern, replacement in _ASYNC_TO_SYNC:
        text = re.sub(pattern, replacement, text)
    return text


def _public_methods(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") or name == "__init__"
    }


def _shape(function: Any, *, from_async: bool) -> list[tuple[str, Any, Any, str]]:
    signature = inspect.signature(function)
    spell = _sync_spelling if from_async else str
    return [
        (name, parameter.kind, parameter.default, spell(parameter.annotation))
        for name, parameter in signature.parameters.items()
    ]


@pytest.mark.parametrize(("sync_cls", "async_cls"), PAIRS, ids=lambda c: c.__name__)
def test_same_public_methods(sync_cls: type, async_cls: type) -> None:
    sync_methods = set(_public_methods(sync_cls))
    async_methods = set(_public_methods(async_cls))
    assert sync_methods - async_methods == set(), f"missing on {async_cls.__name__}"
    assert async_methods - sync_methods == set(), f"missing on {sync_cls.__name__}"


@pytest.mark.parametrize(("sync_cls", "async_cls"), PAIRS, ids=lambda c: c.__name__)
def test_same_signatures(sync_cls: type, async_cls: type) -> None:
    sync_methods = _public_methods(sync_cls)
    async_methods = _public_methods(async_cls)
    for name, sync_method in sync_methods.items():
        async_method = async_methods[name]
        assert _shape(async_method, from_async=True) == _shape(sync_method, from_async=False), (
            f"{async_cls.__name__}.{name} differs from {sync_cls.__name__}.{name}"
        )
        sync_return = str(inspect.signature(sync_method).return_annotation)
        async_return = _sync_spelling(inspect.signature(async_method).return_annotation)
        assert async_return == sync_return, f"{name} returns differ"


@pytest.mark.parametrize(("sync_cls", "async_cls"), PAIRS, ids=lambda c: c.__name__)
def test_async_twin_is_async_where_sync_blocks(sync_cls: type, async_cls: type) -> None:
    for name, sync_method in _public_methods(sync_cls).items():
        if name == "__init__":
            continue
        async_method = getattr(async_cls, name)
        if inspect.isgeneratorfunction(sync_method) or "Iterator[" in str(
            inspect.signature(sync_method).return_annotation
        ):
            assert inspect.isasyncgenfunction(async_method), f"{name} should be an async iterator"
        else:
            assert inspect.iscoroutinefunction(async_method), f"{name} should be async"
