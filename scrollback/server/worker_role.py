"""This process's part in a service of several worker processes, read from its environment.

A service's parent (scrollback.server.workers) starts each worker with its
run directory, the worker count, its index, its own pid and the write end of
the ready pipe in `SCROLLBACK_WORKER_*` variables; `current_role()` reads them
back in the worker (None: the process serves alone). Kept apart from the
supervisor so that what a worker needs (the start-up line, the shared count
of calls in flight, the worker pid of each call) imports no process
management, and `listening` needs no lazy import.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from scrollback.server.stream_limits import SharedStreamCounter

RUN_DIR_ENV = "SCROLLBACK_WORKER_RUN_DIR"
READY_FD_ENV = "SCROLLBACK_WORKER_READY_FD"
COUNT_ENV = "SCROLLBACK_WORKER_COUNT"
INDEX_ENV = "SCROLLBACK_WORKER_INDEX"
PARENT_ENV = "SCROLLBACK_WORKER_PARENT"
STREAMS_DB = "streams.table"
PARENT_CHECK_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class WorkerRole:
    """This process is worker `index` of `count` started by a parent (`run_dir` is shared)."""

    run_dir: Path
    count: int
    ready_fd: int
    parent: int = 0
    index: int = 0

    @property
    def streams_db(self) -> Path:
        """The shared count of calls in flight per principal."""
        return self.run_dir / STREAMS_DB

    def stream_counter(self) -> SharedStreamCounter:
        """This worker's view of the shared count (its own column)."""
        return SharedStreamCounter(self.streams_db, workers=self.count, worker=self.index)

    def announce_ready(self) -> None:
        """Tell the parent this worker serves (its pid on the ready pipe); follow it out.

        A parent killed outright (SIGKILL) cannot forward anything, so each
        worker also watches for being orphaned and then stops as on SIGTERM.
        """
        # The pid the parent gave, not getppid() now: a parent killed while
        # this worker was starting has already left it to init.
        parent = self.parent or os.getppid()

        def follow_parent() -> None:
            while os.getppid() == parent:
                time.sleep(PARENT_CHECK_SECONDS)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=follow_parent, name="scrollback-parent", daemon=True).start()
        if self.ready_fd < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self.ready_fd, f"{os.getpid()}\n".encode())
            os.close(self.ready_fd)


@cache
def current_role() -> WorkerRole | None:
    """The role the parent gave this process, or None when it serves alone."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return None
    return WorkerRole(
        Path(run_dir),
        int(os.environ.get(COUNT_ENV, "1")),
        int(os.environ.get(READY_FD_ENV, "-1")),
        int(os.environ.get(PARENT_ENV, "0")),
        int(os.environ.get(INDEX_ENV, "0")),
    )
