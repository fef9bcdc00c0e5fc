"""``meta.local_address``: the Java client's rule for this machine's address."""

from __future__ import annotations

import ipaddress
import socket

from meta.local_address import interface_addresses, is_loopback, local_host

V4, V6 = socket.AF_INET, socket.AF_INET6


def test_the_first_non_loopback_ipv4_address_wins():
    table = {
        "lo": [(V4, "127.0.0.1"), (V6, "::1")],
        "eth0": [(V6, "fd00::2"), (V4, "192.0.2.2")],
        "eth1": [(V4, "198.51.100.7")],
    }
    assert local_host(table) == "192.0.2.2"


def test_ipv4_is_preferred_to_an_ipv6_address_of_an_earlier_interface():
    table = {"eth0": [(V6, "2001:db8::1")], "eth1": [(V4, "10.1.2.3")]}
    assert local_host(table) == "10.1.2.3"


def test_without_ipv4_the_first_routable_ipv6_address_is_used_in_brackets():
    table = {"lo": [(V6, "::1")], "eth0": [(V6, "fe80::1%eth0"), (V6, "2001:db8::5")]}
    assert local_host(table) == "[2001:db8::5]"


def test_a_host_with_only_loopback_is_127_0_0_1():
    assert local_host({"lo": [(V4, "127.0.0.1"), (V6, "::1")]}) == "127.0.0.1"
    assert local_host({}) == "127.0.0.1"


def test_loopback_and_unspecified_addresses_are_not_names():
    assert all(map(is_loopback, ["127.0.1.1", "::1", "[::1]", "0.0.0.0", "::", "localhost"]))
    assert not any(map(is_loopback, ["192.0.2.2", "fd00::2", "[2001:db8::5]"]))


def test_on_this_host_the_answer_is_one_of_its_interface_addresses():
    """The real interface table: the answer is an address of an interface, or 127.0.0.1 on a
    host without another; never the loopback name a resolver may give for gethostname()."""
    table = interface_addresses()
    answer = local_host()
    addresses = {address.split("%")[0] for pairs in table.values() for _, address in pairs}
    non_loopback_v4 = [a for a in addresses if "." in a and not is_loopback(a)]
    if non_loopback_v4:
        assert answer in non_loopback_v4
    else:
        assert answer == "127.0.0.1" or answer.strip("[]") in addresses
    ipaddress.ip_address(answer.strip("[]"))
