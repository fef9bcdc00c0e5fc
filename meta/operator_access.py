"""Who may act as the broker host's operator: one rule for the TCP port and the dashboard.

Some requests change outcomes that clients rely on, so they are taken only from an operator
on the broker's own host: the ``HEURISTIC_COMMIT`` / ``HEURISTIC_ROLLBACK`` transaction
commands (``meta-admin tx``, ``meta.server.tx_handlers``) and the dashboard's actions
(reload the configuration, skip a group's backlog; ``meta.dashboard.actions``, which also
asks for its admin header and the operator token of ``[system] dashboardAdminTokenFile``).
The rule, ``is_operator_peer``:

* the client's address is ``127.0.0.1`` or ``::1`` (also written ``::ffff:127.0.0.1``);
* or the client's address is the very address the connection was accepted on, and that
  is not a loopback address: the client runs on the broker's host and reached it through
  one of the host's own addresses (a broker that binds ``hostName`` to a non-loopback
  address is reached so from its host).

Other ``127.x`` addresses are refused on purpose, also at the address the broker listens
on: they are aliases that may stand for other hosts (containers, tests).

Everything else, the whole text protocol included, is open to any client that can connect
(as in Java); ``docs/security.md`` says what that means for a deployment.

Pure functions; thread-safe.
"""

from __future__ import annotations

import ipaddress

__all__ = ["OPERATOR_LOOPBACK", "is_operator_peer"]

OPERATOR_LOOPBACK = frozenset({ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")})


def is_operator_peer(peer_host: str, local_host: str) -> bool:
    """Whether a client at ``peer_host``, connected to this process at ``local_host``, is
    an operator on the broker's host (see the module docstring).

    Args:
        peer_host: the client's address (``transport.getPeer().host``).
        local_host: the address the connection was accepted on (``transport.getHost().host``);
            empty when unknown.
    """
    peer = _address(peer_host)
    if peer is None:
        return False
    if peer in OPERATOR_LOOPBACK or getattr(peer, "ipv4_mapped", None) in OPERATOR_LOOPBACK:
        return True
    return peer == _address(local_host) and not peer.is_loopback


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]").split("%")[0])
    except ValueError:
        return None
