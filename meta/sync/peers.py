"""Who may send ``sync`` to a gregor slave: ``SyncPeers``, and the master's ``sync_hello``.

A gregor slave stores what ``sync`` sends it, so it takes ``sync`` only from its samsa master
(``gregor_slave.properties``): a connection is accepted when

1. **its address** is the master's: ``master`` is resolved once, at start-up, to all its
   addresses. A master on this host (one of its addresses is a loopback address or an address
   of this host's interfaces) may also come from ``127.0.0.1``, ``::1`` or any address of the
   interfaces, since the kernel picks the source address by the slave address it dials. Only
   the host is compared: the master's source port is ephemeral;
2. **the secret**, when ``syncSecret`` is set: the connection sent, before its first sync, the
   hello a metaq-py samsa master with the same ``syncSecret`` sends as its first request on
   every connection to its slave (``sync_hello``)::

       stats sync-hello:<nonce>:<proof> <opaque>

   with a fresh random ``nonce`` (32 hex digits) and ``proof`` the hex HMAC-SHA256 of
   ``"metaq-sync-hello <nonce>"`` under the secret. The slave answers ``result 200`` or 403
   and remembers the outcome for the connection. The secret itself never travels, and a
   nonce the slave accepted lately is refused again. A ``stats`` item is what every broker
   reads (a Java broker reads an unknown item as a topic name), so no frame changes: a
   master without ``syncSecret`` (every Java master) sends no hello, and a gregor slave
   without it needs none;
3. **the leader epoch** (``epoch_refusal``): a place for automatic failover to refuse a
   master of an older epoch. There are no epochs yet: it accepts every connection.

Everything else gets 403 with a text that names the reason; nothing of it is stored. Each
refusal is logged through the ``warn`` the broker gives (``meta.log_limits.PeerWarnings``:
a few lines per peer host a minute).

Reactor thread only, but ``SyncPeers.from_config`` (it resolves names, blocking) runs once
before the reactor does.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from meta.local_address import interface_addresses, is_loopback

HELLO_ITEM = "sync-hello"
"""The ``stats`` item that carries a master's proof of the sync secret (``sync_hello``)."""

_HELLO_CONTEXT = b"metaq-sync-hello "
_NONCE_HEX_CHARS = 32
NONCES_REMEMBERED = 4096
"""Accepted hello nonces kept to refuse a replayed hello."""
_PROVEN_PRUNE_AT = 64  # connections with a hello outcome before the closed ones are dropped

LOCAL_SOURCES = frozenset({"127.0.0.1", "::1"})
"""Source addresses of a connection dialled to a loopback address of this host."""


def sync_hello(secret: str, nonce: str | None = None) -> str:
    """The ``stats`` item a samsa master sends first on each connection to its gregor slave
    when ``syncSecret`` is set: ``sync-hello:<nonce>:<proof>`` (see the module docstring)."""
    if nonce is None:
        nonce = os.urandom(_NONCE_HEX_CHARS // 2).hex()
    return f"{HELLO_ITEM}:{nonce}:{_proof(secret, nonce)}"


def _proof(secret: str, nonce: str) -> str:
    return hmac.new(secret.encode(), _HELLO_CONTEXT + nonce.encode(), hashlib.sha256).hexdigest()


def peer_host(connection: Any) -> str | None:
    """The peer's address of ``connection`` (an IPv4-mapped IPv6 one as IPv4), or None."""
    host = getattr(connection.transport.getPeer(), "host", None)
    return None if host is None else _normal(host)


def _normal(address: str) -> str:
    address = address.strip("[]").split("%")[0]
    if address.startswith("::ffff:") and "." in address:
        return address[len("::ffff:") :]
    return address


def master_addresses(
    host: str,
    resolve: Callable[[str], Iterable[str]] | None = None,
    own: Iterable[str] | None = None,
) -> frozenset[str]:
    """The source addresses accepted for a master at ``host`` (see the module docstring).

    Raises:
        OSError: ``host`` does not resolve.
    """
    found = frozenset(_normal(a) for a in (resolve or _resolve)(host.strip("[]")))
    if own is None:
        own = (a for pairs in interface_addresses().values() for _family, a in pairs)
    own_addresses = frozenset(_normal(address) for address in own)
    if any(is_loopback(address) or address in own_addresses for address in found):
        return found | LOCAL_SOURCES | own_addresses
    return found


def _resolve(host: str) -> list[str]:
    return [info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)]


class SyncPeers:
    """The admission of ``sync`` by peer (see the module docstring).

    Args:
        master: the configured ``master`` (``host`` or ``host:port``), as refusals name it.
        accepted: the source addresses accepted (``master_addresses``).
        secret: the ``syncSecret``, or None: no hello needed.
        is_open: whether a connection is still open (to forget closed ones).
        warn: ``warn(peer host, text)`` logs a refusal, rate-limited per host.
    """

    def __init__(
        self,
        master: str,
        accepted: frozenset[str],
        secret: str | None,
        is_open: Callable[[Any], bool],
        warn: Callable[[str, str], object],
    ) -> None:
        self.master = master
        self.accepted = accepted
        self._secret = secret
        self._is_open = is_open
        self._warn = warn
        self._proven: dict[Any, bool] = {}  # connection -> its hello was right
        self._nonces: OrderedDict[str, None] = OrderedDict()

    @classmethod
    def from_config(
        cls, config: Any, is_open: Callable[[Any], bool], warn: Callable[[str, str], object]
    ) -> SyncPeers:
        """From a ``GregorConfig``; resolves ``master`` (blocking).

        Raises:
            OSError: ``master`` does not resolve.
        """
        host = config.master
        if ":" in host and not host.endswith("]"):
            host = host.rpartition(":")[0]
        return cls(config.master, master_addresses(host), config.sync_secret, is_open, warn)

    def refusal(self, connection: Any) -> str | None:
        """Why ``connection`` may not send ``sync`` (logged), or None when it may."""
        reason = self._reason(connection)
        if reason is not None:
            host = peer_host(connection) or "-"
            self._warn(host, f"refused sync from {host}: {reason}")
        return reason

    def _reason(self, connection: Any) -> str | None:
        host = peer_host(connection)
        if host not in self.accepted:
            return f"sync is accepted only from the master {self.master} (not from {host})"
        if self._secret is not None:
            proven = self._proven.get(connection)
            if proven is None:
                return (
                    f"sync is accepted only from the master {self.master} with the sync "
                    "secret: this connection sent no sync-hello (set syncSecret on the master)"
                )
            if not proven:
                return (
                    f"sync is accepted only from the master {self.master} with the sync "
                    "secret: the sync-hello of this connection did not prove it"
                )
        return self.epoch_refusal(connection)

    def epoch_refusal(self, connection: Any) -> str | None:
        """The leader-epoch check: automatic failover refuses here a master whose epoch is
        older than the newest this slave has seen. No epochs exist yet: None (accepted)."""
        return None

    def hello(self, item: str, connection: Any) -> tuple[int, bytes]:
        """Answer a ``stats sync-hello:<nonce>:<proof>``: (200, ``ok``) and the connection is
        proven, or (403, why) and it is refused until it sends a right hello."""
        _name, _, rest = item.partition(":")
        nonce, _, proof = rest.partition(":")
        if self._secret is None:
            return 200, b"ok (no syncSecret here: the master's address is checked)"
        right = (
            len(nonce) == _NONCE_HEX_CHARS
            and nonce not in self._nonces
            and hmac.compare_digest(proof.encode(), _proof(self._secret, nonce).encode())
        )
        self._remember(connection, right)
        if not right:
            host = peer_host(connection) or "-"
            self._warn(host, f"refused the sync-hello from {host}: not this slave's syncSecret")
            return 403, b"sync-hello refused: it does not prove this slave's syncSecret"
        self._nonces[nonce] = None
        if len(self._nonces) > NONCES_REMEMBERED:
            self._nonces.popitem(last=False)
        return 200, b"ok"

    def _remember(self, connection: Any, proven: bool) -> None:
        proven_of = self._proven
        if len(proven_of) >= _PROVEN_PRUNE_AT:
            for known in [c for c in proven_of if not self._is_open(c)]:
                del proven_of[known]
        proven_of[connection] = proven
