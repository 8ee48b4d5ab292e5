"""One configuration idiom for every server: names, overrides, one ConfigError, `scrollback up`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import GatewayConfig
from history_service.__main__ import config_from_args as history_from_args
from history_service.config import HistoryConfig
from media_service.__main__ import config_from_args as media_from_args
from media_service.__main__ import parse_args as media_args
from media_service.config import MediaConfig
from scrollback.server.service_cli import service_parser
from scrollback.server.service_config import ConfigError, env_name
from scrollback_app.cli import build_parser
from scrollback_app.cli_up import up_configs


def test_shared_settings_are_unprefixed_and_read_alike(tmp_path: Path) -> None:
    env = {
        "SCROLLBACK_TRANSCRIPTS": str(tmp_path),
        "SCROLLBACK_STATE": str(tmp_path / "s"),
        "SCROLLBACK_MAX_LINE_SIZE": str(1 << 20),
        "SCROLLBACK_DATABASE_URL": "postgresql://db/x",
    }
    history, media = HistoryConfig.from_env(env), MediaConfig.from_env(env)
    for config in (history, media):
        assert config.transcripts == tmp_path and config.state_dir == tmp_path / "s"
        assert config.max_line_size == 1 << 20
        assert config.database_url == "postgresql://db/x"


def test_own_settings_are_service_prefixed() -> None:
    history = HistoryConfig.from_env(
        {"SCROLLBACK_HISTORY_ADDR": "127.0.0.1:1", "SCROLLBACK_HISTORY_STALL_TIMEOUT_SECONDS": "5"}
    )
    assert history.addr == "127.0.0.1:1" and history.stall_timeout_seconds == 5
    media = MediaConfig.from_env(
        {
            "SCROLLBACK_MEDIA_ADDR": "127.0.0.1:2",
            "SCROLLBACK_MEDIA_MAX_BLOB_SIZE": "1000",
            "SCROLLBACK_MEDIA_GC_GRACE_SECONDS": "7",
            "SCROLLBACK_MEDIA_GC_INTERVAL_SECONDS": "8",
            "SCROLLBACK_MEDIA_LINE_CACHE_ENTRIES": "9",
            "SCROLLBACK_MEDIA_METRICS_ADDR": "127.0.0.1:3",
        }
    )
    assert (media.addr, media.max_blob_size, media.line_cache_entries) == ("127.0.0.1:2", 1000, 9)
    assert (media.gc_grace_seconds, media.gc_interval_seconds) == (7, 8)
    assert media.security.metrics_addr == "127.0.0.1:3"
    assert env_name("chunk_size", "media") == "SCROLLBACK_MEDIA_CHUNK_SIZE"


def test_entry_cache_size_is_read_and_may_be_off() -> None:
    assert HistoryConfig.from_env({}).entry_cache_bytes == 16 * 1024 * 1024
    env = {"SCROLLBACK_HISTORY_ENTRY_CACHE_BYTES": "1048576"}
    assert HistoryConfig.from_env(env).entry_cache_bytes == 1 << 20
    assert (
        HistoryConfig.from_env({"SCROLLBACK_HISTORY_ENTRY_CACHE_BYTES": "0"}).entry_cache_bytes == 0
    )


def test_decode_threads_and_memory_are_read_and_bounded() -> None:
    config = HistoryConfig.from_env({})
    assert (config.decode_threads, config.decode_memory_bytes) == (2, 512 * 1024 * 1024)
    env = {
        "SCROLLBACK_HISTORY_DECODE_THREADS": "3",
        "SCROLLBACK_HISTORY_DECODE_MEMORY_BYTES": str(64 << 20),
    }
    config = HistoryConfig.from_env(env)
    assert (config.decode_threads, config.decode_memory_bytes) == (3, 64 << 20)
    for name, value in (
        ("SCROLLBACK_HISTORY_DECODE_THREADS", "0"),
        ("SCROLLBACK_HISTORY_DECODE_MEMORY_BYTES", str(1 << 20)),
    ):
        with pytest.raises(ConfigError):
            HistoryConfig.from_env({name: value})


def test_older_names_still_work() -> None:
    assert HistoryConfig.from_env({"SCROLLBACK_HISTORY_MAX_LINE_SIZE": "100000"}).max_line_size == (
        100000
    )
    old = MediaConfig.from_env(
        {"SCROLLBACK_MAX_BLOB_SIZE": "1000", "SCROLLBACK_GC_GRACE_SECONDS": "7"}
    )
    assert old.max_blob_size == 1000 and old.gc_grace_seconds == 7
    both = MediaConfig.from_env(
        {"SCROLLBACK_MAX_BLOB_SIZE": "1000", "SCROLLBACK_MEDIA_MAX_BLOB_SIZE": "2000"}
    )
    assert both.max_blob_size == 2000  # the new name wins


@pytest.mark.parametrize(
    ("build", "env"),
    [
        (HistoryConfig.from_env, {"SCROLLBACK_HISTORY_PENDING_KEEP": "x"}),
        (HistoryConfig.from_env, {"SCROLLBACK_HISTORY_HEARTBEAT_SECONDS": "0"}),
        (HistoryConfig.from_env, {"SCROLLBACK_HISTORY_ENTRY_CACHE_BYTES": "-1"}),
        (HistoryConfig.from_env, {"SCROLLBACK_HISTORY_ENTRY_CACHE_BYTES": str(2 << 30)}),
        (MediaConfig.from_env, {"SCROLLBACK_MEDIA_CHUNK_SIZE": "0"}),
        (MediaConfig.from_env, {"SCROLLBACK_DATABASE_URL": "mysql://x"}),
        (GatewayConfig.from_env, {"SCROLLBACK_GATEWAY_URL_TTL_SECONDS": "x"}),
        (GatewayConfig.from_env, {"SCROLLBACK_GATEWAY_ADDR": "nohost"}),
    ],
)
def test_one_config_error_for_every_server(build: object, env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        build(env)  # type: ignore[operator]


def test_overrides_win_and_none_means_unset() -> None:
    env = {"SCROLLBACK_MEDIA_ADDR": "127.0.0.1:2"}
    assert MediaConfig.from_env(env, addr="127.0.0.1:5").addr == "127.0.0.1:5"
    assert MediaConfig.from_env(env, addr=None).addr == "127.0.0.1:2"
    assert GatewayConfig.from_env({}, url_ttl_seconds=120).url_ttl_seconds == 120


def test_up_goes_through_the_services_path_and_leaves_the_environment(tmp_path: Path) -> None:
    flags = ["--transcripts", str(tmp_path), "--state", str(tmp_path / "s")]
    flags += ["--stall-timeout-seconds", "9", "--insecure"]
    before = dict(os.environ)
    history, media = up_configs(
        build_parser().parse_args(
            ["up", *flags, "--history-addr", "127.0.0.1:7", "--media-addr", "127.0.0.1:8"]
        )
    )
    assert dict(os.environ) == before
    history_parser = service_parser("h", None, service="history", default_addr="")
    assert history == history_from_args(
        history_parser.parse_args([*flags, "--addr", "127.0.0.1:7"])
    )
    assert media == media_from_args(media_args([*flags, "--addr", "127.0.0.1:8"]))
    assert history.stall_timeout_seconds == 9 and media.insecure


def test_help_names_each_variable_and_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        media_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for expected in (
        "SCROLLBACK_MEDIA_ADDR, default 127.0.0.1:50052",
        "SCROLLBACK_MEDIA_STALL_TIMEOUT_SECONDS, default 60",
        "SCROLLBACK_MEDIA_WRITE_DEADLINE_SECONDS, default 600",
        "SCROLLBACK_TRANSCRIPTS, default ~/.claude/projects",
        "--stall-timeout-seconds",
    ):
        assert expected in text


def test_parsing_a_command_line_reads_no_package_metadata() -> None:
    # The version is read when --version is given, not to build the parsers: reading it
    # imports importlib.metadata and the email package, which `up`'s parent and every
    # worker would hold for nothing.
    code = (
        "import sys\n"
        "from scrollback_app.cli import build_parser\n"
        "from media_service.__main__ import parse_args\n"
        "build_parser(only_up=True).parse_args(['up'])\n"
        "parse_args([])\n"
        "print(sorted(m for m in sys.modules if m == 'email' or m == 'importlib.metadata'))\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert shown.strip() == "[]"
