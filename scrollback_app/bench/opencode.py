"""opencode figures: a session served from opencode's SQLite database vs a Claude Code transcript.

An opencode database (docs/contract.md §1, "opencode") is generated with
opencode's tables (`session`, `message`, `part`; the columns as its drizzle
migrations make them), and beside it a Claude Code transcript of the same
content: one line per message, the same text, the same images (base64 in an
image block where opencode has a `data:` URL in a file part), the tool call
and its output as blocks. Every other user message has an image; each
assistant message has a step, reasoning, a tool call with its output, text
and the step's finish. A second session holds one user message whose file
part is a 100 MB data URL. One history and one media server subprocess serve
the database beside the transcript.

- **Latest window** (`opencode_window_vs_claude`): the latest 200 entries of
  the session vs of the transcript, interleaved, medians. Target <= 1.5x.
- **First window** (`opencode_first_window_vs_claude`): the first latest
  window of each, before anything of it is cached or indexed (one sample each).
- **Second window** (`opencode_second_window_vs_claude`): that window again at
  once (one sample each): served from the entries the first cached, however far
  a line index is built (an opencode view knows its lines).
- **Uncached window** (`opencode_window_uncached_vs_claude`): the latest
  window with an inline limit no earlier window asked for (so no cached entry
  answers: every line is read and stripped), interleaved, medians.
- **Cold image** (`opencode_ttfb_cold_vs_claude`): time to first byte of
  ReadMedia of an image of the latest window the media server has not
  resolved before, each ref with its hint, interleaved, medians. Target <= 1.2x.
- **Peak memory** (`opencode_100mb_part_peak_rss`): the media server's peak
  resident memory while it serves the 100 MB part whole, over its peak before.
  Target <= 64 MB: a part is read by incremental blob I/O, never whole.
"""

from __future__ import annotations

import base64
import functools
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import orjson

from scrollback.history.v1 import history_pb2_grpc
from scrollback.media.v1 import media_pb2_grpc
from scrollback.ref.v1 import ref_pb2
from scrollback_app.bench import procs, services
from scrollback_app.bench.figures import Figure, Target
from scrollback_app.bench.transcripts import PNG_SIGNATURE

MB = 1_000_000
MIB = 1024 * 1024
CLAUDE_SESSION = "claude-same-size"
SESSION = "ses_bench0000000000000000001"
BIG_SESSION = "ses_bench0000000000000000002"
# The raw bytes of the big part's image (its base64 is 100 MiB).
BIG_IMAGE_BYTES = 75 * MIB
DIRECTORY = "/bench/project"
# The inline limit of the uncached windows' first round (each round asks a new one).
UNCACHED_LIMIT = 40_000
# How much more memory serving the big part may take than the media server took before.
GROWTH_MAX_MIB = 64
# opencode's tables, the columns as its migrations leave them (those read, and the NOT NULL ones).
_SCHEMA = """
CREATE TABLE `session` (`id` text PRIMARY KEY, `project_id` text NOT NULL, `parent_id` text,
  `slug` text NOT NULL, `directory` text NOT NULL, `title` text NOT NULL,
  `version` text NOT NULL, `time_created` integer NOT NULL, `time_updated` integer NOT NULL);
CREATE TABLE `message` (`id` text PRIMARY KEY, `session_id` text NOT NULL,
  `time_created` integer NOT NULL, `time_updated` integer NOT NULL, `data` text NOT NULL);
CREATE TABLE `part` (`id` text PRIMARY KEY, `message_id` text NOT NULL,
  `session_id` text NOT NULL, `time_created` integer NOT NULL,
  `time_updated` integer NOT NULL, `data` text NOT NULL);
CREATE INDEX `message_session_time_created_id_idx` ON `message` (`session_id`,`time_created`,`id`);
CREATE INDEX `part_message_id_id_idx` ON `part` (`message_id`,`id`);
CREATE INDEX `part_session_idx` ON `part` (`session_id`);
"""


def _data_url(image_bytes: int, rng: random.Random) -> str:
    raw = PNG_SIGNATURE + rng.randbytes(max(0, image_bytes - len(PNG_SIGNATURE)))
    return "data:image/png;base64," + base64.b64encode(raw).decode()


def _words(rng: random.Random, count: int) -> str:
    vocabulary = ("the", "file", "test", "server", "window", "photo", "line", "read", "grpc", "fix")
    return " ".join(rng.choice(vocabulary) for _ in range(count))


class _Writer:
    """Rows of one database, with ids that sort by time as opencode's do."""

    def __init__(self, conn: sqlite3.Connection, claude: BinaryIO) -> None:
        self.conn = conn
        self.claude = claude
        self.clock = 1_760_000_000_000
        self.written = 0

    def _id(self, prefix: str) -> tuple[str, int]:
        self.clock += 1
        return f"{prefix}_{self.clock:015d}bench", self.clock

    def session(self, sid: str, title: str) -> None:
        self.conn.execute(
            "INSERT INTO session VALUES (?, 'proj', NULL, 'bench', ?, ?, '1.2.0', ?, ?)",
            (sid, DIRECTORY, title, self.clock, self.clock),
        )

    def message(self, session: str, data: object) -> str:
        mid, now = self._id("msg")
        text = orjson.dumps(data).decode()
        self.conn.execute(
            "INSERT INTO message VALUES (?, ?, ?, ?, ?)", (mid, session, now, now, text)
        )
        self.written += len(text)
        return mid

    def part(self, session: str, message: str, data: object) -> None:
        pid, now = self._id("prt")
        text = orjson.dumps(data).decode()
        self.conn.execute(
            "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)", (pid, message, session, now, now, text)
        )
        self.written += len(text)


def _claude_line(writer: _Writer, uuid: str, role: str, content: list[object]) -> None:
    """The same message as Claude Code writes it: one line, its blocks in order."""
    line = {"type": role, "uuid": uuid, "timestamp": "2025-10-09T08:00:00.000Z",
            "message": {"role": role, "content": content}}  # fmt: skip
    writer.claude.write(orjson.dumps(line) + b"\n")


def _turn(writer: _Writer, rng: random.Random, turn: int, image_bytes: int) -> None:
    """One user message (an image every other turn) and the assistant's answer, in both forms."""
    user = writer.message(
        SESSION,
        {"role": "user", "time": {"created": writer.clock}, "agent": "build",
         "model": {"providerID": "anthropic", "modelID": "claude-sonnet-4"}},
    )  # fmt: skip
    prompt = _words(rng, 40)
    writer.part(SESSION, user, {"type": "text", "text": prompt})
    blocks: list[object] = [{"type": "text", "text": prompt}]
    if turn % 2 == 0:
        url = _data_url(image_bytes, rng)
        writer.part(
            SESSION, user, {"type": "file", "mime": "image/png", "filename": "shot.png", "url": url}
        )
        source = {"type": "base64", "media_type": "image/png", "data": url.partition(",")[2]}
        blocks.append({"type": "image", "source": source})
    _claude_line(writer, user, "user", blocks)
    tokens = {"input": 1500, "output": 300, "reasoning": 0, "cache": {"read": 0, "write": 0}}
    answer = writer.message(
        SESSION,
        {"role": "assistant", "time": {"created": writer.clock, "completed": writer.clock + 1},
         "parentID": user, "modelID": "claude-sonnet-4", "providerID": "anthropic",
         "mode": "build", "agent": "build", "path": {"cwd": DIRECTORY, "root": DIRECTORY},
         "cost": 0.01, "tokens": tokens},
    )  # fmt: skip
    thinking, pattern, output, text = (_words(rng, n) for n in (20, 2, 120, 120))
    writer.part(SESSION, answer, {"type": "step-start"})
    writer.part(SESSION, answer, {"type": "reasoning", "text": thinking, "time": {"start": 1}})
    writer.part(
        SESSION,
        answer,
        {"type": "tool", "callID": f"call_{turn}", "tool": "grep",
         "state": {"status": "completed", "input": {"pattern": pattern},
                   "output": output, "title": "grep", "metadata": {},
                   "time": {"start": 1, "end": 2}}},
    )  # fmt: skip
    writer.part(SESSION, answer, {"type": "text", "text": text})
    finish = {"type": "step-finish", "reason": "stop", "cost": 0.01, "tokens": tokens}
    writer.part(SESSION, answer, finish)
    _claude_line(
        writer,
        answer,
        "assistant",
        [{"type": "thinking", "thinking": thinking},
         {"type": "tool_use", "id": f"call_{turn}", "name": "grep", "input": {"pattern": pattern}},
         {"type": "tool_result", "tool_use_id": f"call_{turn}", "content": output},
         {"type": "text", "text": text}],
    )  # fmt: skip


def write_database(path: Path, claude: Path, target_bytes: int, image_bytes: int) -> int:
    """An opencode database at `path` (a session of at least `target_bytes` of row data, and
    the big part's session) and the session as a Claude Code transcript at `claude`; the
    session's data bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    claude.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(_SCHEMA)
        writer = _Writer(conn, claude.open("wb"))
        rng = random.Random(12)
        conn.execute("BEGIN")
        writer.session(SESSION, "bench session")
        turn = 0
        while writer.written < target_bytes:
            _turn(writer, rng, turn, image_bytes)
            turn += 1
        size = writer.written
        writer.session(BIG_SESSION, "one huge attachment")
        user = writer.message(BIG_SESSION, {"role": "user", "time": {"created": writer.clock}})
        big = {"type": "file", "mime": "image/png", "filename": "huge.png",
               "url": _data_url(BIG_IMAGE_BYTES, rng)}  # fmt: skip
        writer.part(BIG_SESSION, user, big)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        writer.claude.close()
    finally:
        conn.close()
    return size


async def measure(
    work: Path, size_bytes: int, image_bytes: int, repeats: int, log: Callable[[str], None]
) -> list[Figure]:
    """The latest window and a cold image of an opencode session vs a Claude Code transcript of
    its size, and the media server's peak memory serving a 100 MB part."""
    base = work / "opencode-bench"
    root = base / "root"
    database = base / "opencode.db"
    claude = root / "bench" / f"{CLAUDE_SESSION}.jsonl"
    size = write_database(database, claude, size_bytes, image_bytes)
    log(
        f"opencode session {size / MB:,.0f} MB of rows, claude transcript {claude.stat().st_size / MB:,.0f} MB"
    )
    settings = {"SCROLLBACK_OPENCODE_DB": str(database)}
    history_proc = procs.history_server(root, base / "state-history", settings=settings)
    media_proc = procs.media_server(root, base / "state-media", settings=settings)
    async with (
        history_proc as history_server,
        media_proc as media_server,
        services.channel(history_server.addr) as history_channel,
        services.channel(media_server.addr) as media_channel,
    ):
        history = history_pb2_grpc.HistoryServiceStub(history_channel)
        media = media_pb2_grpc.MediaServiceStub(media_channel)
        refs: dict[str, list[ref_pb2.MediaRef]] = {}
        first: dict[str, float] = {}
        second: dict[str, float] = {}
        for key, session in (("opencode", SESSION), ("claude", CLAUDE_SESSION)):
            started = time.perf_counter()
            window = await services.read_window(history, session)
            first[key] = time.perf_counter() - started
            # At once again: while the line index of a file seen first is still being built.
            second[key] = await services.timed(
                functools.partial(services.read_window, history, session)
            )
            refs[key] = list({r.entry_uuid: r for r in reversed(window.refs)}.values())
        if not refs["opencode"] or not refs["claude"]:
            raise RuntimeError("the generated session or transcript minted no refs")

        def window_case(session: str) -> services.TimedCase:
            async def run(_round: int) -> float | None:
                return await services.timed(lambda: services.read_window(history, session))

            return run

        windows = await services.interleave(
            {"opencode": window_case(SESSION), "claude": window_case(CLAUDE_SESSION)}, repeats
        )

        def uncached_case(session: str) -> services.TimedCase:
            async def run(round_number: int) -> float | None:
                # A limit of its own per round: no entry cached at another limit answers.
                limit = UNCACHED_LIMIT + 8 * round_number
                return await services.timed(
                    lambda: services.read_window(history, session, inline_limit_bytes=limit)
                )

            return run

        uncached = await services.interleave(
            {"opencode": uncached_case(SESSION), "claude": uncached_case(CLAUDE_SESSION)},
            repeats,
        )
        rounds = max(1, min(repeats, len(refs["opencode"]), len(refs["claude"])))

        def cold_case(choices: list[ref_pb2.MediaRef]) -> services.TimedCase:
            async def run(round_number: int) -> float | None:
                return await services.media_ttfb(media, choices[round_number % len(choices)])

            return run

        cold = await services.interleave(
            {"opencode": cold_case(refs["opencode"]), "claude": cold_case(refs["claude"])}, rounds
        )
        big = await services.read_window(history, BIG_SESSION)
        if not big.refs:
            raise RuntimeError("the big part minted no ref")
        before = media_server.peak_rss_bytes()
        served = await services.drain_media(media, big.refs[0])
        grown = media_server.peak_rss_bytes() - before
    label = f"{size / MB:,.0f} MB"
    return [
        Figure(
            key="opencode_window_vs_claude",
            name=f"latest ReadWindow (200 entries) of a {label} opencode session (SQLite) vs a "
            "Claude Code transcript of the same size",
            figure=windows["opencode"] * 1e3,
            baseline=windows["claude"] * 1e3,
            unit="ms",
            baseline_label="Claude Code",
            ratio=windows["opencode"] / windows["claude"],
            target=Target("<=", 1.5),
        ),
        Figure(
            key="opencode_first_window_vs_claude",
            name=f"first latest ReadWindow (200 entries) of a {label} opencode session, nothing "
            "of it cached or indexed, vs the Claude Code transcript's first",
            figure=first["opencode"] * 1e3,
            baseline=first["claude"] * 1e3,
            unit="ms",
            baseline_label="Claude Code",
            ratio=first["opencode"] / first["claude"],
            target=Target("<=", 1.5),
            note="one sample each",
        ),
        Figure(
            key="opencode_second_window_vs_claude",
            name=f"the same latest ReadWindow again at once, {label} opencode session vs the "
            "Claude Code transcript (a line index of the file may still be being built)",
            figure=second["opencode"] * 1e3,
            baseline=second["claude"] * 1e3,
            unit="ms",
            baseline_label="Claude Code",
            ratio=second["opencode"] / second["claude"],
            target=Target("<=", 1.5),
            note="one sample each",
        ),
        Figure(
            key="opencode_window_uncached_vs_claude",
            name=f"latest ReadWindow (200 entries) of a {label} opencode session vs the Claude "
            "Code transcript, every line read and stripped (an inline limit not asked before)",
            figure=uncached["opencode"] * 1e3,
            baseline=uncached["claude"] * 1e3,
            unit="ms",
            baseline_label="Claude Code",
            ratio=uncached["opencode"] / uncached["claude"],
            target=Target("<=", 1.5),
        ),
        Figure(
            key="opencode_ttfb_cold_vs_claude",
            name=f"ReadMedia time to first byte, cold image of the latest window, {label} opencode "
            "session vs Claude Code transcript",
            figure=cold["opencode"] * 1e3,
            baseline=cold["claude"] * 1e3,
            unit="ms",
            baseline_label="Claude Code",
            ratio=cold["opencode"] / cold["claude"],
            target=Target("<=", 1.2),
            note=f"cold: a ref the media server has not resolved before; {rounds} samples",
        ),
        Figure(
            key="opencode_100mb_part_peak_rss",
            name="media server peak RSS serving a 100 MB opencode file part whole, vs its peak "
            "before",
            figure=(before + grown) / MIB,
            baseline=before / MIB,
            unit="MiB",
            baseline_label="before",
            ratio=(before + grown) / before,
            target=Target(figure_max=round(before / MIB + GROWTH_MAX_MIB)),
            note=f"{served / MIB:,.0f} MiB of image served; VmHWM of the media server",
        ),
    ]
