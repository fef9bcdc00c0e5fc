"""Bounds on what one client can hold in open transactions, and who holds the most.

What lives here: ``BranchLimits``, which ``TransactionStore`` consults on every BEGIN and on
every put inside a transaction, and ``client_address``, the key a client is counted under.

* Broker-wide: ``maxOpenTx`` open transactions and ``maxOpenTxBytes`` bytes of messages held
  by them (in memory until COMMIT; prepared branches restored from the journal included).
* Per client address (``maxTxPerAddress`` transactions, ``maxTxBytesPerAddress`` bytes): the
  IP address of the connection that began the transaction, over all of that address's
  connections and XA qualifiers. Connections and qualifiers cost a client nothing to make
  new; an address does, so this is the bound that keeps one client from the broker-wide
  caps (the configuration keeps each per-address cap at most half of its broker-wide one).
  An IPv6 address counts with its whole /64 network (the block one host is usually given);
  an IPv4-mapped IPv6 address counts as its IPv4 address. Clients behind one address (NAT, a
  proxy, the processes of one host, loopback) share that address's share.
* Per connection (``maxTxPerConnection``) and per XA unique qualifier
  (``maxXaTxPerQualifier``, whichever connection began the branch: XA branches outlive their
  connection, so a client that reconnects keeps its count).

A transaction is counted (``Transaction.owner``) from its BEGIN until it leaves the table of
open transactions; its bytes count (against the address that began it, whichever connection
put them) from each put taken until it finishes (or, for a commit
that failed to store, until its memory goes). Branches restored from the journal at start-up
were not begun here: they count against the broker-wide caps only. A refusal names the key
that refused and who holds the most (address, transactions, bytes); each cap also logs one
WARNING at most every ``REFUSAL_LOG_INTERVAL_S`` with the count refused since.

Thread affinity: reactor thread only.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from typing import Any

from meta.errors import TransactionError

__all__ = ["REFUSAL_LOG_INTERVAL_S", "BranchLimits", "client_address"]

logger = logging.getLogger("meta.tx")

REFUSAL_LOG_INTERVAL_S = 10.0
"""At most one WARNING per cap in this many seconds (the next one says how many were refused)."""

HOLDER_CACHE_S = 1.0
"""Who holds the most is recomputed (a scan of every address) at most once in this long."""

_SHARED = "clients behind one address share it"


@functools.lru_cache(maxsize=4096)
def client_address(host: str | None) -> str | None:
    """The address a client is counted under: its IPv4 address, or its IPv6 /64 network.

    Args:
        host: the peer host of the connection (``IPv4Address.host`` and the like); None or
            empty when the transport has none (then nothing is counted per address).
    """
    if not host:
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # not an IP address (a UNIX socket, say): the peer's name is the key
        return host
    if address.version == 4:
        return str(address)
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    if address.is_loopback:
        return str(address)
    return str(ipaddress.ip_network(f"{address}/64", strict=False))


class BranchLimits:
    """Counts open transactions per connection, per XA qualifier and per client address.

    Args:
        config: provides ``tx_open_max``, ``tx_open_bytes_max``, ``tx_per_address_max``,
            ``tx_bytes_per_address_max``, ``tx_per_connection_max`` and
            ``xa_per_qualifier_max``.
        reactor: provides ``seconds`` (rate limits of the log and of the holder scan).
    """

    def __init__(self, config: Any, reactor: Any) -> None:
        self.open_max: int = config.tx_open_max
        self.open_bytes_max: int = config.tx_open_bytes_max
        self.per_address_max: int = config.tx_per_address_max
        self.bytes_per_address_max: int = config.tx_bytes_per_address_max
        self._per_connection_max: int = config.tx_per_connection_max
        self._per_qualifier_max: int = config.xa_per_qualifier_max
        self._reactor = reactor
        self._by_connection: dict[object, int] = {}
        self._by_qualifier: dict[str, int] = {}
        self._count_by_address: dict[str, int] = {}
        self._bytes_by_address: dict[str, int] = {}
        # cap key -> [time of its last WARNING (None: never), refusals not logged since]
        self._refusals: dict[str, list] = {}
        # "count" / "bytes" -> (computed at, text)
        self._holders: dict[str, tuple[float, str]] = {}

    # -- counting ------------------------------------------------------------------------

    def begin(
        self, transaction: Any, connection: object, address: str | None, open_count: int
    ) -> None:
        """Count a new ``transaction`` begun on ``connection`` from ``address``, or refuse it.

        Call it when BEGIN is about to create the transaction (not for a key that exists).

        Args:
            transaction: the new ``Transaction`` (not yet in a table).
            connection: the connection (session) that begins it.
            address: ``client_address`` of that connection's peer (None: not counted).
            open_count: the transactions open now, broker-wide.

        Raises:
            TransactionError: a cap is reached; nothing was counted.
        """
        if open_count >= self.open_max:
            raise self._refused(
                "maxOpenTx",
                address,
                f"Too many open transactions ({open_count}, at most {self.open_max}: "
                f"maxOpenTx); {self._most('count')}; finish some first.",
            )
        if address is not None:
            count = self._count_by_address.get(address, 0)
            if count >= self.per_address_max:
                held = self._bytes_by_address.get(address, 0)
                raise self._refused(
                    "maxTxPerAddress",
                    address,
                    f"Too many open transactions from {address} ({count} holding {held} "
                    f"bytes, at most {self.per_address_max}: maxTxPerAddress; {_SHARED}); "
                    f"{self._most('count')}; finish some first.",
                )
        count = self._by_connection.get(connection, 0)
        if count >= self._per_connection_max:
            raise self._refused(
                "maxTxPerConnection",
                address,
                f"Too many open transactions on this connection ({count}, at most "
                f"{self._per_connection_max}: maxTxPerConnection); {self._most('count')}; "
                "finish some first.",
            )
        qualifier = transaction.unique_qualifier if transaction.is_xa else None
        if qualifier is not None:
            count = self._by_qualifier.get(qualifier, 0)
            if count >= self._per_qualifier_max:
                raise self._refused(
                    "maxXaTxPerQualifier",
                    address,
                    f"Too many open XA transactions for unique qualifier {qualifier!r} "
                    f"({count}, at most {self._per_qualifier_max}: maxXaTxPerQualifier); "
                    f"{self._most('count')}; finish some first.",
                )
            self._by_qualifier[qualifier] = count + 1
        self._by_connection[connection] = self._by_connection.get(connection, 0) + 1
        if address is not None:
            self._count_by_address[address] = self._count_by_address.get(address, 0) + 1
        transaction.owner = (connection, qualifier, address)

    def check_bytes(self, transaction: Any, size: int, held: int) -> None:
        """Refuse a put of ``size`` bytes into ``transaction`` beyond a byte cap.

        Args:
            held: the bytes all open transactions hold now.

        Raises:
            TransactionError: the broker-wide or the address's byte cap would be passed.
        """
        address = self._address(transaction)
        if held + size > self.open_bytes_max:
            raise self._refused(
                "maxOpenTxBytes",
                address,
                f"Open transactions already hold {held} bytes (at most {self.open_bytes_max}: "
                f"maxOpenTxBytes); {self._most('bytes')}; commit or roll back first.",
            )
        if address is not None:
            held = self._bytes_by_address.get(address, 0)
            if held + size > self.bytes_per_address_max:
                count = self._count_by_address.get(address, 0)
                raise self._refused(
                    "maxTxBytesPerAddress",
                    address,
                    f"Open transactions from {address} already hold {held} bytes in {count} "
                    f"transactions (at most {self.bytes_per_address_max}: "
                    f"maxTxBytesPerAddress; {_SHARED}); {self._most('bytes')}; "
                    "commit or roll back first.",
                )

    def has_room(self, transaction: Any, size: int, held: int) -> bool:
        """Whether ``check_bytes`` would take ``size`` more bytes (nothing is logged)."""
        if held + size > self.open_bytes_max:
            return False
        address = self._address(transaction)
        if address is None:
            return True
        return self._bytes_by_address.get(address, 0) + size <= self.bytes_per_address_max

    def added(self, transaction: Any, size: int) -> None:
        """``size`` bytes were put into ``transaction``."""
        address = self._address(transaction)
        if address is not None:
            self._bytes_by_address[address] = self._bytes_by_address.get(address, 0) + size

    def released(self, transaction: Any, size: int) -> None:
        """``transaction`` no longer holds ``size`` of its bytes in memory."""
        address = self._address(transaction)
        if address is not None and size:
            _decrement(self._bytes_by_address, address, size)

    def finished(self, transaction: Any) -> None:
        """Stop counting a transaction that left the table of open transactions (its bytes
        with it)."""
        owner = transaction.owner
        if owner is None:  # restored from the journal, or no longer counted
            return
        self.released(transaction, transaction.byte_count)
        transaction.owner = None
        connection, qualifier, address = owner
        _decrement(self._by_connection, connection)
        if qualifier is not None:
            _decrement(self._by_qualifier, qualifier)
        if address is not None:
            _decrement(self._count_by_address, address)

    # -- reporting -----------------------------------------------------------------------

    def holders(self, limit: int = 10) -> list[tuple[str, int, int]]:
        """(address, open transactions, bytes) of the ``limit`` addresses holding the most
        transactions, most first."""
        counts, sizes = self._count_by_address, self._bytes_by_address
        addresses = sorted(counts, key=lambda address: (-counts[address], address))[:limit]
        return [(address, counts[address], sizes.get(address, 0)) for address in addresses]

    def _most(self, by: str) -> str:
        """Who holds the most transactions (``by`` "count") or bytes ("bytes"), as text."""
        now = self._reactor.seconds()
        cached = self._holders.get(by)
        if cached is not None and now - cached[0] < HOLDER_CACHE_S:
            return cached[1]
        table = self._count_by_address if by == "count" else self._bytes_by_address
        if table:
            address = max(table, key=table.__getitem__)
            count = self._count_by_address.get(address, 0)
            size = self._bytes_by_address.get(address, 0)
            text = f"the most are held by {address} ({count} transactions, {size} bytes)"
        else:
            text = "no client address holds any"
        self._holders[by] = (now, text)
        return text

    def _refused(self, key: str, address: str | None, text: str) -> TransactionError:
        """The error of a refusal by ``key``; logs it at most every REFUSAL_LOG_INTERVAL_S."""
        now = self._reactor.seconds()
        state = self._refusals.setdefault(key, [None, 0])
        last, suppressed = state
        if last is not None and now - last < REFUSAL_LOG_INTERVAL_S:
            state[1] = suppressed + 1
        else:
            state[0], state[1] = now, 0
            note = f" ({suppressed} more refused by {key} since the last line)"
            note = note if suppressed else ""
            logger.warning("refused a transaction of %s: %s%s", address or "?", text, note)
        return TransactionError(text)

    @staticmethod
    def _address(transaction: Any) -> str | None:
        owner = transaction.owner
        return None if owner is None else owner[2]


def _decrement(counts: dict, key: object, amount: int = 1) -> None:
    left = counts.get(key, 0) - amount
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
