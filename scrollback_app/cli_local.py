"""`scrollback images` and `scrollback slim` without the services: the same history service
code, run in this process over the local transcripts.

Both commands only read transcript files, so when no history service answers at a loopback
address (or with `--local`), the command starts a history server of its own on a unix
socket in a private temporary directory (mode 0700: no other user can connect), with a
throwaway state directory and no search indexing, runs against it, and stops it. A history
address elsewhere is never replaced by the local files: that would answer about another
machine's sessions with this one's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from client.errors import Unavailable
from scrollback.server.listening import is_loopback

Handler = Callable[[argparse.Namespace], int]


def projects_dir(explicit: str | None) -> Path:
    """Where Claude Code keeps its transcripts on this machine."""
    if explicit:
        return Path(explicit).expanduser()
    config = os.environ.get("CLAUDE_CONFIG_DIR")
    base = Path(config).expanduser() if config else Path.home() / ".claude"
    return base / "projects"


def codex_sessions_dir() -> Path:
    """Where Codex CLI keeps its rollouts on this machine: SCROLLBACK_CODEX_SESSIONS (a
    directory), else `$CODEX_HOME/sessions`, else `~/.codex/sessions`."""
    configured = os.environ.get("SCROLLBACK_CODEX_SESSIONS", "")
    if configured and "://" not in configured:
        return Path(configured).expanduser()
    home = os.environ.get("CODEX_HOME")
    return (Path(home).expanduser() if home else Path.home() / ".codex") / "sessions"


def with_local_fallback(handler: Handler) -> Handler:
    """`handler`, run in-process on the local transcripts with `--local`, or when no
    history service answers at the (loopback) history address."""

    def run(args: argparse.Namespace) -> int:
        if args.local:
            return _locally(handler, args)
        try:
            return handler(args)
        except Unavailable as error:
            if error.addr != args.history_addr or not is_loopback(args.history_addr):
                raise
            print(
                f"scrollback: no history service answers at {args.history_addr}; "
                "reading the local transcripts in this process (as --local does)",
                file=sys.stderr,
            )
            return _locally(handler, args)

    run.__doc__ = handler.__doc__
    return run


def _locally(handler: Handler, args: argparse.Namespace) -> int:
    if not getattr(args, "verbose", False):
        # The in-process service's start and per-call log lines are not the command's output.
        logging.getLogger().setLevel(logging.WARNING)
    with local_history(getattr(args, "projects_dir", None)) as address:
        local = argparse.Namespace(**vars(args))
        local.history_addr = address
        # The private socket speaks plaintext, whatever TLS the services use.
        local.tls, local.tls_ca, local.tls_cert, local.tls_key = False, None, None, None
        local.local_plaintext = True
        return handler(local)


@contextlib.contextmanager
def local_history(projects: str | None = None) -> Iterator[str]:
    """A history server of this process over the transcripts `scrollback up` would serve
    (SCROLLBACK_TRANSCRIPTS, else Claude Code's projects directory, and Codex's sessions);
    its address, a unix socket only this user can reach."""
    from history_service.config import HistoryConfig
    from history_service.server import start_history_server
    from scrollback.server.auth import SecuritySettings

    with tempfile.TemporaryDirectory(prefix="scrollback-local-") as private:
        address = f"unix:{private}/history.sock"
        overrides: dict[str, Any] = {}
        if not os.environ.get("SCROLLBACK_TRANSCRIPTS"):
            overrides["transcripts"] = projects_dir(projects)
        config = HistoryConfig.from_env(
            addr=address,
            state_dir=Path(private) / "state",
            search_indexing=False,
            **overrides,
        )
        config = dataclasses.replace(config, security=SecuritySettings())
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        try:
            server = asyncio.run_coroutine_threadsafe(start_history_server(config), loop).result()
            try:
                yield address
            finally:
                asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
            loop.close()
