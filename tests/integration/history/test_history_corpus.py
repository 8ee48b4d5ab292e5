"""Every real transcript of tests/corpus serves without error, with the MANIFEST's counts."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from tests.support.history import LATEST, OLDEST, HistoryHarness, read_all

CORPUS = Path(__file__).resolve().parents[2] / "corpus"


def _manifest() -> list[dict[str, str]]:
    with (CORPUS / "MANIFEST.tsv").open(newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


async def test_every_corpus_file_serves_with_manifest_counts(history: HistoryHarness) -> None:
    rows = [r for r in _manifest() if not r["file"].endswith(".meta.json")]
    assert len(rows) > 30
    layout: dict[str, dict[str, str]] = {}
    for number, row in enumerate(rows):
        owner = row["file"].split("/")[0]
        session_id = f"c{number}"
        target = history.transcript(session_id, owner)
        shutil.copyfile(CORPUS / row["file"], target)
        layout[session_id] = row
    for session_id, row in layout.items():
        per_direction = []
        for direction in (LATEST, OLDEST):
            pages = await read_all(history.stub, session_id, direction, 200)
            entries = [
                e for page in (reversed(pages) if direction == LATEST else pages) for e in page
            ]
            offsets = [e.byte_offset for e in entries]
            assert offsets == sorted(set(offsets)), row["file"]
            per_direction.append([(e.byte_offset, e.json) for e in entries])
            with_uuid = sum(1 for e in entries if e.uuid)
            refs = sum(len(e.media_refs) for e in entries)
            assert with_uuid == int(row["entries_with_uuid"]), row["file"]
            if "trimmed" in row["file"] or "small.jsonl" in row["file"]:
                assert refs == 0  # its image payload is not base64 ("[trimmed for fixture]")
            else:
                assert refs == int(row["images_in_message_content"]), row["file"]
            for entry in entries:
                for ref in entry.media_refs:
                    assert ref.uri == f"{session_id}/{entry.uuid}/{ref.index}"
        assert per_direction[0] == per_direction[1], row["file"]
