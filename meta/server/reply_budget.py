"""``ReplyBudget``: a broker-wide bound on the bytes of replies queued for slow readers.

What lives here: the count of reply bytes that every connection holds in its queue (replies
that wait because the peer does not read them fast enough), and the rule that keeps it near
``maxQueuedReplyBytes``. Each connection has its own bound as well (``protocol``'s
``QUEUED_BYTES_MAX``), but many connections under it can still add up to more memory than
the machine has: twenty clients that send ``get`` in a loop and never read grow the broker
by hundreds of megabytes.

The rule: when the total goes over ``queued_bytes_max``, the broker stops reading from the
connections that hold the most, largest first, until those it still reads from hold at most
half the bound together. A connection it stopped reading from is read again once its queue
has drained (its peer read everything); one that never reads stays stopped. A connection
that holds nothing is never stopped, so a well-behaved client keeps its round trip while
others misbehave.

A connection here is anything with a ``queued_bytes`` number and ``hold_reading()`` /
``release_reading()`` methods (``protocol.BrokerProtocol``). Costs: nothing for a reply
written at once; two additions for one that waits in a queue; a pass over the connections
that hold queued bytes each time a reply is queued while the total is over the bound.

Reactor thread only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["QueuingConnection", "ReplyBudget"]

log = logging.getLogger("meta.server")

HELD_LOG_INTERVAL_S = 60.0
"""At most one log line a minute about connections no longer read from (each is counted)."""


class QueuingConnection(Protocol):
    """What the budget uses of a connection."""

    @property
    def queued_bytes(self) -> int:
        """Bytes of replies waiting in the connection's queue."""
        ...

    def hold_reading(self) -> None:
        """Stop reading requests (the budget is over and this connection holds the most)."""
        ...

    def release_reading(self) -> None:
        """Read requests again (its queue drained), unless its own bounds say otherwise."""
        ...


class ReplyBudget:
    """Bytes of replies queued across all connections, and the connections held for it.

    Args:
        queued_bytes_max: the bound (``maxQueuedReplyBytes``); the connections that hold the
            most stop being read from while the total is over it.
        clock: seconds, for spacing the log lines (the reactor's ``seconds``).

    Attributes:
        queued_bytes: the total now.
        held_total: how many times a connection was stopped for the bound (``stats``).
    """

    def __init__(self, queued_bytes_max: int, clock: Callable[[], float] = time.monotonic) -> None:
        assert queued_bytes_max > 0
        self.queued_bytes_max = queued_bytes_max
        self._clock = clock
        self._logged_at: float | None = None
        self.queued_bytes = 0
        self.held_total = 0
        self._queuing: set[QueuingConnection] = set()  # connections with queued bytes
        self._held: set[QueuingConnection] = set()

    @property
    def held(self) -> int:
        """Connections not read from now because of the bound."""
        return len(self._held)

    def queued(self, connection: QueuingConnection, size: int) -> None:
        """``connection`` queued a reply of ``size`` bytes (its ``queued_bytes`` counts it)."""
        self.queued_bytes += size
        self._queuing.add(connection)
        if self.queued_bytes > self.queued_bytes_max:
            self._shed()

    def sent(self, connection: QueuingConnection, size: int) -> None:
        """``connection`` took ``size`` bytes of replies out of its queue."""
        self.queued_bytes -= size
        assert self.queued_bytes >= 0
        if connection.queued_bytes == 0:
            self._queuing.discard(connection)
            if connection in self._held:
                self._held.discard(connection)
                connection.release_reading()

    def lost(self, connection: QueuingConnection, size: int) -> None:
        """``connection`` closed with ``size`` bytes still queued (they are dropped)."""
        self.queued_bytes -= size
        assert self.queued_bytes >= 0
        self._queuing.discard(connection)
        self._held.discard(connection)

    def _shed(self) -> None:
        """Stop reading from the largest holders until the rest hold at most half the bound."""
        free = [c for c in self._queuing if c not in self._held]
        free_bytes = sum(c.queued_bytes for c in free)
        if free_bytes <= self.queued_bytes_max // 2:
            return
        free.sort(key=_queued_bytes, reverse=True)
        for connection in free:
            self._held.add(connection)
            self.held_total += 1
            connection.hold_reading()
            free_bytes -= connection.queued_bytes
            if free_bytes <= self.queued_bytes_max // 2:
                break
        self._log()

    def _log(self) -> None:
        now = self._clock()
        if self._logged_at is not None and now - self._logged_at < HELD_LOG_INTERVAL_S:
            return
        self._logged_at = now
        log.warning(
            "%d bytes of replies are queued for clients that do not read them "
            "(maxQueuedReplyBytes=%d): not reading from the %d connections that hold the "
            "most until they read their replies; %d times so far",
            self.queued_bytes,
            self.queued_bytes_max,
            len(self._held),
            self.held_total,
        )


def _queued_bytes(connection: QueuingConnection) -> int:
    return connection.queued_bytes
