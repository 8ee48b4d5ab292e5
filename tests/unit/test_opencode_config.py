"""SCROLLBACK_OPENCODE_DB: the setting, its default, the flag, and `up`'s start-up lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from history_service.config import HistoryConfig
from media_service.config import MediaConfig
from scrollback.server.service_config import opencode_db_from_env
from scrollback_app.cli import build_parser
from scrollback_app.cli_up import served_sources, up_configs


def test_the_setting_wins_and_the_default_is_read_only_when_it_exists(tmp_path: Path) -> None:
    given = tmp_path / "elsewhere.db"
    assert opencode_db_from_env({"SCROLLBACK_OPENCODE_DB": str(given)}) == given
    data_home = tmp_path / "data"
    env = {"XDG_DATA_HOME": str(data_home)}
    assert opencode_db_from_env(env) is None  # opencode never ran here
    default = data_home / "opencode" / "opencode.db"
    default.parent.mkdir(parents=True)
    default.write_bytes(b"")
    assert opencode_db_from_env(env) == default
    for config in (HistoryConfig.from_env(env), MediaConfig.from_env(env)):
        assert config.opencode_db == default


def test_up_takes_the_flag_and_names_every_source_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No opencode database where this machine's would be, nor a setting naming one.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("SCROLLBACK_OPENCODE_DB", raising=False)
    db = tmp_path / "oc.db"
    args = build_parser().parse_args(
        ["up", "--transcripts", str(tmp_path), "--opencode-db", str(db)]
    )
    history, media = up_configs(args)
    assert history.opencode_db == db and media.opencode_db == db
    lines = served_sources(history)
    assert lines[0] == f"source claude-code: {tmp_path}"
    assert lines[-1] == f"source opencode: {db} (read-only)"
    args = build_parser().parse_args(["up", "--transcripts", str(tmp_path)])
    assert not any("opencode" in line for line in served_sources(up_configs(args)[0]))
