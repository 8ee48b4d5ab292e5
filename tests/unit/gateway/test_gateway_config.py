"""The gateway's configuration: flags apply before validation, as in a container."""

from __future__ import annotations

import argparse

import pytest

from gateway.__main__ import add_arguments, config_from_args
from gateway.config import ConfigError


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_insecure_flag_counts_for_an_address_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # docker-compose sets SCROLLBACK_GATEWAY_ADDR=0.0.0.0:8080 and passes --insecure.
    monkeypatch.setenv("SCROLLBACK_GATEWAY_ADDR", "0.0.0.0:8080")
    monkeypatch.delenv("SCROLLBACK_AUTH_TOKENS", raising=False)
    config = config_from_args(_args("--insecure"))
    assert config.addr == "0.0.0.0:8080" and config.insecure
    with pytest.raises(ConfigError, match="loopback only"):
        config_from_args(_args())
