"""The API's numbering of a transcript's entries, in memory bounded by its chain (docs/contract.md §14).

The rule (`api_positions`): the chain is the `parentUuid` path back from the
last user or assistant entry, a uuid naming the last entry that holds it; on
it, the user and assistant entries in order are the API's messages. Holding
every entry's facts to follow it costs memory per line, so the image list
finds it in two passes that hold only the chain's offsets:

1. `ChainWalk`, fed the file's lines newest first: the last entry with a
   role, then for each chain entry the entry holding its parent's uuid (near
   before it, else just after it, else further back). A line is parsed only
   when it holds the wanted uuid's text, and the walk ends at the chain's root.
2. `ChainCheck`, fed every entry in file order by the image pass: checks that
   the walk found the rule's chain (its head is the last entry with a role,
   each link names its parent, no chain entry's uuid comes again later in the
   file, kept as keyed hashes in `HashSlots`, and the root's parent, if
   anything holds it, is last held by a chain entry: then the rule, followed
   from the head, takes exactly these links) and numbers the chain's messages,
   on the way when the chain is in file order, else in chain order afterwards.
3. When a check fails (a uuid written again after its entry or a parent long
   after its child, a hash that collides), `api_positions` over every entry
   answers, with the bytes it holds counted.

Either way the memory is bounded by a budget (`images_memory_bytes` of the
history config, `NUMBERING_BUDGET` by default); past it the call fails with
ChainTooLargeError (RESOURCE_EXHAUSTED, `CHAIN_TOO_LARGE`).
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from history_service.config import DEFAULT_IMAGES_MEMORY_BYTES
from history_service.errors import ChainTooLargeError

# Bytes one call may hold to number a transcript's entries (SCROLLBACK_HISTORY_IMAGES_MEMORY_BYTES).
NUMBERING_BUDGET = DEFAULT_IMAGES_MEMORY_BYTES
# Per chain entry: its offset (8 bytes) and two hash slots (16); written out of file
# order, also a sorted copy of its offset, its role and block count (13 more).
CHAIN_ENTRY_BYTES = 24
UNSORTED_CHAIN_ENTRY_BYTES = 40
# A compact `parentUuid` member: null, or a string without escapes.
_PARENT = re.compile(rb'"parentUuid":(?:null|"([^"\\]*)")')
# Lines after a chain entry where its parent is looked for first.
LOOKAHEAD_LINES = 8
# Per entry of the full rule, beyond its two strings' characters: its facts, the strings'
# headers, its slots in the lists, map and set, and its position.
ENTRY_BYTES = 480


@dataclass(slots=True)
class EntryFacts:
    """What the API numbering needs of one entry."""

    uuid: str
    parent: str
    role: str  # "user" / "assistant" for a message the API is sent, else ""
    blocks: int  # the message's content blocks (a string content is one)


def entry_facts(entry: dict[str, Any]) -> EntryFacts:
    """The numbering's facts of one parsed entry."""
    uuid = entry.get("uuid")
    parent = entry.get("parentUuid")
    role = ""
    blocks = 0
    kind = entry.get("type")
    message = entry.get("message")
    if kind in ("user", "assistant") and isinstance(message, dict):
        if not entry.get("isApiErrorMessage"):
            role = str(kind)
        content = message.get("content")
        blocks = len(content) if isinstance(content, list) else 1
    return EntryFacts(
        uuid if isinstance(uuid, str) else "",
        parent if isinstance(parent, str) else "",
        role,
        blocks,
    )


def api_positions(entries: list[EntryFacts]) -> dict[int, tuple[int, int]]:
    """entry position -> (N, offset of its first block in message N), by docs/contract.md §14.

    The chain is the `parentUuid` path back from the last user or assistant
    entry; on it, the user and assistant entries in order are the API's
    messages, consecutive entries of one role merged into one message.
    """
    by_uuid = {facts.uuid: k for k, facts in enumerate(entries) if facts.uuid}
    last = next((k for k in range(len(entries) - 1, -1, -1) if entries[k].role), -1)
    chain: list[int] = []
    seen: set[int] = set()
    k = last
    while k >= 0 and k not in seen:
        seen.add(k)
        chain.append(k)
        k = by_uuid.get(entries[k].parent, -1)
    positions: dict[int, tuple[int, int]] = {}
    number, offset, role = -1, 0, ""
    for k in reversed(chain):
        facts = entries[k]
        if not facts.role:
            continue
        if facts.role != role:
            number, offset, role = number + 1, 0, facts.role
        positions[k] = (number, offset)
        offset += facts.blocks
    return positions


def positions_by_offset(
    entries: Iterable[tuple[int, EntryFacts]], budget: int = NUMBERING_BUDGET
) -> dict[int, tuple[int, int]]:
    """`api_positions` over (byte offset, facts) of every entry, keyed by offset; bounded."""
    offsets: list[int] = []
    facts: list[EntryFacts] = []
    held = 0
    for offset, each in entries:
        held += ENTRY_BYTES + len(each.uuid) + len(each.parent)
        if held > budget:
            raise ChainTooLargeError()
        offsets.append(offset)
        facts.append(each)
    return {offsets[k]: at for k, at in api_positions(facts).items()}


class HashSlots:
    """A set of 64-bit hashes in one flat array (open addressing): 16 bytes per member."""

    __slots__ = ("size", "table")

    def __init__(self, members: int) -> None:
        self.size = 2 * members + 1
        self.table = array("q", [0]) * self.size

    def add(self, key: int) -> bool:
        """Hold `key` (non-zero); False if it was held already."""
        table, size = self.table, self.size
        at = key % size
        while (held := table[at]) != 0:
            if held == key:
                return False
            at = (at + 1) % size
        table[at] = key
        return True

    def __contains__(self, key: int) -> bool:
        table, size = self.table, self.size
        at = key % size
        while (held := table[at]) != 0:
            if held == key:
                return True
            at = (at + 1) % size
        return False


# One line of a backward pass: (start, end, its bytes or None when too long to hold).
BackLine = tuple[int, int, bytes | None]


class ChainWalk:
    """The candidate chain: the file's entries walked newest first (pass 1).

    From each chain entry the walk takes the nearest entry before it holding
    its parent's uuid, when one lies within `LOOKAHEAD_LINES` lines; failing
    that, the newest such entry among the `LOOKAHEAD_LINES` lines after it
    (Claude Code writes a parent a line after its child now and then); failing
    that, the nearest one further back. The check (pass 2) decides whether
    each was the rule's: the last entry holding the uuid.
    """

    def __init__(self, budget: int = NUMBERING_BUDGET) -> None:
        self.budget = budget
        self.offsets = array("Q")  # head first
        self.root_parent = ""  # the parent of the chain's root ("" for none)
        self.in_order = True  # each parent written before its child

    def walk(
        self,
        lines: Iterable[BackLine],
        parse: Callable[[BackLine, bool], dict[str, Any] | None],
    ) -> None:
        """Follow the chain over `lines`, parsing only those that hold the wanted uuid's text.

        `parse(line, whole)` gives a line's entry; without `whole` only its
        top-level `uuid` and `parentUuid` are asked for.
        """
        offsets = self.offsets
        most = self.budget // CHAIN_ENTRY_BYTES
        steps = _Steps(iter(lines), parse)
        while True:
            step = steps.search()
            if step is None or step[0][0] in steps.members:
                break  # no entry holds it, or a chain entry does (a cycle): the root
            at = step[0][0]
            if offsets and at > steps.at:
                self.in_order = False
            steps.at = at
            offsets.append(at)
            steps.members.add(at)
            if len(offsets) > most:
                raise ChainTooLargeError()
            steps.want(step[1])
            if not step[1]:
                break
        self.root_parent = steps.wanted or ""


class _Steps:
    """One chain walk's position: the lines read last, the chain entries among them, the uuid
    wanted next (None: the head, the newest entry with a role, is not found yet)."""

    def __init__(
        self, stream: Iterator[BackLine], parse: Callable[[BackLine, bool], dict[str, Any] | None]
    ) -> None:
        self.stream = stream
        self.parse = parse
        self.recent: deque[BackLine] = deque()  # the last lines read, highest offset first
        self.members: set[int] = set()  # chain entries among `recent`
        self.wanted: str | None = None
        self.needle = self.key = b""  # the wanted uuid's text, and as a compact `"uuid"` member
        self.at = -1  # the last chain entry's offset

    def want(self, uuid: str) -> None:
        """Look for the entry holding `uuid` next."""
        self.wanted = uuid
        if uuid:
            self.needle = orjson.dumps(uuid)[1:-1]
            self.key = b'"uuid":"' + self.needle + b'"'

    def parent_of(self, line: BackLine) -> str | None:
        """The line's parent if the chain goes on with it (for the head: it has a role)."""
        data, wanted = line[2], self.wanted
        if (
            wanted is not None
            and data is not None
            and data.count(b'"uuid"') == 1
            and data.count(b'"parentUuid"') == 1
            and self.key in data
        ):
            # One uuid and one parentUuid key, compact, unescaped: read them as text.
            found = _PARENT.search(data)
            if found is not None:
                try:
                    return found.group(1).decode() if found.group(1) is not None else ""
                except UnicodeDecodeError:
                    pass
        entry = self.parse(line, wanted is None)
        if entry is None:
            return None
        if wanted is None:
            facts = entry_facts(entry)
            return facts.parent if facts.role else None
        if entry.get("uuid") != wanted:
            return None
        value = entry.get("parentUuid")
        return value if isinstance(value, str) else ""

    def holds(self, line: BackLine) -> str | None:
        data = line[2]
        return None if data is not None and self.needle not in data else self.parent_of(line)

    def after(self) -> tuple[BackLine, str] | None:
        """The newest line after the last chain entry that holds the wanted uuid."""
        for line in self.recent:
            if line[0] <= self.at:
                return None
            parent = self.holds(line)
            if parent is not None:
                return line, parent
        return None

    def _below(self) -> tuple[tuple[BackLine, str] | None, int]:
        """After a jump: the lines of `recent` before the last chain entry (its last ones), and
        the first of them that holds the wanted uuid."""
        recent, below = self.recent, 0
        if recent and recent[-1][0] < self.at:
            for line in reversed(recent):
                if line[0] >= self.at:
                    break
                below += 1
            for k in range(len(recent) - below, len(recent)):
                parent = self.holds(recent[k])
                if parent is not None:
                    return (recent[k], parent), below
        return None, below

    def search(self) -> tuple[BackLine, str] | None:
        """Where the chain goes on (nearest before, else after, else further back)."""
        found, looked = self._below()
        if found is not None:
            return found
        ahead = self.wanted is None  # the head has nothing after it to look at
        recent, members, needle = self.recent, self.members, self.needle
        lookahead = LOOKAHEAD_LINES
        for line in self.stream:
            if len(recent) == 2 * lookahead:
                members.discard(recent.popleft()[0])
            recent.append(line)
            looked += 1
            data = line[2]
            if data is None or needle in data:
                parent = self.parent_of(line)
                if parent is not None:
                    return line, parent
            if looked == lookahead and not ahead:
                ahead = True
                found = self.after()
                if found is not None:
                    return found
        return None if ahead else self.after()


class ChainCheck:
    """Numbers the candidate chain's entries and checks it is the rule's (pass 2).

    Fed every entry in file order. When each parent was written before its
    child, the chain's order is the file's and its messages are numbered on the
    way; otherwise each chain entry's role and block count are kept by its rank
    in the file and the numbering follows the chain once the pass is over.
    """

    def __init__(self, walk: ChainWalk) -> None:
        chain = array("Q", reversed(walk.offsets))  # root first
        walk.offsets = array("Q")
        self.chain = chain
        self.root_parent = walk.root_parent
        self.in_order = walk.in_order
        self.holds = True
        self.sorted = chain
        # child -> parent offsets of the links that are not between file neighbours.
        self.far: dict[int, int] = {}
        self.far_parents: set[int] = set()
        # What this pass read: a far child's parent (by its offset), a far parent's uuid (by -1 - offset).
        self.far_seen: dict[int, str] = {}
        if not self.in_order:
            if len(chain) * UNSORTED_CHAIN_ENTRY_BYTES > walk.budget:
                raise ChainTooLargeError()
            self.sorted = _sorted_nearly(chain)
            for k in range(1, len(self.sorted)):
                if self.sorted[k - 1] == self.sorted[k]:
                    self.holds = False  # an entry twice: a cycle the walk did not see
            for k in range(len(chain)):
                rank = bisect_left(self.sorted, chain[k])
                if k == 0 or rank == 0 or self.sorted[rank - 1] != chain[k - 1]:
                    self.far[chain[k]] = chain[k - 1] if k else -1
            self.far_parents = {parent for parent in self.far.values() if parent >= 0}
        self.roles = bytearray(0 if self.in_order else len(chain))
        self.blocks = array("I", [0]) * (0 if self.in_order else len(chain))
        self.slots = HashSlots(len(chain))
        self.passed = 0  # chain entries passed
        self.last_role = -1  # offset of the last entry with a role
        self.previous = ""  # uuid of the last chain entry passed
        self.root_parent_on_chain: bool | None = None  # whether its last holder is a chain entry
        self.number, self.block, self.role = -1, 0, ""

    def entry(self, offset: int, facts: EntryFacts) -> tuple[int, int] | None:
        """One entry: (N, offset in message N) when it is a message of an in-order chain."""
        chain, passed = self.sorted, self.passed
        member = passed < len(chain) and chain[passed] == offset
        if not member and passed < len(chain) and chain[passed] < offset:
            self.holds = False  # a chain offset that is no entry
        if facts.role:
            self.last_role = offset
        uuid = facts.uuid
        if uuid:
            key = hash(uuid) or 1  # the process's keyed string hash; 0 marks an empty slot
            # A chain entry's uuid again after it (or a collision); a chain entry's is held.
            if not self.slots.add(key) if member else key in self.slots:
                self.holds = False
            if uuid == self.root_parent:
                self.root_parent_on_chain = member
        if not member:
            return None
        while passed + 1 < len(chain) and chain[passed + 1] == offset:
            passed += 1  # the same entry twice (already refused)
        self._link(offset, facts)
        self.previous = uuid
        self.passed = passed + 1
        if not self.in_order:
            self.roles[passed] = _ROLE_CODES[facts.role]
            self.blocks[passed] = min(facts.blocks, 0xFFFFFFFF)
            return None
        if not facts.role:
            return None
        if facts.role != self.role:
            self.number, self.block, self.role = self.number + 1, 0, facts.role
        at = (self.number, self.block)
        self.block += facts.blocks
        return at

    def _link(self, offset: int, facts: EntryFacts) -> None:
        """Check the link from this chain entry to its parent (far ones once both are read)."""
        if offset in self.far_parents:
            self.far_seen[-1 - offset] = facts.uuid
        if offset == self.chain[0]:
            if facts.parent != self.root_parent:
                self.holds = False
        elif offset in self.far:
            self.far_seen[offset] = facts.parent
        elif not self.previous or facts.parent != self.previous:
            self.holds = False

    def verified(self) -> bool:
        """Whether the candidate was the rule's chain (its numbering stands)."""
        head = self.chain[-1] if self.chain else -1
        for child, parent in self.far.items():
            if parent < 0:
                continue
            uuid = self.far_seen.get(-1 - parent)
            if not uuid or self.far_seen.get(child) != uuid:
                self.holds = False
        return (
            self.holds
            and self.passed == len(self.sorted)
            and self.last_role == head
            and self.root_parent_on_chain is not False
        )

    def positions(self, offsets: set[int]) -> dict[int, tuple[int, int]]:
        """(N, offset in message N) of the chain's messages at `offsets`, in chain order."""
        found: dict[int, tuple[int, int]] = {}
        number, block, role = -1, 0, 0
        for offset in self.chain:
            rank = bisect_left(self.sorted, offset)
            code = self.roles[rank]
            if not code:
                continue
            if code != role:
                number, block, role = number + 1, 0, code
            if offset in offsets:
                found[offset] = (number, block)
            block += self.blocks[rank]
        return found


_ROLE_CODES = {"": 0, "user": 1, "assistant": 2}


def _sorted_nearly(chain: array[int]) -> array[int]:
    """A sorted copy of offsets in nearly sorted order (an insertion sort, no list of ints)."""
    ordered = array("Q", chain)
    for k in range(1, len(ordered)):
        value = ordered[k]
        at = k
        while at > 0 and ordered[at - 1] > value:
            ordered[at] = ordered[at - 1]
            at -= 1
        ordered[at] = value
    return ordered
