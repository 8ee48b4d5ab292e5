"""`scrollback sessions` and `scrollback session`: the list of sessions and one session's totals.

The list fits the terminal: every column on one line when it is wide enough,
else the id and title on a line and the details under the title. Sizes are
human (kB, MB, GB), a date carries its year when it is not this year, and the
project column shows the project's last path component.
"""

from __future__ import annotations

import argparse
import functools
import re
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from scrollback.contract.proto_json import message_json
from scrollback.history.v1 import history_pb2 as hpb
from scrollback_app.cli_client import _MAIN_MIN_WIDTH, _client, _console, _fits, _line, _print_json


def cmd_sessions(args: argparse.Namespace) -> int:
    """List sessions, newest first."""
    with _client(args) as sb:
        sessions: list[hpb.Session] = []
        for session in sb.history.iter_sessions(project_dir=args.project or ""):
            sessions.append(session)
            if args.limit and len(sessions) >= args.limit:
                break
    if args.json:
        _print_json([message_json(s) for s in sessions])
        return 0
    console = _console()
    console.print(_sessions_table(console, sessions))
    return 0


def _project(session: hpb.Session) -> str:
    """The project column: the project's last path component (a Codex session's marked)."""
    if session.source in ("codex", "opencode", "gemini"):
        return f"{session.source} {PurePosixPath(session.project_dir).name}".rstrip()
    return project_name(session.project_dir)


# Claude Code names a project's directory by its path with every character other than
# a letter or a digit made a dash.
_NOT_NAME = re.compile(r"[^A-Za-z0-9]")
# The longest project name the column shows whole.
_PROJECT_WIDTH = 20


@functools.lru_cache(maxsize=256)
def project_name(encoded: str) -> str:
    """The last component of the path a Claude Code project directory name encodes.

    Dashes stand for `/`, `.`, `_` and dashes alike, so the path is found again on this
    machine (where the CLI usually runs beside the transcripts): from `/`, the entry whose
    name encodes to the next part of the name, longest first. A path not found here shows
    its last whole dash-separated words that fit, after an ellipsis.
    """
    rest, directory = encoded, Path("/")
    while rest.startswith("-"):
        try:
            children = [c.name for c in directory.iterdir() if c.is_dir()]
        except OSError:
            break
        matches = [c for c in children if rest == "-" + _NOT_NAME.sub("-", c)
                   or rest.startswith("-" + _NOT_NAME.sub("-", c) + "-")]  # fmt: skip
        if not matches:
            break
        child = max(matches, key=len)
        directory, rest = directory / child, rest[len(child) + 1 :]
        if not rest:
            return child
    words = encoded.strip("-").split("-")
    tail = words[-1]
    for word in reversed(words[:-1]):
        if len(word) + 1 + len(tail) + 1 > _PROJECT_WIDTH:
            break
        tail = f"{word}-{tail}"
    return tail if tail == encoded.strip("-") else f"…{tail}"


def human_size(count: int) -> str:
    """Bytes in at most 3 significant figures and a decimal unit: 512 B, 58.3 MB, 1.2 GB."""
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if count >= size * 0.9995:
            value = count / size
            return f"{value:.1f} {unit}" if value < 99.95 else f"{value:.0f} {unit}"
    return f"{count} B"


def when(stamp: Any, now: datetime | None = None) -> str:
    """A time in local time: `MM-DD HH:MM` this year, `YYYY-MM-DD` another year."""
    moment = stamp.ToDatetime(tzinfo=UTC).astimezone()
    now = now or datetime.now().astimezone()
    return moment.strftime("%m-%d %H:%M") if moment.year == now.year else f"{moment:%Y-%m-%d}"


def _active(session: hpb.Session) -> Any:
    """When the session was last active, as ListSessions orders it: its last entry's time,
    never after its file's mtime (a touched or copied file keeps its conversation's time)."""
    last = session.insight.last_time
    known = session.HasField("insight") and session.insight.HasField("last_time")
    if known and last.ToNanoseconds() < session.modified_time.ToNanoseconds():
        return last
    return session.modified_time


def _sessions_table(console: Console, sessions: list[hpb.Session]) -> Table:
    """One row per session: every column on one line if the terminal is wide enough, else
    the id and the title on the first line, the other columns in one line under the title."""
    # Ids are never cut (a cut id copied back is NOT_FOUND): the session column
    # is as wide as the longest id, and the title gets the room that is left.
    id_width = max((len(s.session_id) for s in sessions), default=7)
    rows = []
    for s in sessions:
        modified = when(_active(s)) if s.HasField("modified_time") else ""
        title = ("↳ " if s.is_subagent else "") + ("slim copy: " if s.slim_copy_of else "")
        title += s.title[:60]
        rows.append((s, human_size(s.size_bytes), modified, _short_usage(s), title))
    wide = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    wide.add_column("session", no_wrap=True, min_width=id_width)
    # Cut cells are single-line Texts in wrapping columns: rich narrows only wrapping columns.
    wide.add_column("project", overflow="ellipsis", min_width=6, max_width=_PROJECT_WIDTH)
    size_width = max((len(size) for _, size, _, _, _ in rows), default=4)
    usage_width = max((len(usage) for _, _, _, usage, _ in rows), default=5)
    wide.add_column("size", justify="right", no_wrap=True, min_width=size_width)
    wide.add_column("active", no_wrap=True, min_width=11)
    wide.add_column("usage", justify="right", no_wrap=True, min_width=usage_width)
    wide.add_column("title", overflow="ellipsis", min_width=_MAIN_MIN_WIDTH)
    for s, size, modified, usage, title in rows:
        wide.add_row(Text(s.session_id), _line(_project(s)), size, modified, usage, _line(title))
    if _fits(console, wide):
        return wide
    narrow = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    narrow.add_column("session", no_wrap=True, min_width=id_width)
    narrow.add_column(Text("title\nactive  usage  size  project"), overflow="ellipsis")
    for s, size, modified, usage, title in rows:
        details = "  ".join(part for part in (modified, usage, size, _project(s)) if part)
        cell = _line(title) if title else _line("(no title)", style="dim")
        # The title is cut at the column's edge; the details wrap, never cut (the project last).
        narrow.add_row(Text(s.session_id), Group(cell, Text(details, style="dim")))
    return narrow


def _tokens(count: int) -> str:
    """A token count in 3 significant figures (1.2k, 45M)."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= size:
            return f"{count / size:.3g}{unit}"
    return str(count)


def _short_usage(session: hpb.Session) -> str:
    """Tokens in+out and the estimated cost, sub-agents included ('~' when partly priced)."""
    if not session.HasField("insight"):
        return ""
    usage, cost, complete = (
        session.insight.usage,
        session.insight.cost_usd,
        session.insight.cost_complete,
    )
    total = sum(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
        )
    )
    if session.HasField("subagent_insight"):
        sub = session.subagent_insight
        total += sum(
            (
                sub.usage.input_tokens,
                sub.usage.output_tokens,
                sub.usage.cache_creation_input_tokens,
                sub.usage.cache_read_input_tokens,
            )
        )
        cost += sub.cost_usd
        complete = complete and sub.cost_complete
    if not total:
        return ""
    return f"{_tokens(total)} {'' if complete else '~'}${cost:.2f}"


def _stamp(stamp: Any) -> str:
    return stamp.ToJsonString() if stamp.seconds or stamp.nanos else ""


def _print_insight(console: Console, label: str, insight: hpb.SessionInsight) -> None:
    usage = insight.usage
    counts = ", ".join(f"{c.type or '(none)'} {c.count}" for c in insight.entry_counts)
    console.print(Text(f"{label}:"))
    console.print(Text(f"  entries   {counts}"))
    console.print(Text(f"  photos    {insight.photo_count}"))
    console.print(Text(f"  time      {_stamp(insight.first_time)} .. {_stamp(insight.last_time)}"))
    console.print(
        Text(
            f"  tokens    in {usage.input_tokens:,}  out {usage.output_tokens:,}"
            f"  cache write {usage.cache_creation_input_tokens:,}"
            f"  cache read {usage.cache_read_input_tokens:,}"
        )
    )
    for m in insight.models:
        cost = f"${m.cost_usd:.4f}" if m.cost_known else "no price"
        console.print(Text(f"  model     {m.model or '(none)'}: {m.messages} messages, {cost}"))
    mark = "" if insight.cost_complete else " (some models unpriced)"
    console.print(Text(f"  cost      ~${insight.cost_usd:.4f} estimate{mark}"))


def cmd_session(args: argparse.Namespace) -> int:
    """One session's totals: entries, photos, time span, models, tokens, estimated cost."""
    with _client(args) as sb:
        session = sb.history.get_session(args.session)
    if args.json:
        _print_json(message_json(session))
        return 0
    console = _console()
    console.print(Text(f"{session.session_id}  {session.title}"))
    if session.parent_session_id:
        console.print(
            Text(f"sub-agent of {session.parent_session_id} {session.parent_tool_use_id}".rstrip())
        )
    _print_insight(console, "session", session.insight)
    if session.HasField("subagent_insight"):
        _print_insight(console, "sub-agents", session.subagent_insight)
    if session.subagent_count:
        console.print(Text(f"sub-agents: {session.subagent_count}"))
    return 0
