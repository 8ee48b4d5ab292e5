"""The gateway's flags count before its configuration is judged (compose: env address + --insecure).

The compose file sets SCROLLBACK_GATEWAY_ADDR=0.0.0.0:8080 and passes
`--insecure`; the environment used to be validated on its own first, so the
container refused to start ("listens on loopback only") despite the flag.
"""

from __future__ import annotations

import argparse

import pytest

from gateway.__main__ import add_arguments, config_from_args
from gateway.config import ConfigError


def _config(monkeypatch: pytest.MonkeyPatch, env_addr: str, *argv: str) -> str:
    monkeypatch.delenv("SCROLLBACK_AUTH_TOKENS", raising=False)
    monkeypatch.setenv("SCROLLBACK_GATEWAY_ADDR", env_addr)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(list(argv))).addr


def test_insecure_flag_allows_an_address_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _config(monkeypatch, "0.0.0.0:8080", "--insecure") == "0.0.0.0:8080"


def test_without_the_flag_a_non_loopback_address_is_still_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigError, match="loopback only"):
        _config(monkeypatch, "0.0.0.0:8080")


def test_a_loopback_flag_address_overrides_a_refused_environment_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _config(monkeypatch, "0.0.0.0:8080", "--addr", "127.0.0.1:9") == "127.0.0.1:9"
