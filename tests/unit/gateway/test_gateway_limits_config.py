"""The gateway's Host rule, its connection and download settings, and its delegate token, as configured."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, GatewayConfig
from gateway.hosts import HostRule, host_of_header

ENV = {
    "SCROLLBACK_GATEWAY_ALLOWED_HOSTS": "viewer.example, [2001:db8::1]",
    "SCROLLBACK_GATEWAY_HEADER_TIMEOUT_SECONDS": "2.5",
    "SCROLLBACK_GATEWAY_MAX_CONNECTIONS": "40",
    "SCROLLBACK_GATEWAY_MAX_DOWNLOADS_PER_URL": "3",
    "SCROLLBACK_GATEWAY_MAX_DOWNLOADS_PER_CLIENT": "5",
    "SCROLLBACK_GATEWAY_MAX_CONNECTIONS_PER_CLIENT": "7",
    "SCROLLBACK_GATEWAY_TRUSTED_PROXIES": "10.0.0.7, 192.168.0.0/16,::1",
}


def test_the_settings_come_from_the_environment() -> None:
    config = GatewayConfig.from_env(ENV)
    assert config.allowed_host_names == ("viewer.example", "[2001:db8::1]")
    assert config.header_timeout_seconds == 2.5 and config.max_connections == 40
    assert (config.max_downloads_per_url, config.max_downloads_per_client) == (3, 5)
    assert config.max_connections_per_client == 7
    assert [str(n) for n in config.trusted_proxy_networks()] == [
        "10.0.0.7/32",
        "192.168.0.0/16",
        "::1/128",
    ]
    defaults = GatewayConfig.from_env({})
    # Forwarded headers are believed from no one unless the operator lists proxies.
    assert defaults.trusted_proxy_networks() == () and defaults.max_connections_per_client == 64
    assert defaults.header_timeout_seconds == 30 and defaults.max_connections == 512
    assert (defaults.max_downloads_per_url, defaults.max_downloads_per_client) == (8, 32)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HEADER_TIMEOUT_SECONDS", "0"),
        ("HEADER_TIMEOUT_SECONDS", "-1"),
        ("MAX_CONNECTIONS", "0"),
        ("MAX_DOWNLOADS_PER_URL", "0"),
        ("MAX_DOWNLOADS_PER_CLIENT", "-3"),
        ("ALLOWED_HOSTS", "https://viewer.example"),
        ("ALLOWED_HOSTS", "*"),
        ("MAX_CONNECTIONS_PER_CLIENT", "0"),
        ("TRUSTED_PROXIES", "*"),
        ("TRUSTED_PROXIES", "proxy.example"),
        ("TRUSTED_PROXIES", "10.0.0.0/33"),
    ],
)
def test_unusable_values_stop_the_start(name: str, value: str) -> None:
    with pytest.raises(ConfigError):
        GatewayConfig.from_env({f"SCROLLBACK_GATEWAY_{name}": value})


def test_the_host_rule() -> None:
    rule = HostRule("0.0.0.0", ["viewer.example"])
    for host in (
        "localhost",
        "LOCALHOST:80",
        "127.0.0.1:1",
        "[::1]",
        "[::1]:8080",
        "viewer.example",
    ):
        assert rule.allows(host), host
    for host in (None, "", "0.0.0.0", "evil.example", "::1", "[::1", "localhost:", "a:b:c"):
        assert not rule.allows(host), host
    assert HostRule("192.0.2.1", []).allows("192.0.2.1:8080")
    assert HostRule("[::]", ["*"]).allows("anything.example")
    assert host_of_header("[2001:db8::1]:443") == "2001:db8::1"


def _tokens(tmp_path: Path, delegate: bool | str) -> dict[str, Path]:
    tokens = tmp_path / "tokens.yaml"
    marked = str(delegate).lower() if isinstance(delegate, bool) else delegate
    tokens.write_text(
        "tokens:\n  - token: alice-token\n    principal: alice\n    projects: ['*']\n"
        f"  - token: gateway-token\n    principal: gateway\n    delegate: {marked}\n"
    )
    own = tmp_path / "gateway.token"
    own.write_text("gateway-token\n")
    return {"auth_tokens": tokens, "token_file": own}


def test_with_auth_the_gateways_token_must_be_a_delegate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    GatewayConfig(**_tokens(tmp_path, delegate=True)).validate()
    GatewayConfig(**_tokens(tmp_path, delegate="[StatMedia, ReadMedia, ListSessions]")).validate()
    # alice sees every project: the gateway says at start that her photo URLs will be refused.
    assert "photo URLs of alice (who see every project) will be refused" in caplog.text
    for short in (False, "[ReadMedia]", "[]"):
        with pytest.raises(ConfigError, match=r"delegate: \[ReadMedia, StatMedia\]"):
            GatewayConfig(**_tokens(tmp_path, delegate=short)).validate()
    stranger = tmp_path / "stranger.token"
    stranger.write_text("not-in-the-file")
    with pytest.raises(ConfigError, match="not in the token file"):
        GatewayConfig(**{**_tokens(tmp_path, delegate=True), "token_file": stranger}).validate()
