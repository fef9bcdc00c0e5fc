"""This machine's address, as the Java client and broker find it (``RemotingUtils.getLocalHost``).

One rule, used wherever metaq-py names itself: generated consumer ids, broadcast group names,
producer and transaction session ids, and the broker's advertised ``meta://`` URI when
``hostName`` is not set (as Java does, docs/compatibility.md):

1. the first non-loopback IPv4 address of the network interfaces;
2. else the first non-loopback, non-link-local IPv6 address, in brackets;
3. else ``127.0.0.1``.

The interfaces are read with ``psutil.net_if_addrs()`` (``getifaddrs``: the kernel's interface
order), as Java walks ``NetworkInterface.getNetworkInterfaces()``. Asking the resolver for
``gethostname()`` instead gives a loopback address on the many hosts whose ``/etc/hosts`` maps
their name to 127.0.x.1 (Debian's default), which made a Python and a Java client on one host
disagree about its name. No packet is sent, no resolver is asked.

Thread-safe (a pure function of the interface table).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping

__all__ = ["Interfaces", "interface_addresses", "is_loopback", "local_host"]

Interfaces = Mapping[str, Iterable[tuple[int, str]]]
"""Interface name -> ``(address family, address)`` pairs, in the system's order."""


def interface_addresses() -> dict[str, list[tuple[int, str]]]:
    """The IPv4 and IPv6 addresses of every network interface, in the system's order."""
    import psutil  # Here, not at module level: importing the client stays cheap.

    return {
        name: [
            (int(address.family), address.address)
            for address in addresses
            if address.family in (socket.AF_INET, socket.AF_INET6)
        ]
        for name, addresses in psutil.net_if_addrs().items()
    }


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8, ``::1`` and the unspecified addresses (which name no host)."""
    address = address.strip("[]")
    return address.startswith("127.") or address in ("::1", "0.0.0.0", "::", "localhost")


def local_host(interfaces: Interfaces | None = None) -> str:
    """This machine's address for names and URIs (see the module docstring for the rule).

    Args:
        interfaces: the interface table to use; None reads the system's.
    """
    table = interface_addresses() if interfaces is None else interfaces
    ipv6 = None
    for addresses in table.values():
        for family, address in addresses:
            if is_loopback(address):
                continue
            if family == socket.AF_INET:
                return address
            if ipv6 is None and family == socket.AF_INET6 and not _link_local(address):
                ipv6 = address.split("%")[0]
    return f"[{ipv6}]" if ipv6 is not None else "127.0.0.1"


def _link_local(address: str) -> bool:
    return address.lower().startswith("fe80")
