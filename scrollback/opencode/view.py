"""One opencode session as the bytes of a JSONL transcript, built from the rows' own bytes.

Every service reads transcripts as lines of a byte source; an opencode
session becomes one by this mapping (docs/contract.md §1, "opencode"): one
line per message, its messages in opencode's order (`time_created`, then
id), each line

    {"type":"opencode","uuid":<message id>,"timestamp":<time_created, ISO 8601>,"payload":{
     "message":<message.data>,"parts":[{"id":<part id>,"data":<part.data>},...]}}

(one line, no spaces), the parts of a message in id order, and `<...data>`
the column's JSON text byte for byte. The line has a rollout's shape (a
`payload` object, no top-level `message`): stripping, refs, windows and pins
stay textual and byte-exact, a data URL in a part (a file part's `url`, a
tool's attachments) is an image exactly as in a Codex rollout, and its pin is
the xxh3 of the bytes stored in the row. The line's images are numbered by
the `image/...` data URLs of its payload depth-first, so in part order; a ref
names an image by its part (scrollback.opencode.naming).

The map of a view (`SessionMap`: where each row's bytes sit) is made in one
short read transaction; a message's data is copied into it (small), and a
part's data when it is at most SMALL_PART_BYTES; a larger part's data is
read when asked for, by incremental blob I/O of just the bytes
wanted, so a 100 MB part is never loaded whole. A part whose size changed
since the map was made raises SessionChangedError rather than serve other
bytes. The last message, when it is an assistant's without `time.completed`
(still streaming) or a message with no parts yet, is held back until it is
written: so the view only grows at its end while opencode writes, and page
tokens survive new rows.
"""

from __future__ import annotations

import bisect
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
import xxhash

from scrollback.contract.refs import OPENCODE
from scrollback.contract.stripping import MIN_INLINE_LIMIT, strip_line_streamed
from scrollback.linefile import ByteSource, LineFile
from scrollback.opencode.db import OpencodeDatabase, PartReader, SessionChangedError, rows

# A part this small is copied into the map when it is made (a step, a short text), so reading
# a line's edges (its mark) or a window of short messages opens no blob.
SMALL_PART_BYTES = 1024
# The `type` of every line of a view: the source's name.
ENTRY_TYPE = OPENCODE
# The device number every view reports (no file is behind it).
VIEW_DEV = 0x0C0DE
# A line's wrapper, around the row bytes (module docstring).
_LINE_OPEN = b'{"type":"opencode","uuid":'
_TIME = b',"timestamp":'
_MESSAGE = b',"payload":{"message":'
_PARTS = b',"parts":['
_PART_OPEN = b'{"id":'
_PART_DATA = b',"data":'
_PART_CLOSE = b"}"
_COMMA = b","
_LINE_CLOSE = b"]}}\n"

# (message count, last message change, part count, last part change): what the
# map of a session was made at; a session with the same key has the same map.
ChangeKey = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class ViewStat:
    """A view's stat: its size, and times and identity from the rows."""

    st_size: int
    st_dev: int
    st_ino: int
    st_mtime_ns: int
    st_ctime_ns: int


@dataclass(frozen=True, slots=True)
class SessionMap:
    """Where each piece of a session's view sits: literal bytes, or a part's data by rowid.

    `starts[k]` is the offset of piece k; `pieces[k]` its bytes, or the rowid
    of the part whose data it is (`lengths[k]` bytes); `lines` the offset and
    message id of each line; `held` the bytes the pieces hold.
    """

    starts: tuple[int, ...]
    pieces: tuple[bytes | int, ...]
    lengths: tuple[int, ...]
    size: int
    key: ChangeKey
    ino: int
    mtime_ns: int
    lines: tuple[tuple[int, str], ...]
    held: int


def change_key(conn: sqlite3.Connection, session: str) -> ChangeKey:
    """What the session's rows are at now (counts and last changes), by its indexes."""
    messages = rows(
        conn,
        "SELECT count(*), coalesce(max(time_updated), 0) FROM message WHERE session_id = ?",
        (session,),
    )[0]
    parts = rows(
        conn,
        "SELECT count(*), coalesce(max(time_updated), 0) FROM part WHERE session_id = ?",
        (session,),
    )[0]
    return (int(messages[0]), int(messages[1]), int(parts[0]), int(parts[1]))


def view_ino(location: str, session: str) -> int:
    """The inode number a session's view reports: stable for that database and session."""
    return xxhash.xxh3_64_intdigest(f"{location}\0{session}".encode()) >> 2


def _streaming(data: bytes) -> bool:
    """True for an assistant message's data without `time.completed` (still being written)."""
    try:
        info = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    if not isinstance(info, dict) or info.get("role") != "assistant":
        return False
    time = info.get("time")
    return not (isinstance(time, dict) and time.get("completed") is not None)


class _Builder:
    """The pieces of a map, appended in order."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.pieces: list[bytes | int] = []
        self.lengths: list[int] = []
        self.size = 0

    def add(self, piece: bytes | int, length: int) -> None:
        if isinstance(piece, bytes) and self.pieces and isinstance(self.pieces[-1], bytes):
            self.pieces[-1] += piece  # literal runs are kept as one piece
            self.lengths[-1] += length
        else:
            self.starts.append(self.size)
            self.pieces.append(piece)
            self.lengths.append(length)
        self.size += length


def build_map(conn: sqlite3.Connection, session: str, key: ChangeKey, ino: int) -> SessionMap:
    """The map of a session's view, read in the caller's transaction (module docstring)."""
    messages = rows(
        conn,
        "SELECT id, time_created, time_updated, data FROM message WHERE session_id = ?"
        " ORDER BY time_created, id",
        (session,),
    )
    parts: dict[str, list[tuple[int, str, int]]] = {}
    for rowid, part_id, message_id, updated in rows(
        conn,
        "SELECT rowid, id, message_id, time_updated FROM part WHERE session_id = ?"
        " ORDER BY message_id, id",
        (session,),
    ):
        parts.setdefault(message_id, []).append((rowid, part_id, updated))
    if messages:
        last_id, _, _, last_data = messages[-1]
        if not parts.get(last_id) or _streaming(_text_bytes(last_data)):
            messages.pop()
    builder = _Builder()
    lines: list[tuple[int, str]] = []
    mtime_ms = 0
    for message_id, created, updated, data in messages:
        lines.append((builder.size, message_id))
        mtime_ms = max(mtime_ms, int(updated))
        head = b"".join((_LINE_OPEN, orjson.dumps(message_id), _TIME, _iso(int(created)), _MESSAGE))
        body = _text_bytes(data)
        builder.add(head + body + _PARTS, len(head) + len(body) + len(_PARTS))
        for n, (rowid, part_id, part_updated) in enumerate(parts.get(message_id, ())):
            mtime_ms = max(mtime_ms, int(part_updated))
            opener = (_COMMA if n else b"") + _PART_OPEN + orjson.dumps(part_id) + _PART_DATA
            builder.add(opener, len(opener))
            with conn.blobopen("part", "data", rowid, readonly=True) as blob:
                size = len(blob)
                if size <= SMALL_PART_BYTES:
                    builder.add(blob.read(), size)  # held: no blob I/O to read it again
                else:
                    builder.add(rowid, size)
            builder.add(_PART_CLOSE, len(_PART_CLOSE))
        builder.add(_LINE_CLOSE, len(_LINE_CLOSE))
    return SessionMap(
        tuple(builder.starts),
        tuple(builder.pieces),
        tuple(builder.lengths),
        builder.size,
        key,
        ino,
        mtime_ms * 1_000_000,
        tuple(lines),
        sum(len(piece) for piece in builder.pieces if isinstance(piece, bytes)),
    )


def _line_start(line: tuple[int, str]) -> int:
    return line[0]


def _iso(ms: int) -> bytes:
    """A time in ms since the epoch as a quoted ISO 8601 UTC string (as Claude Code writes)."""
    try:
        moment = datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        moment = datetime.fromtimestamp(0, UTC)
    return b'"' + moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3].encode() + b'Z"'


def _text_bytes(value: object) -> bytes:
    """A TEXT (or BLOB) column's bytes as stored (UTF-8)."""
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8", "surrogatepass")


class SessionView(ByteSource):
    """A session's view (module docstring): positional reads of its map's bytes."""

    __slots__ = ("_db", "_parts", "_parts_lock", "map")

    def __init__(self, db: OpencodeDatabase, session_map: SessionMap) -> None:
        self._db = db
        self.map = session_map
        self._parts: PartReader | None = None  # opened at the first read of a part
        self._parts_lock = threading.Lock()

    def read(self, length: int, offset: int) -> bytes:
        """The bytes [offset, offset + length), fewer at the end (SessionChangedError if a
        part read changed size since the map was made)."""
        if length < 0 or offset < 0:
            raise ValueError("negative read")
        view = self.map
        end = min(offset + length, view.size)
        out: list[bytes] = []
        k = bisect.bisect_right(view.starts, offset) - 1
        position = offset
        while position < end and k < len(view.pieces):
            start, piece, size = view.starts[k], view.pieces[k], view.lengths[k]
            take = min(end, start + size) - position
            inner = position - start
            if isinstance(piece, bytes):
                out.append(piece[inner : inner + take])
            else:
                out.append(self._read_part(piece, take, inner, size))
            position += take
            k += 1
        return b"".join(out)

    def _read_part(self, rowid: int, length: int, offset: int, expected: int) -> bytes:
        with self._parts_lock:
            if self._parts is None:
                self._parts = PartReader(self._db)
            return self._parts.read(rowid, length, offset, expected)

    def _line(self, k: int) -> tuple[int, int]:
        """(offset, length without its newline) of line k of the view."""
        lines = self.map.lines
        start = lines[k][0]
        end = lines[k + 1][0] if k + 1 < len(lines) else self.map.size
        return start, end - start - 1

    def lines_before(self, offset: int, limit: int) -> list[tuple[int, int]]:
        """(offset, length) of up to `limit` lines starting before `offset`, newest first: the
        map knows where each message's line is (linewalk.KnownLines), so a window finds its
        lines without a scan or a line index."""
        k = bisect.bisect_left(self.map.lines, offset, key=_line_start)
        return [self._line(j) for j in range(k - 1, max(k - 1 - limit, -1), -1)]

    def lines_from(self, offset: int, limit: int) -> list[tuple[int, int]]:
        """(offset, length) of up to `limit` lines starting at or after `offset`, in order."""
        k = bisect.bisect_left(self.map.lines, offset, key=_line_start)
        return [self._line(j) for j in range(k, min(k + limit, len(self.map.lines)))]

    def read_into(self, buffer: memoryview | bytearray, offset: int) -> int:
        """Copy into `buffer` from `offset`; the count copied, fewer at the end."""
        data = self.read(len(buffer), offset)
        buffer[: len(data)] = data
        return len(data)

    def stat(self) -> ViewStat:
        """The view's size and its rows' last change."""
        view = self.map
        return ViewStat(view.size, VIEW_DEV, view.ino, view.mtime_ns, view.mtime_ns)

    def dup(self) -> SessionView:
        """The same view (the same map)."""
        return SessionView(self._db, self.map)

    def close(self) -> None:
        """Close the part reader, if one was opened."""
        with self._parts_lock:
            if self._parts is not None:
                self._parts.close()
                self._parts = None

    def __del__(self) -> None:
        # A view dropped without `close` (a window kept for rereads) still lets go of its
        # read transaction.
        if self._parts is not None:
            self._parts.close()


# A part's data as the line of a rollout-shaped object, to count its images (module docstring).
_ALONE_OPEN = b'{"payload":'
_ALONE_CLOSE = b"}\n"


def part_size(db: OpencodeDatabase, rowid: int) -> int:
    """The bytes of a part's data (-1 if the part is gone)."""
    with db.take_conn() as conn:
        try:
            with conn.blobopen("part", "data", rowid, readonly=True) as blob:
                return len(blob)
        except sqlite3.Error:
            return -1


def part_images(db: OpencodeDatabase, rowid: int, size: int) -> int:
    """How many images a part's data of `size` bytes holds, counted by the stripper streaming
    through it (the rollout rule, as its line counts them); 0 if it is not an object."""
    builder = _Builder()
    builder.add(_ALONE_OPEN, len(_ALONE_OPEN))
    builder.add(rowid, size)
    builder.add(_ALONE_CLOSE, len(_ALONE_CLOSE))
    alone = SessionMap(
        tuple(builder.starts), tuple(builder.pieces), tuple(builder.lengths), builder.size,
        (0, 0, 0, 0), 0, 0, (), 0,
    )  # fmt: skip
    length = builder.size - 1  # the line, without its newline
    with SessionView(db, alone) as view:
        stripped = strip_line_streamed(
            LineFile(view).line_reader(0, length, SessionChangedError),
            length,
            MIN_INLINE_LIMIT,
            length + 1,
        )
    return 0 if stripped is None else stripped.image_count
