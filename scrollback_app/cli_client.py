"""The client-side commands of `scrollback` (window, search, media, send, tail, gc).

Each `cmd_*` takes the parsed arguments and returns an exit code; failures
are raised as `client.errors.ScrollbackError` (or `UsageError`) and turned
into one line on stderr by `scrollback_app.cli.main`. Human-readable output uses
rich; `--json` prints plain JSON (one document, or JSON lines for `tail`).
`sessions` and `session` are in cli_sessions, `export` in cli_export, their
parsers in cli_parsers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from client import Client, Deadlines, media_selector
from client.errors import Cancelled, InvalidArgument, Unavailable
from client.tls import TlsConfigError, TlsOptions
from scrollback.contract.proto_json import message_json
from scrollback.contract.sniff import SNIFF_BYTES, sniff
from scrollback.history.v1 import history_pb2 as hpb
from scrollback.search.v1 import search_pb2 as spb
from scrollback_app.cli_entries import entry_text, photo_marker, shown, shown_type, strip_ansi

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
    # An in-process history service (cli_local) listens on a private socket, in plaintext.
    plain = getattr(args, "local_plaintext", False)
    try:
        return Client(
            args.history_addr,
            args.media_addr,
            deadlines=deadlines,
            tls=False if plain else (tls_options(args) or False),
        )
    except TlsConfigError as error:
        raise UsageError(str(error)) from None


# The shortest part of a session id the commands accept in its place.
PREFIX_MIN = 8


def whole_session_id(args: argparse.Namespace) -> str | None:
    """The one listed session whose id starts with `args.session`, or None when none does
    or the id is listed whole; more than one is a UsageError naming a few of them."""
    given = getattr(args, "session", None)
    if not isinstance(given, str) or len(given) < PREFIX_MIN:
        return None
    with _client(args) as sb:
        ids = [s.session_id for s in sb.history.iter_sessions()]
    if given in ids:
        return None
    matches = [i for i in ids if i.startswith(given)]
    if len(matches) > 1:
        shown = ", ".join(matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise UsageError(
            f"{len(matches)} sessions start with {given}: {shown}; give more of the id"
        )
    return matches[0] if matches else None


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


def entry_dict(entry: hpb.Entry) -> dict[str, Any]:
    """An entry in the one JSON shape (its `json` field is the stripped line as a string)."""
    return message_json(entry)


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
            shown_type(entry),
            entry.uuid[:8],
            # Text cells: transcript text such as "[tool_use Bash]" is not rich markup.
            # A system line (a hook run, an API error) is a quiet note.
            Text(entry_text(entry, 160), style="dim" if entry.type == "system" else ""),
            str(len(entry.media_refs)) if entry.media_refs else "",
        )
        for entry in entries
        if shown(entry)
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
        if not shown(entry):
            return
        stamp = entry.timestamp[11:19]
        text = " ".join(part for part in (entry_text(entry, 160), photo_marker(entry)) if part)
        print(f"{stamp} {shown_type(entry):<10} {text}", flush=True)
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
