"""The client-side commands of `scrollback` (sessions, window, media, send, tail, gc, export).

Each `cmd_*` takes the parsed arguments and returns an exit code; failures
are raised as `client.errors.ScrollbackError` (or `UsageError`) and turned
into one line on stderr by `scrollback_app.cli.main`. Human-readable output uses
rich; `--json` prints plain JSON (one document, or JSON lines for `tail`).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import io
import json
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import imagesize
import orjson
from rich import box
from rich.console import Console, Group
from rich.measure import Measurement
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from client import Client, Deadlines, Media, media_selector
from client.errors import Cancelled, InvalidArgument, Unavailable
from client.tls import TlsConfigError, TlsOptions
from scrollback.contract.enumeration import is_rollout_entry, iter_image_blocks
from scrollback.contract.proto_json import message_json
from scrollback.contract.sniff import SNIFF_BYTES, sniff
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.search.v1 import search_pb2 as spb
from scrollback_app import export_page

# The fewest columns a table's main column (a title, a text) gets before the secondary
# columns move to a line of their own.
_MAIN_MIN_WIDTH = 32


class UsageError(ValueError):
    """Bad usage detected before any call (exit code 2)."""


def tls_options(args: argparse.Namespace) -> TlsOptions | None:
    """The TLS options of the flags over the SCROLLBACK_TLS_* variables; None: plaintext."""
    base = TlsOptions.from_env()
    given = any(
        getattr(args, name, None) for name in ("tls", "tls_ca", "tls_cert", "tls_key")
    ) or bool(getattr(args, "tls_server_name", None))
    if base is None and not given:
        return None
    options = base or TlsOptions()

    def path(name: str, current: Path | None) -> Path | None:
        value = getattr(args, name, None)
        return Path(value).expanduser() if value else current

    return TlsOptions(
        ca=path("tls_ca", options.ca),
        cert=path("tls_cert", options.cert),
        key=path("tls_key", options.key),
        server_name=getattr(args, "tls_server_name", None) or options.server_name,
    )


def _client(args: argparse.Namespace) -> Client:
    timeout = getattr(args, "timeout", None)
    deadlines = Deadlines(unary=timeout, stream=timeout) if timeout else Deadlines()
    try:
        return Client(
            args.history_addr, args.media_addr, deadlines=deadlines, tls=tls_options(args) or False
        )
    except TlsConfigError as error:
        raise UsageError(str(error)) from None


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")
    sys.stdout.flush()


class _Console(Console):
    """rich's console, leaving a broken pipe to `scrollback_app.cli.main` (rich would exit 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def _console() -> Console:
    return _Console(soft_wrap=False, highlight=False)


def _parsed(entry: hpb.Entry) -> dict[str, Any]:
    try:
        value = orjson.loads(entry.json)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


# CSI sequences (colours, cursor moves), OSC sequences (titles, links) and lone ESC pairs:
# tool output in transcripts carries them, and no viewer here interprets them.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def strip_ansi(text: str) -> str:
    """The text without terminal escape sequences."""
    return _ANSI.sub("", text)


def _block_parts(blocks: list[Any], parts: list[str]) -> None:
    """Labels and texts of content blocks: [image], [tool_use NAME], [tool_result] TEXT."""
    for block in blocks:
        if isinstance(block, str):
            parts.append(block)
            continue
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "image":
            parts.append("[image]")
        elif kind == "tool_use":
            parts.append(f"[tool_use {block.get('name', '')}]")
            tool_input = block.get("input")
            if isinstance(tool_input, dict):
                # The first string argument says most (a command, a path, a pattern).
                first = next((v for v in tool_input.values() if isinstance(v, str)), "")
                parts.append(first)
        elif kind == "tool_result":
            parts.append("[tool_result error]" if block.get("is_error") else "[tool_result]")
            inner = block.get("content")
            _block_parts(inner if isinstance(inner, list) else [inner], parts)
        elif kind == "thinking":
            parts.append("[thinking]")
        elif isinstance(kind, str):
            parts.append(f"[{kind}]")


def _rollout_parts(payload: dict[str, Any], kind: str, parts: list[str]) -> None:
    """A Codex rollout line's labels and texts: [role] text [image], [reasoning] summary,
    [function_call NAME] arguments, [output] text, [event KIND] message."""
    item = payload.get("type")
    if kind == "response_item" and item == "message":
        parts.append(f"[{payload.get('role', '')}]")
        for block in payload.get("content") or []:
            if isinstance(block, dict):
                text = block.get("text")
                parts.append(text if isinstance(text, str) else f"[{block.get('type', '')}]")
    elif kind == "response_item" and item == "reasoning":
        parts.append("[reasoning]")
        for block in payload.get("summary") or []:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
    elif kind == "response_item" and isinstance(item, str) and item.endswith("_call"):
        parts.append(f"[{item} {payload.get('name', '')}]".replace(" ]", "]"))
        arguments = payload.get("arguments", payload.get("input"))
        parts.append(arguments if isinstance(arguments, str) else "")
    elif kind == "response_item" and isinstance(item, str) and item.endswith("_output"):
        parts.append("[output]")
        output = payload.get("output")
        if isinstance(output, str):
            parts.append(output)
        elif isinstance(output, list):
            for block in output:
                if isinstance(block, dict):
                    text = block.get("text")
                    parts.append(text if isinstance(text, str) else f"[{block.get('type', '')}]")
    elif kind == "event_msg":
        parts.append(f"[event {item}]")
        message = payload.get("message")
        parts.append(message if isinstance(message, str) else "")
    elif kind == "compacted":
        parts.append("[compacted]")
        message = payload.get("message")
        parts.append(message if isinstance(message, str) else "")
    elif kind == "session_meta":
        parts.append(f"[session_meta] {payload.get('cwd', '')}")
    elif kind == "turn_context":
        parts.append(f"[turn_context] {payload.get('model', '')}")
    else:
        parts.append(f"[{kind} {item or ''}]".replace(" ]", "]"))


def entry_text(entry: hpb.Entry, limit: int = 0) -> str:
    """A one-line summary of an entry's message: its text, with [image]/[tool_use]/... labels."""
    parsed = _parsed(entry)
    message = parsed.get("message")
    payload = parsed.get("payload")
    parts: list[str] = []
    if message is None and isinstance(payload, dict):
        _rollout_parts(payload, entry.type, parts)
    elif entry.type == "summary":
        parts.append(str(parsed.get("summary", "")))
    elif isinstance(message, dict):
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            _block_parts(content, parts)
    text = " ".join(strip_ansi(" ".join(p for p in parts if p)).split())
    if limit and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def photo_marker(entry: hpb.Entry) -> str:
    """`[N photo(s)]` for an entry with media refs, else ""."""
    count = len(entry.media_refs)
    if not count:
        return ""
    return f"[{count} photo{'s' if count > 1 else ''}]"


def entry_dict(entry: hpb.Entry) -> dict[str, Any]:
    """An entry in the one JSON shape (its `json` field is the stripped line as a string)."""
    return message_json(entry)


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


def _line(text: str, style: str = "") -> Text:
    """Text cut with an ellipsis where its column ends, never wrapped."""
    return Text(text, style=style, overflow="ellipsis", no_wrap=True)


def _fits(console: Console, table: Table) -> bool:
    """Whether `table` fits the console's width with every no-wrap column whole, every
    column with a max_width at it (as rich keeps them) and the others at their min_width.

    rich measures a no-wrap cell by its longest word (a time is two), so the check
    measures a probe table of the same borders and padding, one one-word cell a column.
    """
    unbounded = console.options.update_width(1_000_000)
    probe = Table(
        box=table.box,
        show_edge=table.show_edge,
        pad_edge=table.pad_edge,
        padding=table.padding,
        show_header=False,
    )
    widths = []
    for column in table.columns:
        cells = [column.header, *column.cells]
        natural = max(Measurement.get(console, unbounded, c).maximum for c in cells)
        if column.no_wrap:
            widths.append(natural)
        elif column.max_width is not None:
            widths.append(max(column.min_width or 1, min(column.max_width, natural)))
        else:
            widths.append(column.min_width or 1)
        probe.add_column(no_wrap=True)
    probe.add_row(*("x" * width for width in widths))
    return Measurement.get(console, unbounded, probe).maximum <= console.width


def _project(session: hpb.Session) -> str:
    """The project column: a Codex session's cwd says that it is one."""
    if session.source == "codex":
        return f"codex {session.project_dir}".rstrip()
    return session.project_dir


def _sessions_table(console: Console, sessions: list[hpb.Session]) -> Table:
    """One row per session: every column on one line if the terminal is wide enough, else
    the id and the title on the first line, the other columns in one line under the title."""
    # Ids are never cut (a cut id copied back is NOT_FOUND): the session column
    # is as wide as the longest id, and the title gets the room that is left.
    id_width = max((len(s.session_id) for s in sessions), default=7)
    rows = []
    for s in sessions:
        modified = (
            s.modified_time.ToDatetime().strftime("%m-%d %H:%M")
            if s.HasField("modified_time")
            else ""
        )
        title = ("↳ " if s.is_subagent else "") + s.title[:60]
        rows.append((s, f"{s.size_bytes:,}", modified, _short_usage(s), title))
    wide = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    wide.add_column("session", no_wrap=True, min_width=id_width)
    # Cut cells are single-line Texts in wrapping columns: rich narrows only wrapping columns.
    wide.add_column("project", overflow="ellipsis", min_width=6, max_width=20)
    size_width = max((len(size) for _, size, _, _, _ in rows), default=4)
    usage_width = max((len(usage) for _, _, _, usage, _ in rows), default=5)
    wide.add_column("size", justify="right", no_wrap=True, min_width=size_width)
    wide.add_column("modified", no_wrap=True, min_width=11)
    wide.add_column("usage", justify="right", no_wrap=True, min_width=usage_width)
    wide.add_column("title", overflow="ellipsis", min_width=_MAIN_MIN_WIDTH)
    for s, size, modified, usage, title in rows:
        wide.add_row(Text(s.session_id), _line(_project(s)), size, modified, usage, _line(title))
    if _fits(console, wide):
        return wide
    narrow = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    narrow.add_column("session", no_wrap=True, min_width=id_width)
    narrow.add_column(Text("title\nmodified  usage  size  project"), overflow="ellipsis")
    for s, size, modified, usage, title in rows:
        details = "  ".join(part for part in (modified, usage, f"{size} B", _project(s)) if part)
        cell = _line(title) if title else _line("(no title)", style="dim")
        cell.append("\n" + details, style="dim")
        narrow.add_row(Text(s.session_id), cell)
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


def cmd_window(args: argparse.Namespace) -> int:
    """One page of a session (the latest by default)."""
    if args.page_size is not None and args.page_size < 0:
        raise UsageError("--page-size must not be negative")
    oldest_first = bool(args.oldest_first or args.newer)
    with _client(args) as sb:
        window = sb.history.read_window(
            args.session,
            page_size=args.page_size or 0,
            page_token=args.older or args.newer or "",
            oldest_first=oldest_first,
        )
    if args.json:
        _print_json(
            {
                "sessionId": args.session,
                "entries": [message_json(e) for e in window.entries],
                "nextPageToken": window.next_page_token,
                "skippedLines": window.skipped_lines,
                "fileSizeBytes": str(window.file_size_bytes),
            }
        )
        return 0
    console = _console()
    console.print(_entries_table(console, window.entries))
    if window.next_page_token:
        # plain print: a wrapped token could not be copied back. The token keeps the
        # direction; the flag names it, and the page size carries over.
        flag = "--newer" if oldest_first else "--older"
        size = f" --page-size {args.page_size}" if args.page_size else ""
        print(f"next page: scrollback window {args.session} {flag} {window.next_page_token}{size}")
    if any(entry.media_refs for entry in window.entries):
        console.print(
            "photo refs and pins: --json; fetch one with `scrollback media REF --pin PIN`"
        )
    if window.skipped_lines:
        console.print(f"{window.skipped_lines} line(s) skipped (not JSON objects)")
    return 0


def _entries_table(console: Console, entries: Sequence[hpb.Entry]) -> Table:
    """One row per entry: every column on one line if the text keeps enough room, else the
    time over the type, uuid and photo count, beside the text."""
    wide = Table()
    wide.add_column("time", no_wrap=True)
    wide.add_column("type", no_wrap=True)
    wide.add_column("uuid", no_wrap=True)
    wide.add_column("text", overflow="fold", min_width=_MAIN_MIN_WIDTH)
    wide.add_column("photos", justify="right", no_wrap=True)
    rows = [
        (
            entry.timestamp[:19].replace("T", " "),
            entry.type,
            entry.uuid[:8],
            # Text cells: transcript text such as "[tool_use Bash]" is not rich markup.
            Text(entry_text(entry, 160)),
            str(len(entry.media_refs)) if entry.media_refs else "",
        )
        for entry in entries
    ]
    for time, kind, uuid, text, photos in rows:
        wide.add_row(time, Text(kind), Text(uuid), text, photos)
    if _fits(console, wide):
        return wide
    narrow = Table()
    narrow.add_column(Text("time\ntype uuid photos"), overflow="fold")
    narrow.add_column("text", overflow="fold")
    for time, kind, uuid, text, photos in rows:
        second = " ".join(part for part in (kind, uuid, f"[{photos}]" if photos else "") if part)
        narrow.add_row(Text(f"{time}\n{second}"), text)
    return narrow


def _moment(value: str | None, flag: str) -> datetime | None:
    """An ISO 8601 date or time from the command line (naive: UTC)."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{flag} must be an ISO 8601 date or time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _marked(snippet: spb.Snippet) -> Text:
    """A snippet with its highlighted words in bold."""
    text = Text(snippet.text)
    for highlight in snippet.highlights:
        text.stylize("bold reverse", highlight.start, highlight.end)
    return text


def _hits_table(console: Console, hits: Sequence[spb.SearchHit]) -> Table:
    """One row per hit: every column on one line if the snippet keeps enough room, else the
    session, time and type on one line and the snippet under them, across the width."""
    wide = Table()
    wide.add_column("#", justify="right", no_wrap=True)
    wide.add_column("time", no_wrap=True)
    wide.add_column("session", no_wrap=True)
    wide.add_column("type", no_wrap=True)
    wide.add_column("text", overflow="fold", min_width=_MAIN_MIN_WIDTH)
    for number, hit in enumerate(hits, 1):
        wide.add_row(
            str(number),
            _hit_time(hit),
            Text(hit.session_id),
            Text(hit.type),
            _marked(hit.snippet),
        )
    if _fits(console, wide):
        return wide
    narrow = Table(show_lines=True)
    narrow.add_column("#", justify="right", no_wrap=True)
    narrow.add_column("session  time  type\ntext", overflow="fold")
    for number, hit in enumerate(hits, 1):
        where = Text(f"{hit.session_id}  {_hit_time(hit)}  {hit.type}", style="dim")
        narrow.add_row(str(number), Group(where, _marked(hit.snippet)))
    return narrow


def _hit_time(hit: spb.SearchHit) -> str:
    return hit.timestamp[:19].replace("T", " ")


def cmd_search(args: argparse.Namespace) -> int:
    """Search every session the caller can read, most relevant first (--newest: newest)."""
    if args.limit < 0:
        raise UsageError("--limit must not be negative")
    photos = None if args.photos is None else args.photos == "with"
    with _client(args) as sb:
        page = sb.history.search(
            args.query,
            project_dir=args.project or "",
            session_id=args.session or "",
            entry_types=args.type or (),
            roles=args.role or (),
            start_time=_moment(args.since, "--since"),
            end_time=_moment(args.until, "--until"),
            photos=photos,
            page_size=args.limit,
            page_token=args.page_token or "",
            newest=args.newest,
        )
    if args.json:
        _print_json(
            {
                "hits": [message_json(h) for h in page.hits],
                "nextPageToken": page.next_page_token,
                "partial": page.partial,
            }
        )
        return 0
    console = _console()
    console.print(_hits_table(console, page.hits))
    if page.partial:
        console.print("the search index is still being built: more hits may come")
    if not page.hits:
        console.print("no hits")
    else:
        # plain print: a wrapped token could not be copied back.
        first = page.hits[0]
        print(f"open #1: scrollback window {first.session_id} --older {first.window_page_token}")
        console.print("every hit's window token: --json")
    if page.next_page_token:
        print(f"next page: add --page-token {page.next_page_token}")
    return 0


def cmd_media(args: argparse.Namespace) -> int:
    """Fetch one photo into a file (`-o -` for stdout)."""
    try:
        selector = media_selector(args.ref, args.pin)
    except InvalidArgument as error:
        raise UsageError(error.message) from None
    if args.output == "-":
        if sys.stdout.isatty():
            raise UsageError(
                "-o - would write image bytes to the terminal; redirect stdout or give -o FILE"
            )
    else:
        _check_output_file(Path(args.output))
    with _client(args) as sb:
        media = sb.media.read_media(selector, size=args.size)
    if args.output == "-":
        sys.stdout.buffer.write(media.data)
        sys.stdout.buffer.flush()
    else:
        Path(args.output).write_bytes(media.data)
    summary = message_json(media.metadata) | {"output": args.output}
    if args.json:
        _print_json(summary)
    elif args.output != "-":
        print(
            f"wrote {len(media.data):,} bytes ({media.metadata.content_type}, "
            f"sha256 {media.metadata.sha256[:12]}…) to {args.output}"
        )
    return 0


def _check_output_file(output: Path) -> None:
    """Refuse an output path that cannot be written, before any call (the user's own path)."""
    if output.is_dir():
        raise UsageError(f"-o {output} is a directory; name a file")
    parent = output.parent
    if not parent.is_dir():
        raise UsageError(f"-o {output}: the directory {parent} does not exist")


def cmd_send(args: argparse.Namespace) -> int:
    """Send a message (uploading images first) and print the accepted record."""
    if args.session and args.chat_key:
        raise UsageError("give a SESSION or --chat-key, not both")
    if not args.session and not args.chat_key:
        # argparse gave the one positional to TEXT: it was meant as the session
        raise UsageError(
            "missing the message TEXT: scrollback send SESSION TEXT (or --chat-key KEY TEXT)"
        )
    for image in args.image or []:
        _check_image(Path(image))
    for attachment in args.file or []:
        if not Path(attachment).is_file():
            raise UsageError(f"no such file: {attachment}")
    with _client(args) as sb:
        accepted = sb.send(
            args.session or None,
            args.text,
            [Path(p) for p in [*(args.image or []), *(args.file or [])]],
            chat_key=args.chat_key or None,
        )
    if args.json:
        _print_json(message_json(accepted))
    else:
        print(
            f"accepted #{accepted.seq} ({accepted.client_txn_id}) with "
            f"{len(accepted.attachments)} attachment(s)"
        )
        for attachment in accepted.attachments:
            # plain print: the ref is copied back whole (`scrollback media REF -o FILE`).
            print(f"  {attachment.ref}  {attachment.media_type}  {attachment.name}")
    return 0


def _check_image(path: Path) -> None:
    """Refuse an --image that is not a file or whose bytes are not an image the viewer shows."""
    try:
        with path.open("rb") as file:
            head = file.read(SNIFF_BYTES)
    except IsADirectoryError:
        raise UsageError(f"--image {path} is a directory") from None
    except FileNotFoundError:
        raise UsageError(f"no such image file: {path}") from None
    if not sniff(head).safe_inline:
        raise UsageError(
            f"--image {path} is not an image (PNG, JPEG, GIF, WebP, AVIF or HEIC by its bytes); "
            f"to send it as a plain attachment: --file {path}"
        )


def _print_event_line(kind: str, entry: hpb.Entry | None, message: Any, as_json: bool) -> None:
    if as_json:
        if entry is not None:
            _print_json({"event": "entry"} | entry_dict(entry))
        else:
            _print_json({"event": kind} | message_json(message))
        return
    if entry is not None:
        stamp = entry.timestamp[11:19]
        text = " ".join(part for part in (entry_text(entry, 160), photo_marker(entry)) if part)
        print(f"{stamp} {entry.type:<10} {text}", flush=True)
    else:
        attached = len(message.attachments)
        marker = f" [{attached} attachment{'s' if attached > 1 else ''}]" if attached else ""
        text = " ".join(strip_ansi(message.text).split())[:160]
        print(f"{'':8} {kind:<10} #{message.seq} {text}{marker}", flush=True)


def _exit_on_ctrl_c(signum: int, frame: object) -> None:
    """Ctrl-C under `tail`: flush what was printed and exit 0 now."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    os._exit(0)


def cmd_tail(args: argparse.Namespace) -> int:
    """Print the last entries, then entries and accepted messages live; Ctrl-C stops."""
    # SIGINT is how tail is stopped, also when started where it was ignored (a
    # script's background job inherits SIG_IGN). It ends the process at once, its
    # output flushed: a KeyboardInterrupt raised wherever the main thread happens
    # to be (inside grpc's waits and cancels among them) can leave the watch hung.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _exit_on_ctrl_c)
    with _client(args) as sb:
        boot = sb.history.bootstrap(args.session, page_size=max(args.last, 1))
        assert boot.header is not None
        for entry in boot.entries[-args.last :] if args.last else []:
            _print_event_line("entry", entry, None, args.json)
        # Accepted messages not yet in the transcript: the same label as live ones.
        for pending in boot.header.pending:
            _print_event_line("accepted", None, pending, args.json)
        try:
            for event in sb.history.watch(args.session, boot.header.watch_position):
                _print_event_line(event.kind, event.entry, event.accepted, args.json)
        except KeyboardInterrupt:
            return 0
        except (Cancelled, Unavailable) as error:
            # It answered the bootstrap: the watch ended because the server went away.
            sys.stdout.flush()
            print(
                f"scrollback: {error.code_name}: the server stopped: the history service at "
                f"{sb.history.addr} ended the live events and did not come back",
                file=sys.stderr,
            )
            return 1
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    """Collect unreferenced blobs in the configured store; print the report.

    The store is the one the media service would use: SQLite in the state dir,
    or PostgreSQL when SCROLLBACK_DATABASE_URL is set.
    """
    from media_service.config import MediaConfig
    from media_service.server import collect_garbage_now

    if args.grace < 0:
        raise UsageError("--grace must not be negative")
    config = MediaConfig.from_env(state_dir=Path(args.state).expanduser() if args.state else None)
    if not config.state_dir.is_dir():
        raise UsageError("the state dir (SCROLLBACK_STATE) is not a directory")
    report = collect_garbage_now(config, grace_seconds=args.grace)
    if args.json:
        _print_json(
            {
                "deleted": report.deleted,
                "skipped": report.skipped,
                "thumbnails_deleted": report.thumbnails_deleted,
                "cutoff": report.cutoff,
                "now": report.now,
            }
        )
    else:
        print(
            f"gc: deleted {len(report.deleted)} unreferenced blob(s) and "
            f"{report.thumbnails_deleted} thumbnail(s), skipped {report.skipped} "
            f"(grace {args.grace:g} s)"
        )
    return 0


_EXTENSIONS = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "image/avif": ".avif",
    "image/heic": ".heic",
}


def _html_text(text: str) -> str:
    """Transcript text for HTML: terminal escapes removed (they render as boxes), escaped."""
    return html.escape(strip_ansi(text))


class _Exporter:
    """Writes one session as index.html plus one file per distinct photo."""

    def __init__(self, sb: Client, directory: Path) -> None:
        self.sb = sb
        self.directory = directory
        self.media_dir = directory / "media"
        self.media_dir.mkdir(parents=True, exist_ok=True)
        self.written: dict[str, str] = {}
        self.sizes: dict[str, tuple[int, int]] = {}
        self.images = 0
        # (entry offset, image index) -> the exported file the page shows for it.
        self.files: dict[tuple[int, int], str] = {}

    def _media_file(self, media: Media) -> str:
        sha256 = media.metadata.sha256
        name = self.written.get(sha256)
        if name is None:
            extension = _EXTENSIONS.get(media.metadata.content_type, ".bin")
            name = f"media/{sha256}{extension}"
            (self.directory / name).write_bytes(media.data)
            self.written[sha256] = name
            # From the header only; (-1, -1) when the format has no readable size.
            self.sizes[sha256] = imagesize.get(io.BytesIO(media.data))
        return name

    def _image_html(self, entry: hpb.Entry, index: int) -> str:
        if index in entry.failed_image_indexes:
            return '<p class="meta">[image not displayed]</p>'
        ref = next((r for r in entry.media_refs if r.index == index), None)
        if ref is None:
            return '<p class="meta">[image kept inline in the transcript]</p>'
        try:
            media = self.sb.media.fetch(ref)
        except Exception as error:  # one bad photo must not end the export
            label = getattr(error, "code_name", "ERROR")
            return f'<p class="meta">[media unavailable: {html.escape(label)}]</p>'
        self.images += 1
        name = html.escape(self._media_file(media), quote=True)
        if not media.metadata.safe_inline:
            return f'<p><a href="{name}" download>attachment ({media.metadata.size_bytes:,} bytes)</a></p>'
        self.files[(entry.byte_offset, index)] = self._media_file(media)
        width, height = self.sizes.get(media.metadata.sha256, (-1, -1))
        # Width and height reserve the box before the lazy image loads (no layout jump).
        size = f' width="{width}" height="{height}"' if width > 0 and height > 0 else ""
        return f'<img loading="lazy" src="{name}"{size} alt="image {index}">'

    def _blocks_html(self, entry: hpb.Entry, blocks: list[Any], indexes: dict[int, int]) -> str:
        out: list[str] = []
        for block in blocks:
            if isinstance(block, str):
                out.append(f'<div class="text">{_html_text(block)}</div>')
                continue
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                out.append(f'<div class="text">{_html_text(str(block.get("text", "")))}</div>')
            elif kind == "image":
                out.append(self._image_html(entry, indexes.get(id(block), -1)))
            elif kind == "tool_use":
                body = json.dumps(block.get("input"), indent=2, ensure_ascii=False)
                out.append(
                    f"<details><summary>tool: {html.escape(str(block.get('name', '')))}</summary>"
                    f"<pre>{_html_text(body)}</pre></details>"
                )
            elif kind == "thinking":
                out.append(
                    "<details><summary>thinking</summary>"
                    f'<div class="text">{_html_text(str(block.get("thinking", "")))}</div></details>'
                )
            else:
                inner = block.get("content")
                label = html.escape(str(kind))
                if isinstance(inner, list | str):
                    items = inner if isinstance(inner, list) else [inner]
                    out.append(
                        f"<details><summary>{label}</summary>"
                        f"{self._blocks_html(entry, items, indexes)}</details>"
                    )
                else:
                    out.append(f'<p class="meta">[{label}]</p>')
        return "".join(out)

    def _rollout_html(self, entry: hpb.Entry, parsed: dict[str, Any]) -> str:
        """A Codex rollout line's text and photos ("" for event_msg lines: copies of what its
        response_items hold, or bookkeeping). Exporting its photos here is what gives the
        page's renderer their files."""
        if entry.type == "event_msg":
            return ""
        payload = parsed["payload"]
        texts: list[str] = []
        for key in ("content", "summary", "replacement_history"):
            items = payload.get(key)
            for item in items if isinstance(items, list) else []:
                if isinstance(item, dict) and isinstance(item.get("text"), str):
                    texts.append(item["text"])
        if isinstance(payload.get("message"), str):
            texts.append(payload["message"])
        body = "".join(f'<div class="text">{_html_text(t)}</div>' for t in texts)
        body += "".join(
            self._image_html(entry, ref.index)
            for ref in sorted(entry.media_refs, key=lambda r: r.index)
        )
        kind = html.escape(f"{entry.type} {payload.get('type', '')}".strip())
        stamp = html.escape(entry.timestamp)
        anchor = html.escape(f"e-{entry.uuid or entry.byte_offset}", quote=True)
        return (
            f'<div class="entry" id="{anchor}"><div class="meta">{kind} · '
            f'<a href="#{anchor}">{stamp}</a></div>{body}</div>\n'
        )

    def entry_data(self, entry: hpb.Entry) -> dict[str, Any]:
        """One entry for the page's renderer: the canonical JSON mapping, each media ref's
        `url` its exported file (a ref whose photo was not exported inline is left out)."""
        body = message_json(entry)
        body["mediaRefs"] = [
            {**message_json(ref), "url": self.files[(entry.byte_offset, ref.index)]}
            for ref in entry.media_refs
            if (entry.byte_offset, ref.index) in self.files
        ]
        return body

    def entry_html(self, entry: hpb.Entry) -> str:
        """One entry as an HTML fragment ("" for bookkeeping entries)."""
        parsed = _parsed(entry)
        if entry.type == "summary":
            text = _html_text(str(parsed.get("summary", "")))
            return f'<p class="meta">summary: {text}</p>\n'
        if is_rollout_entry(parsed):
            return self._rollout_html(entry, parsed)
        if entry.type not in ("user", "assistant"):
            return ""
        message = parsed.get("message")
        if not isinstance(message, dict):
            return ""
        indexes = {id(block): n for n, block in enumerate(iter_image_blocks(parsed))}
        content = message.get("content")
        blocks = content if isinstance(content, list) else [content]
        body = self._blocks_html(entry, blocks, indexes)
        stamp = html.escape(entry.timestamp)
        kind = html.escape(entry.type)
        # An anchor per entry (#e-<uuid>, the link on its time) so a page can be cited.
        anchor = html.escape(f"e-{entry.uuid or entry.byte_offset}", quote=True)
        return (
            f'<div class="entry {kind}" id="{anchor}"><div class="meta">{kind} · '
            f'<a href="#{anchor}">{stamp}</a></div>{body}</div>\n'
        )


def _entries_with_progress(sb: Client, session: str, progress: Progress) -> Iterator[hpb.Entry]:
    task = progress.add_task("export", total=None)
    for window in sb.history.iter_windows(session, oldest_first=True):
        progress.update(task, total=window.file_size_bytes)
        for entry in window.entries:
            yield entry
            progress.update(task, completed=entry.byte_offset + entry.line_size_bytes + 1)
    progress.update(task, completed=progress.tasks[task].total or 0)


def cmd_export(args: argparse.Namespace) -> int:
    """Write the session as a static HTML page with lazily loaded image files."""
    directory = Path(args.html)
    if directory.exists() and not directory.is_dir():
        raise UsageError("--html must name a directory")
    # What this export creates; removed again if it fails, so a failure leaves nothing.
    created = next((p for p in reversed([directory, *directory.parents]) if not p.exists()), None)
    try:
        return _export(args, directory)
    except BaseException:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise


def _export(args: argparse.Namespace, directory: Path) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
    )
    with _client(args) as sb:
        exporter = _Exporter(sb, directory)
        fragments: list[str] = []
        entries: list[dict[str, Any]] = []
        count = 0
        with Progress(*columns, console=Console(stderr=True), transient=False) as progress:
            for entry in _entries_with_progress(sb, args.session, progress):
                count += 1
                fragments.append(exporter.entry_html(entry))
                entries.append(exporter.entry_data(entry))
        session = message_json(sb.history.get_session(args.session))
    # The viewer's rendering (export_page); the plain fragments are its <noscript> fallback.
    export_page.write_assets(directory)
    index = export_page.write_page(
        directory, f"Scrollback session {args.session}", session, entries, "".join(fragments)
    )
    summary = {
        "index": str(index),
        "entries": count,
        "images": exporter.images,
        "media_files": len(exporter.written),
    }
    if args.json:
        _print_json(summary)
    else:
        print(f"exported {count} entries and {len(exporter.written)} image file(s) to {index}")
    return 0
