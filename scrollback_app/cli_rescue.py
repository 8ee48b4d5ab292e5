"""`scrollback slim` and `scrollback images`: rescue a session that images have broken.

- `scrollback slim SESSION [-o FILE | --install] [--fork]`: a copy of the
  transcript with every image and document replaced by a text block saying
  what was cut (SlimSession). To stdout by default (the session alone); with
  `-o FILE` the session goes to FILE and its sub-agent threads to
  `<FILE without .jsonl>/subagents/`; with `--install` the copy goes where
  `claude --resume` finds it: `<projects>/<project dir>/<id>.jsonl` and
  `<id>/subagents/`, under a new id with `--fork`, else over the original
  after it was moved to a backup the command prints. Every file is written
  whole to a partial file first and renamed into place only once the whole
  stream arrived, so a failed copy leaves the originals as they were.
  Partial files and backups are created new (O_EXCL, never through a
  symlink): a backup never replaces anything, so every earlier original
  stays recoverable however many runs follow. To stdout the copy holds the
  session alone, and the command says how many sub-agent threads it left out.
  An opencode session's copy is opencode's export JSON under a new session
  id; `--install` writes it to the current directory and prints the
  `opencode import FILE` command (opencode's database is never written).
- `scrollback images SESSION [--at messages.N.content.M]`: every image and
  document with its place in the API's message list, size, pixels and
  problems (ListImages).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shlex
import sys
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from client.errors import ScrollbackError
from client.history import ImageList
from scrollback.contract.proto_json import message_json
from scrollback.contract.refs import CODEX, OPENCODE
from scrollback.history.v1 import history_pb2 as hpb
from scrollback_app.cli_client import (
    UsageError,
    _check_output_file,
    _client,
    _print_json,
)
from scrollback_app.cli_local import codex_sessions_dir, projects_dir, with_local_fallback

PARTIAL_SUFFIX = ".slim-partial"
BACKUP_SUFFIX = ".backup-"
# A new file only: never one that exists, never through a symlink at its name.
_CREATE_NEW = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
# The API path of an error message: messages.N.content.M (and deeper content levels).
_API_PATH = re.compile(r"messages\.\d+(?:\.content\.\d+)+")


_LOCAL_HELP = (
    "read the local transcripts in this process, without the services (what the command "
    "does anyway when no history service answers at a loopback address)"
)


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `slim` and `images` to the `scrollback` parser."""
    slim = commands.add_parser(
        "slim",
        parents=[common],
        help="a copy of a session with its images and documents cut (rescue a broken session)",
    )
    slim.add_argument("session")
    where = slim.add_mutually_exclusive_group()
    where.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the copy to FILE (its sub-agent threads beside it); default: stdout",
    )
    where.add_argument(
        "--install",
        action="store_true",
        help="write the copy where `claude --resume` (for a Codex rollout, `codex resume`) "
        "finds it (with --fork: as a new session; without: over the original, after moving "
        "it to a printed backup); an opencode session's copy goes to ./<copy id>.json and the "
        "`opencode import` command is printed",
    )
    slim.add_argument(
        "--fork", action="store_true", help="give the copy a new session id (as Claude Code's fork)"
    )
    slim.add_argument(
        "--projects-dir",
        metavar="DIR",
        help="Claude Code's projects directory for --install "
        "(default: $CLAUDE_CONFIG_DIR/projects, else ~/.claude/projects)",
    )
    slim.add_argument(
        "--images",
        choices=("text", "downscale"),
        default="text",
        help="text: replace each image by a text block (default); downscale: keep images, "
        "re-encoded within --max-side and --max-bytes",
    )
    slim.add_argument(
        "--max-side", type=int, default=0, help="downscale: longest side in px (default 2000)"
    )
    slim.add_argument(
        "--max-bytes", type=int, default=0, help="downscale: most bytes per image (default 5 MiB)"
    )
    slim.add_argument(
        "--keep-last", type=int, default=0, metavar="N", help="keep the last N images as they are"
    )
    slim.add_argument("--local", action="store_true", help=_LOCAL_HELP)
    slim.set_defaults(handler=with_local_fallback(cmd_slim))

    images = commands.add_parser(
        "images",
        parents=[common],
        help="every image and document of a session: API position, size, pixels, problems",
    )
    images.add_argument("session")
    images.add_argument(
        "--at",
        metavar="PATH",
        help="only the image an API error names, e.g. messages.41.content.31",
    )
    images.add_argument(
        "--no-subagents", action="store_true", help="leave the sub-agent threads out"
    )
    images.add_argument(
        "--refs",
        action="store_true",
        help="also print each image's ref and pin (for `scrollback media`), one line each",
    )
    images.add_argument("--local", action="store_true", help=_LOCAL_HELP)
    images.set_defaults(handler=with_local_fallback(cmd_images))


@dataclass
class _Written:
    """One file of the copy: where it goes, its partial file, and what the server did."""

    session_id: str
    destination: Path
    partial: Path | None
    end: hpb.SlimFileEnd = field(default_factory=hpb.SlimFileEnd)


class UnsafePathError(ValueError):
    """A server named a place outside the directory the copy goes to."""


def _inside(name: str) -> Path:
    """A relative path the server sent, refused if it could leave its directory."""
    path = Path(name)
    if not name or path.is_absolute() or ".." in path.parts:
        raise UnsafePathError("the server named a file outside the copy's directory")
    return path


def _codex_destination(args: argparse.Namespace, header: hpb.SlimHeader) -> Path:
    """Where `--install` puts a Codex rollout's copy: a fork as a new rollout of today in
    Codex's sessions tree, named as Codex names its own; else the original's place."""
    sessions = codex_sessions_dir()
    copy_id = _inside(header.copy_session_id).name
    if args.fork:
        now = datetime.now().astimezone()
        day = sessions / f"{now:%Y}" / f"{now:%m}" / f"{now:%d}"
        return day / f"rollout-{now:%Y-%m-%dT%H-%M-%S}-{copy_id}.jsonl"
    found = sorted(sessions.rglob(f"rollout-*-{copy_id}.jsonl"))
    if not found:
        raise UsageError(
            f"no rollout of {copy_id} under {sessions} to replace; --fork adds the copy as a "
            "new session, -o FILE writes it anywhere"
        )
    return found[0]


def _destination(args: argparse.Namespace, header: hpb.SlimHeader, file: hpb.SlimFile) -> Path:
    relative = _inside(file.relative_path)
    if args.install and header.source == CODEX:
        return _codex_destination(args, header)
    if args.install and header.source == OPENCODE:
        # Never into opencode's database: the export file here, for `opencode import`.
        return Path.cwd() / relative
    if args.install:
        projects = projects_dir(args.projects_dir)
        destination = projects / _inside(header.project_dir) / relative
        # A directory on the way that is a symlink out of the projects dir is not followed
        # (checked before any directory is made, so none is made out there either).
        if not destination.parent.resolve().is_relative_to(projects.resolve()):
            raise UnsafePathError(
                f"{destination.parent} leads out of {projects}; not writing there"
            )
        return destination
    output = Path(args.output)
    if not file.is_subagent and relative.parent == Path("."):
        return output
    stem = output.name.removesuffix(".jsonl").removesuffix(".json")
    return output.parent / stem / relative.relative_to(relative.parts[0])


def cmd_slim(args: argparse.Namespace) -> int:
    """Stream a slim copy of a session to stdout, a file, or Claude Code's projects dir."""
    if args.keep_last < 0 or args.max_side < 0 or args.max_bytes < 0:
        raise UsageError("--keep-last, --max-side and --max-bytes must not be negative")
    to_stdout = not args.output and not args.install
    if to_stdout and args.json:
        raise UsageError("--json prints a summary: give -o FILE or --install for the copy")
    if args.output:
        _check_output_file(Path(args.output))
    fork_id = str(uuid.uuid4()) if args.fork else ""
    written: list[_Written] = []
    handle: IO[bytes] | None = None
    header = hpb.SlimHeader()
    file = hpb.SlimFile()
    try:
        with _client(args) as sb:
            stream = sb.history.slim_session(
                args.session,
                fork_session_id=fork_id,
                downscale=args.images == "downscale",
                max_side=args.max_side,
                max_bytes=args.max_bytes,
                keep_last=args.keep_last,
                include_subagents=not to_stdout,
            )
            for message in stream:
                kind = message.WhichOneof("item")
                if kind == "header":
                    header = message.header
                elif kind == "file":
                    file = message.file
                    if to_stdout:
                        written.append(_Written(message.file.session_id, Path("-"), None))
                        handle = sys.stdout.buffer
                        continue
                    destination = _destination(args, header, message.file)
                    if args.fork and destination.exists():
                        raise UsageError(f"{destination} exists; not writing over it")
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    partial = destination.with_name(destination.name + PARTIAL_SUFFIX)
                    handle = _open_partial(partial)
                    written.append(_Written(message.file.session_id, destination, partial))
                elif kind == "data" and handle is not None:
                    handle.write(message.data)
                elif kind == "file_end":
                    written[-1].end = message.file_end
                    if handle is not None and handle is not sys.stdout.buffer:
                        _like_original(handle, file)
                        handle.close()
                    elif handle is not None:
                        handle.flush()
                    handle = None
            left_out = _subagents_left_out(sb, args.session) if to_stdout else 0
    except BaseException:
        if handle is not None and handle is not sys.stdout.buffer:
            handle.close()
        for item in written:
            if item.partial is not None:
                item.partial.unlink(missing_ok=True)
        raise
    backups = _put_in_place(written, keep_originals=bool(args.fork) or not args.install)
    _report(args, header, written, backups, to_stdout)
    if left_out:
        count = (
            f"{left_out} sub-agent thread(s)" if left_out > 0 else "its sub-agent threads, if any"
        )
        print(
            f"left out {count}: stdout holds the session alone; -o FILE or --install writes them",
            file=sys.stderr,
        )
    return 0


def _like_original(handle: IO[bytes], file: hpb.SlimFile) -> None:
    """A copy gets its original's permission bits (never more than read and write) and its
    modification time: a copy is as private as its original, and lists beside it rather than
    above every session as the newest."""
    handle.flush()
    if file.source_mode:
        os.fchmod(handle.fileno(), file.source_mode & 0o666)
    if file.HasField("source_modified_time"):
        modified = file.source_modified_time.ToNanoseconds()
        os.utime(handle.fileno(), ns=(modified, modified))


def _subagents_left_out(sb: Any, session_id: str) -> int:
    """How many sub-agent threads the session has (-1 when that cannot be told)."""
    try:
        return int(sb.history.get_session(session_id).subagent_count)
    except ScrollbackError:
        return -1


def _create_new(path: Path) -> IO[bytes]:
    """`path` opened for writing as a file created now (mode 0600)."""
    return os.fdopen(os.open(path, _CREATE_NEW, 0o600), "wb")


def _open_partial(partial: Path) -> IO[bytes]:
    """A new partial file: one left in the way (an interrupted run's, a planted link) is
    removed by name first, never followed; anything still in the way is an error."""
    try:
        return _create_new(partial)
    except FileExistsError:
        pass
    try:
        partial.unlink()  # removes a link itself, never what it points to
        return _create_new(partial)
    except OSError:
        raise UsageError(f"{partial} is in the way and cannot be replaced; remove it") from None


def _new_backup(destination: Path, stamp: str) -> Path:
    """A backup name nobody has taken, reserved by creating it (O_EXCL)."""
    for attempt in itertools.count(1):
        suffix = BACKUP_SUFFIX + stamp + (f"-{attempt}" if attempt > 1 else "")
        backup = destination.with_name(destination.name + suffix)
        try:
            os.close(os.open(backup, _CREATE_NEW, 0o600))
        except FileExistsError:
            continue
        return backup
    raise AssertionError("unreachable")


def _put_in_place(written: list[_Written], *, keep_originals: bool) -> dict[Path, Path]:
    """Rename each partial file into place; an original there first goes to a new backup."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    backups: dict[Path, Path] = {}
    for item in written:
        if item.partial is None:
            continue
        if os.path.lexists(item.destination) and not keep_originals:
            # Replacing the empty file reserved for it: the backup takes no one else's name.
            backup = _new_backup(item.destination, stamp)
            os.replace(item.destination, backup)
            backups[item.destination] = backup
        os.replace(item.partial, item.destination)
    return backups


def _report(
    args: argparse.Namespace,
    header: hpb.SlimHeader,
    written: list[_Written],
    backups: dict[Path, Path],
    to_stdout: bool,
) -> None:
    files = [
        {
            "session_id": item.session_id,
            "output": str(item.destination),
            "backup": str(backups[item.destination]) if item.destination in backups else "",
            **{
                f.name: int(getattr(item.end, f.name))
                for f in item.end.DESCRIPTOR.fields
                if f.name != "not_downscaled"
            },
            "not_downscaled": [message_json(n) for n in item.end.not_downscaled],
        }
        for item in written
    ]
    summary = {
        "session_id": header.session_id,
        "copy_session_id": header.copy_session_id,
        "project_dir": header.project_dir,
        "installed": bool(args.install),
        "files": files,
    }
    if args.json:
        _print_json(summary)
        return
    out = sys.stderr if to_stdout else sys.stdout
    for item in written:
        end = item.end
        print(
            f"{item.session_id}: {end.lines} lines, {end.images_replaced} images and "
            f"{end.documents_replaced} documents cut, {end.copies_replaced} copies cut, "
            f"{end.images_downscaled} downscaled, {end.images_kept} kept; "
            f"{end.bytes_read:,} -> {end.bytes_written:,} bytes"
            + ("" if to_stdout else f" to {item.destination}"),
            file=out,
        )
        for refused in end.not_downscaled:
            print(f"  {refused.images} cut, not downscaled: {refused.reason}", file=out)
        if end.omitted_tail_bytes:
            print(
                f"  left out a half-written last line ({end.omitted_tail_bytes:,} bytes)", file=out
            )
    for original, backup in backups.items():
        print(f"the original {original} is now {backup}", file=out)
    if args.install and header.source == CODEX:
        print(f"resume it with: codex resume {header.copy_session_id}", file=out)
    elif args.install and header.source == OPENCODE:
        # opencode's database is never written by Scrollback: opencode imports the copy itself.
        imports = " && ".join(f"opencode import {shlex.quote(str(i.destination))}" for i in written)
        print(
            f"add it to opencode in the project's directory with: {imports}\n"
            f"then continue it with: opencode --session {header.copy_session_id}",
            file=out,
        )
    elif args.install:
        print(
            f"resume it in the project's directory with: claude --resume {header.copy_session_id}",
            file=out,
        )


def _matches(path: str, at: str) -> bool:
    """An image at `path` is the one `at` names: the same block, or one inside it."""
    return bool(path) and (path == at or path.startswith(at + ".") or at.startswith(path + "."))


def cmd_images(args: argparse.Namespace) -> int:
    """List a session's images and documents (or the one an API error names)."""
    at = ""
    if args.at:
        found = _API_PATH.search(args.at)
        if found is None:
            raise UsageError("--at takes an API path such as messages.41.content.31")
        at = found.group(0)
    with _client(args) as sb:
        listing: ImageList = sb.history.list_images(
            args.session, include_subagents=not args.no_subagents
        )
    images = listing.images
    if at:
        images = [i for i in images if i.session_id == args.session and _matches(i.api_path, at)]
    totals = listing.totals
    if args.json:
        _print_json(
            {
                "images": [message_json(i) for i in images],
                "totals": message_json(totals),
            }
        )
    else:
        _print_images(images, totals, args.session, args.refs)
    if at and not images:
        print(f"scrollback: no image or document at {at} in {args.session}", file=sys.stderr)
        return 3
    return 0


def _print_images(
    images: list[hpb.ImageInfo], totals: hpb.ImageTotals, session: str, refs: bool
) -> None:
    """A table that fits the terminal: position, type, pixels, size and problems, one row an
    image; the position is never cut (it is what an API error names). With `refs`, each
    image's ref and pin after the table, one line each, whole, to copy."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from scrollback_app.cli_client import _console
    from scrollback_app.cli_sessions import human_size

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("position", no_wrap=True)
    table.add_column("type", no_wrap=True)
    table.add_column("pixels", justify="right", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("problems", overflow="fold", min_width=12)
    elsewhere = False
    for info in images:
        position = info.api_path or "(not sent)"
        if not info.api_path and info.ref.entry_uuid.startswith("at-"):
            # A Codex rollout's line has no uuid and no computed API position: its line.
            position = f"line {info.line_number}"
        if info.session_id != session:
            position, elsewhere = f"↳ {position}", True
        kind = (info.media_type or info.declared_media_type).removeprefix("image/")
        if info.kind != "image":
            kind = f"{info.kind} {kind}".strip()
        pixels = f"{info.width}x{info.height}" if info.width else "?"
        problems = Text(", ".join(p.replace("_", " ") for p in info.problems), style="bold")
        table.add_row(position, kind, pixels, human_size(info.size_bytes), problems)
    console = _console()
    if images:
        console.print(table)
    if elsewhere:
        console.print(Text("↳ in a sub-agent's thread (positions count in that thread)"))
    console.print(
        Text(
            f"{totals.images} images ({totals.with_problems} with problems), "
            f"{totals.documents} documents, {human_size(totals.size_bytes)}"
        )
    )
    if refs:
        for info in images:
            if info.HasField("ref"):
                index = f"/{info.ref.index}"
                ref = f"{info.ref.session_id}/{info.ref.entry_uuid}{index} --pin {info.ref.pin}"
            else:
                ref = "(no ref: its payload is too short to be cut)"
            print(f"{info.api_path or '(not sent)'}  {ref}")
    elif images:
        console.print(Text("refs: --refs (or --json)", style="dim"))
