"""Addresses the clients accept: one target, or several replicas balanced round-robin."""

from __future__ import annotations

import pytest

from client._core import channel_target
from client.errors import InvalidArgument


def test_one_address_is_used_as_is_with_round_robin() -> None:
    target, options = channel_target("history.internal:50051")
    assert target == "history.internal:50051"
    assert ("grpc.lb_policy_name", "round_robin") in options


@pytest.mark.parametrize(
    ("addresses", "target"),
    [
        ("127.0.0.1:1,127.0.0.2:2", "ipv4:127.0.0.1:1,127.0.0.2:2"),
        (" 10.0.0.1:50051 , 10.0.0.2:50051 ", "ipv4:10.0.0.1:50051,10.0.0.2:50051"),
        ("[::1]:1,[::1]:2", "ipv6:[::1]:1,[::1]:2"),
    ],
)
def test_several_ip_addresses_become_one_balanced_target(addresses: str, target: str) -> None:
    assert channel_target(addresses)[0] == target


@pytest.mark.parametrize("addresses", ["a:1,b:2", "127.0.0.1:1,[::1]:2"])
def test_several_addresses_must_be_ip_literals_of_one_family(addresses: str) -> None:
    with pytest.raises(InvalidArgument):
        channel_target(addresses)
