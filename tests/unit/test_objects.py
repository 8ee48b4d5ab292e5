"""The pure parts of transcripts in a bucket: the URL, the block cache, the key layout, stats."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrollback.bucket import claude_code_object
from scrollback.objects import (
    OBJECT_DEV,
    BlockCache,
    BucketConfigError,
    BucketLocation,
    ObjectInfo,
    bucket_location,
    location_text,
    parse_location,
)
from scrollback.transcripts import stamp_of


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("s3://transcripts/team/projects", BucketLocation("transcripts", "team/projects")),
        ("s3://transcripts/team/projects/", BucketLocation("transcripts", "team/projects")),
        ("s3://transcripts", BucketLocation("transcripts", "")),
        ("/home/me/.claude/projects", Path("/home/me/.claude/projects")),
        (Path("/home/me/.claude/projects"), Path("/home/me/.claude/projects")),
        ("relative/dir", Path("relative/dir")),
    ],
)
def test_a_location_is_parsed_once_into_a_bucket_or_a_directory(
    given: str | Path, expected: Path | BucketLocation
) -> None:
    parsed = parse_location(given)
    assert parsed == expected
    assert parse_location(parsed) == parsed
    assert parse_location(location_text(parsed)) == parsed
    assert (bucket_location(str(given)) is None) == isinstance(expected, Path)


def test_a_bucket_url_without_a_bucket_is_refused() -> None:
    with pytest.raises(BucketConfigError):
        bucket_location("s3://")


def test_the_block_cache_keeps_the_recently_used_within_its_budget() -> None:
    cache = BlockCache(budget=3 * 10)
    for n in range(3):
        cache.put(("k", "e", n), bytes(10))
    assert cache.get(("k", "e", 0)) is not None  # read again: protected
    cache.put(("k", "e", 3), bytes(10))
    assert cache.get(("k", "e", 1)) is None  # the least recently used on probation went
    assert cache.held == 30
    cache.put(("k", "e", 4), bytes(31))  # larger than the whole budget: not kept
    assert cache.get(("k", "e", 4)) is None and cache.held == 30
    assert cache.get(("k", "other-etag", 0)) is None  # another version is another block


def test_a_scan_does_not_push_out_the_blocks_read_again() -> None:
    cache = BlockCache(budget=8 * 10)
    for n in range(2):  # a window's blocks, read twice
        cache.put(("hot", "e", n), bytes(10))
        assert cache.get(("hot", "e", n)) is not None
    for n in range(100):  # a scan of a large object, each block read once
        cache.put(("big", "e", n), bytes(10))
    assert all(cache.get(("hot", "e", n)) is not None for n in range(2))
    assert cache.get(("big", "e", 99)) is not None and cache.get(("big", "e", 0)) is None
    assert cache.held <= cache.budget


def test_an_off_cache_holds_nothing() -> None:
    cache = BlockCache(budget=0)
    cache.put(("k", "e", 0), b"x")
    assert cache.get(("k", "e", 0)) is None and cache.held == 0


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        ("proj/s1.jsonl", ("s1", "proj", False, "")),
        ("proj/agent-a1.jsonl", ("agent-a1", "proj", True, "")),
        ("proj/s1/subagents/agent-x.jsonl", ("agent-x", "proj", True, "s1")),
        ("proj/s1.meta.json", None),
        ("s1.jsonl", None),  # not in a project
        ("proj/deeper/s1.jsonl", None),
        ("proj/s1/other/agent-x.jsonl", None),
        ("/s1.jsonl", None),
    ],
)
def test_keys_follow_the_claude_code_layout(
    relative: str, expected: tuple[str, str, bool, str] | None
) -> None:
    skipped: list[str] = []
    found = claude_code_object(relative, "prefix/" + relative, skipped)
    if expected is None:
        assert found is None
        return
    assert found is not None
    assert (found.session_id, found.project_dir, found.is_subagent, found.parent_session_id) == (
        expected
    )
    assert found.location == "prefix/" + relative
    assert skipped == []


def test_a_key_whose_name_is_no_id_is_skipped_and_reported() -> None:
    skipped: list[str] = []
    assert claude_code_object("proj/not an id!.jsonl", "x", skipped) is None
    assert claude_code_object("proj/s1/subagents/bad name.jsonl", "y", skipped) is None
    assert skipped == ["proj/not an id!.jsonl", "proj/s1/subagents/bad name.jsonl"]


def test_an_objects_stat_names_its_key_and_settles_after_its_second() -> None:
    info = ObjectInfo("p/proj/s1.jsonl", 1234, '"etag"', 1_700_000_000_000_000_000)
    stat = info.stat()
    assert (stat.st_size, stat.st_dev) == (1234, OBJECT_DEV)
    assert stat.st_ino == ObjectInfo("p/proj/s1.jsonl", 9, '"other"', 0).stat().st_ino
    assert stat.st_ino != ObjectInfo("p/proj/s2.jsonl", 1234, '"etag"', 0).stat().st_ino
    assert 0 <= stat.st_ino < 2**63  # stored as a signed 64-bit integer
    # Last-Modified has whole seconds: no stamp until the second has ended and settled.
    assert stamp_of(stat, now_ns=info.modified_ns + 2_500_000_000) is None
    assert stamp_of(stat, now_ns=info.modified_ns + 3_000_000_000) is not None
