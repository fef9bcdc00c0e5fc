"""One rule for who acts as the broker host's operator (meta.operator_access)."""

from __future__ import annotations

import pytest

from meta.operator_access import is_operator_peer


@pytest.mark.parametrize("peer", ["127.0.0.1", "::1", "::ffff:127.0.0.1", "[::1]"])
def test_the_loopback_address_itself_is_an_operator(peer):
    assert is_operator_peer(peer, "10.0.0.5")


@pytest.mark.parametrize("peer", ["127.0.0.2", "127.1.2.3", "10.0.0.6", "", "not an address"])
def test_other_loopback_aliases_and_other_hosts_are_not(peer):
    assert not is_operator_peer(peer, "10.0.0.5")


def test_a_client_at_the_address_it_connected_to_is_on_the_broker_host():
    assert is_operator_peer("10.0.0.5", "10.0.0.5")
    assert is_operator_peer("fe80::1%eth0", "fe80::1%eth0")
    assert not is_operator_peer("10.0.0.5", "")


def test_a_loopback_alias_is_refused_even_at_the_address_it_connected_to():
    assert not is_operator_peer("127.0.0.2", "127.0.0.2")
