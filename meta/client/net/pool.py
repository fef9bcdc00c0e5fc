"""``ConnectionPool``: reference-counted, pipelined broker connections shared by one factory.

A *user* (a topic of the ZooKeeper view, a consumer's fetcher, direct mode) declares the
brokers it needs with ``set_brokers``; a broker URI's ``PipelinedConnection`` is opened when
first needed (``get``, in the calling thread) and closed when no user references it, once
the requests it has in flight are answered (a broker leaving ZooKeeper gracefully answers
them before it closes; failing them would have their puts sent again and stored twice).

Invariants:

* A closed connection is never returned; an entry leaves the lock-free ``_open`` map
  before its connection is closed.
* After a failed connect, ``get`` fails at once for ``RECONNECT_DELAY_S`` (no connect storm).
* After ``close()`` every connection is closed (those still answering their last requests
  too) and ``get`` raises ``ClientClosedError``.

Thread-safety: every method is thread-safe; ``set_brokers`` never does network I/O (kazoo's
event thread calls it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from meta.client.cluster import BrokerAddress
from meta.client.net.pipeline import REPLY_BYTES_MAX, PipelinedConnection
from meta.errors import ClientClosedError, ClientError, NoBrokerError

log = logging.getLogger("meta.client")

RECONNECT_DELAY_S = 1.0
"""After a failed connect, sends to that broker fail at once for this long (no connect
storm against a dead broker, whose nodes stay in ZooKeeper until its session expires)."""


class _PoolEntry:
    __slots__ = ("address", "users", "connection", "lock", "connect_error", "retry_at")

    def __init__(self, address: BrokerAddress) -> None:
        self.address = address
        self.users: set[str] = set()
        self.connection: PipelinedConnection | None = None
        self.lock = threading.Lock()
        self.connect_error: ClientError | None = None
        self.retry_at = 0.0  # time.monotonic() before which no new connect is tried


class ConnectionPool:
    """Reference-counted connections by broker URI, shared by one session factory.

    A *user* (a string such as a topic name) declares the brokers it needs with
    ``set_brokers``; a URI's connection lives while at least one user lists it. ``get`` opens
    (or re-opens after a failure) the connection lazily, in the calling thread, so callers on
    kazoo's event thread never do network I/O through ``set_brokers``. An open connection is
    found without taking a lock (the per-message path of producers); it is dropped from that
    map before it is closed, and a closed one is never returned.

    Args:
        connect_timeout_s: passed to each ``PipelinedConnection``.
        reply_bytes_max: passed to each ``PipelinedConnection``.
        value_in_place: passed to each ``PipelinedConnection`` (the slave's pool).
    """

    def __init__(
        self,
        connect_timeout_s: float = 10.0,
        reply_bytes_max: int = REPLY_BYTES_MAX,
        value_in_place: bool = False,
    ) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._reply_bytes_max = reply_bytes_max
        self._value_in_place = value_in_place
        self._lock = threading.Lock()
        self._entries: dict[str, _PoolEntry] = {}
        # Open connections by address, read without the lock (the per-message fast path of
        # ``get``); written under ``_lock``; an entry is dropped before its connection closes.
        self._open: dict[BrokerAddress, PipelinedConnection] = {}
        # Connections no user lists any more, closing once their requests are answered.
        self._retiring: list[PipelinedConnection] = []
        self._closed = False

    def set_brokers(self, user: str, addresses: Iterable[BrokerAddress]) -> None:
        """Make ``user`` reference exactly ``addresses``; close connections nobody references
        once their requests in flight are answered (or expire, or are cancelled)."""
        wanted = {address.uri: address for address in addresses}
        unused: list[PipelinedConnection] = []
        with self._lock:
            if self._closed:
                return
            for uri, address in wanted.items():
                self._entries.setdefault(uri, _PoolEntry(address)).users.add(user)
            for uri, entry in list(self._entries.items()):
                if uri not in wanted and user in entry.users:
                    entry.users.discard(user)
                    if not entry.users:
                        del self._entries[uri]
                        self._forget_open(uri)
                        if entry.connection is not None:
                            unused.append(entry.connection)
            self._retiring = [c for c in self._retiring if not c.closed] + unused
        for connection in unused:
            connection.close_when_idle()

    def get(self, address: BrokerAddress) -> PipelinedConnection:
        """Return an open connection to ``address``, connecting now if needed.

        Raises:
            ClientClosedError: the pool was closed.
            NoBrokerError: no user references this broker any more.
            ClientError: the broker cannot be reached.
        """
        connection = self._open.get(address)
        if connection is not None and not connection.closed:
            return connection
        entry = self._entry(address)
        connection = entry.connection
        if connection is not None and not connection.closed:
            return connection
        with entry.lock:  # One connect at a time per broker; other brokers are not held up.
            connection = entry.connection
            if connection is None or connection.closed:
                connection = self._connect(entry)
                with self._lock:
                    still_used = self._entries.get(address.uri) is entry and not self._closed
                    if still_used:
                        entry.connection = connection
                        self._forget_open(address.uri)
                        self._open[address] = connection
                if not still_used:
                    connection.close()
                    raise NoBrokerError(f"broker {address.uri} is no longer used")
            return connection

    def _connect(self, entry: _PoolEntry) -> PipelinedConnection:
        """Connect to the entry's broker (entry lock held), or fail fast after a recent failure."""
        if entry.connect_error is not None and time.monotonic() < entry.retry_at:
            raise ClientError(f"{entry.connect_error} (next attempt within {RECONNECT_DELAY_S} s)")
        address = entry.address
        try:
            connection = PipelinedConnection(
                address.host,
                address.port,
                self._connect_timeout_s,
                self._reply_bytes_max,
                value_in_place=self._value_in_place,
            )
        except ClientError as error:
            entry.connect_error = error
            entry.retry_at = time.monotonic() + RECONNECT_DELAY_S
            raise
        entry.connect_error = None
        return connection

    def _entry(self, address: BrokerAddress) -> _PoolEntry:
        with self._lock:
            if self._closed:
                raise ClientClosedError("the session factory was shut down")
            entry = self._entries.get(address.uri)
        if entry is None:
            raise NoBrokerError(f"broker {address.uri} is not in use by any topic")
        return entry

    def _forget_open(self, uri: str) -> None:
        """Drop the fast-path entries of ``uri`` (``_lock`` held)."""
        for address in [a for a in self._open if a.uri == uri]:
            del self._open[address]

    def connect_quietly(self, address: BrokerAddress) -> None:
        """Open the connection to ``address`` now if possible; log (not raise) a failure."""
        try:
            self.get(address)
        except ClientError as error:
            log.warning("cannot connect to %s yet: %s", address.uri, error)

    @property
    def closed(self) -> bool:
        """True once ``close`` was called (the factory shut down)."""
        return self._closed

    def uris(self) -> list[str]:
        """The URIs currently referenced (for tests and diagnostics)."""
        with self._lock:
            return sorted(self._entries)

    def close(self) -> None:
        """Close every connection and refuse further use. Idempotent."""
        with self._lock:
            self._closed = True
            entries = list(self._entries.values())
            self._entries.clear()
            self._open.clear()
            retiring, self._retiring = self._retiring, []
        for connection in retiring:
            connection.close()
        for entry in entries:
            with entry.lock:
                if entry.connection is not None:
                    entry.connection.close()
