"""`scrollback export SESSION --html DIR`: a static page drawn by the viewer's renderer.

The session's entries go into the page's data as the viewer reads them, and
each photo into a file beside it, fetched once and loaded lazily by the page.
"""

from __future__ import annotations

import argparse
import html
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import imagesize
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from client import Client, Media
from scrollback.contract.enumeration import is_gemini_message, is_rollout_entry, iter_image_blocks
from scrollback.contract.proto_json import message_json
from scrollback.history.v1 import history_pb2 as hpb
from scrollback_app import export_page
from scrollback_app.cli_client import (
    UsageError,
    _client,
    _print_json,
)
from scrollback_app.cli_entries import _parsed, gemini_texts, strip_ansi

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

    def _gemini_html(self, entry: hpb.Entry, parsed: dict[str, Any]) -> str:
        """A Gemini CLI message's text and photos (exporting its photos here is what gives
        the page's renderer their files)."""
        texts = [t for t in gemini_texts(parsed.get("content")) if t != "[image]"]
        body = "".join(f'<div class="text">{_html_text(t)}</div>' for t in texts)
        for call in parsed.get("toolCalls") or ():
            if isinstance(call, dict):
                name = html.escape(str(call.get("name", "")))
                args = json.dumps(call.get("args"), indent=2, ensure_ascii=False)
                body += f"<details><summary>tool: {name}</summary><pre>{_html_text(args)}</pre></details>"
        body += "".join(
            self._image_html(entry, ref.index)
            for ref in sorted(entry.media_refs, key=lambda r: r.index)
        )
        kind = html.escape(entry.type)
        stamp = html.escape(entry.timestamp)
        anchor = html.escape(f"e-{entry.uuid or entry.byte_offset}", quote=True)
        return (
            f'<div class="entry {kind}" id="{anchor}"><div class="meta">{kind} · '
            f'<a href="#{anchor}">{stamp}</a></div>{body}</div>\n'
        )

    def entry_html(self, entry: hpb.Entry) -> str:
        """One entry as an HTML fragment ("" for bookkeeping entries)."""
        parsed = _parsed(entry)
        if entry.type == "summary":
            text = _html_text(str(parsed.get("summary", "")))
            return f'<p class="meta">summary: {text}</p>\n'
        if is_rollout_entry(parsed):
            return self._rollout_html(entry, parsed)
        if is_gemini_message(parsed):
            return self._gemini_html(entry, parsed)
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
