"""The API's numbering of a transcript's entries, in memory bounded by its chain (docs/contract.md §14).

The rule (`api_positions`): the chain is the `parentUuid` path back from the
last user or assistant entry, a uuid naming the last entry that holds it; on
it, the user and assistant entries in order are the API's messages. Holding
every entry's facts to follow it costs memory per line, so the image list
finds it in two passes that hold only the chain's offsets:

1. `ChainWalk`, fed the file's entries newest first: the last entry with a
   role, then for each chain entry the nearest earlier entry holding its
   parent's uuid. A line is parsed only when it may hold what is looked for
   (the uuid's text), and the walk ends at the chain's root.
2. `ChainCheck`, fed every entry in file order by the image pass: numbers the
   chain's entries as it passes them, and checks that the walk found the rule's
   chain: its head is the last entry with a role, each link names its parent,
   no chain entry's uuid comes again later in the file (kept as keyed hashes in
   `HashSlots`), and the root's parent, if anything holds it, is last held by a
   chain entry. Then the rule, followed from the head, takes exactly these links.
3. When a check fails (a uuid written again after its entry, a parent after its
   child, a hash that collides), `api_positions` over every entry answers, with
   the bytes it holds counted.

Either way the memory is bounded by a budget (`images_memory_bytes` of the
history config, `NUMBERING_BUDGET` by default); past it the call fails with
ChainTooLargeError (RESOURCE_EXHAUSTED, `CHAIN_TOO_LARGE`).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from history_service.config import DEFAULT_IMAGES_MEMORY_BYTES
from history_service.errors import ChainTooLargeError

# Bytes one call may hold to number a transcript's entries (SCROLLBACK_HISTORY_IMAGES_MEMORY_BYTES).
NUMBERING_BUDGET = DEFAULT_IMAGES_MEMORY_BYTES
# Per chain entry: its offset (8 bytes) and two hash slots (16).
CHAIN_ENTRY_BYTES = 24
# Per entry of the full rule, beyond its two strings' characters: its facts, the strings'
# headers, its slots in the lists, map and set, and its position (measured with tracemalloc).
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


def _slot_key(uuid: str) -> int:
    """A uuid's keyed hash (the process's string hash), never 0 (an empty slot)."""
    return hash(uuid) or 1


class HashSlots:
    """A set of 64-bit hashes in one flat array (open addressing): 16 bytes per member."""

    __slots__ = ("size", "table")

    def __init__(self, members: int) -> None:
        self.size = 2 * members + 1
        self.table = array("q", [0]) * self.size

    def add(self, key: int) -> None:
        """Hold `key` (non-zero)."""
        table, size = self.table, self.size
        at = key % size
        while (held := table[at]) != 0:
            if held == key:
                return
            at = (at + 1) % size
        table[at] = key

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
    """The candidate chain: the file's entries walked newest first (pass 1)."""

    def __init__(self, budget: int = NUMBERING_BUDGET) -> None:
        self.budget = budget
        self.offsets = array("Q")  # newest first
        self.root_parent = ""  # the parent of the chain's root ("" for none)

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
        wanted: str | None = None  # None: the head (the newest entry with a role) is not found yet
        needle = b""
        for line in lines:
            data = line[2]
            if wanted is not None and data is not None and needle not in data:
                continue
            entry = parse(line, wanted is None)
            if entry is None:
                continue
            if wanted is None:
                facts = entry_facts(entry)
                if not facts.role:
                    continue
                parent = facts.parent
            else:
                if entry.get("uuid") != wanted:
                    continue
                value = entry.get("parentUuid")
                parent = value if isinstance(value, str) else ""
            offsets.append(line[0])
            if len(offsets) > most:
                raise ChainTooLargeError()
            wanted = parent
            if not parent:
                break
            needle = orjson.dumps(parent)[1:-1]
        self.root_parent = wanted or ""

    def chain(self) -> array[int]:
        """The chain's offsets in file order (root first)."""
        offsets = array("Q", reversed(self.offsets))
        self.offsets = array("Q")
        return offsets


class ChainCheck:
    """Numbers the candidate chain's entries and checks it is the rule's, fed entries in file order."""

    def __init__(self, chain: array[int], root_parent: str) -> None:
        self.chain = chain
        self.root_parent = root_parent
        self.slots = HashSlots(len(chain))
        self.passed = 0  # chain entries passed
        self.last_role = -1  # offset of the last entry with a role
        self.previous = ""  # uuid of the last chain entry passed
        self.root_parent_on_chain: bool | None = None  # whether its last holder is a chain entry
        self.holds = True
        self.number, self.block, self.role = -1, 0, ""

    def entry(self, offset: int, facts: EntryFacts) -> tuple[int, int] | None:
        """One entry: (N, offset in message N) when it is a message of the chain."""
        chain, passed = self.chain, self.passed
        member = passed < len(chain) and chain[passed] == offset
        if not member and passed < len(chain) and chain[passed] < offset:
            self.holds = False  # a chain offset that is no entry
        if facts.role:
            self.last_role = offset
        uuid = facts.uuid
        if uuid:
            if _slot_key(uuid) in self.slots:
                self.holds = False  # a chain entry's uuid again after it (or a collision)
            if uuid == self.root_parent:
                self.root_parent_on_chain = member
        if not member:
            return None
        parent_ok = facts.parent == (self.previous if passed else self.root_parent)
        if not parent_ok or (passed and not self.previous):
            self.holds = False
        self.previous = uuid
        if uuid:
            self.slots.add(_slot_key(uuid))
        self.passed = passed + 1
        if not facts.role:
            return None
        if facts.role != self.role:
            self.number, self.block, self.role = self.number + 1, 0, facts.role
        at = (self.number, self.block)
        self.block += facts.blocks
        return at

    def verified(self) -> bool:
        """Whether the candidate was the rule's chain (its numbering stands)."""
        head = self.chain[-1] if self.chain else -1
        return (
            self.holds
            and self.passed == len(self.chain)
            and self.last_role == head
            and self.root_parent_on_chain is not False
        )
