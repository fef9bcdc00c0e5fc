"""Per-client bounds on open transactions, and the timeout of unused XA branches.

What lives here: ``BranchLimits``, which ``TransactionStore`` consults on every BEGIN so that
one client cannot take the broker-wide cap of open transactions (``TRANSACTIONS_MAX``):

* a cap per connection (``maxTxPerConnection``) on the transactions, local and XA, begun on
  that connection and not finished yet;
* a cap per XA unique qualifier (``maxXaTxPerQualifier``) on the XA branches of that
  qualifier not finished yet, whichever connection began them (XA branches outlive their
  connection, so a client that reconnects keeps its count);
* a default timeout (``txUnusedTimeoutInSeconds``) for an XA branch begun without a timeout:
  when it passes and the branch is still unused (no put, not prepared, not finished), the
  branch is rolled back. A branch that took a put is left alone, and a prepared branch is
  never timed out (XA's promise).

Branches restored from the journal at start-up were not begun here: they count against no
connection and no qualifier. The unused-branch deadlines form a FIFO (one timeout for all,
so begin order is deadline order) served by one reactor timer, so 100,000 begins cost one
``DelayedCall``, not 100,000.

Thread affinity: reactor thread only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from meta.errors import TransactionError
from meta.tx import states

__all__ = ["BranchLimits"]


class BranchLimits:
    """Counts open transactions per connection and per XA qualifier; expires unused branches.

    Args:
        config: provides ``tx_per_connection_max``, ``xa_per_qualifier_max`` and
            ``tx_unused_timeout_s``.
        reactor: provides ``callLater`` and ``seconds``.
        expire: called with a transaction whose unused timeout passed while it was still
            unused (state ``START``); it rolls the transaction back.
    """

    def __init__(self, config: Any, reactor: Any, expire: Callable[[Any], None]) -> None:
        self._per_connection_max: int = config.tx_per_connection_max
        self._per_qualifier_max: int = config.xa_per_qualifier_max
        self._unused_timeout_s: float = config.tx_unused_timeout_s
        self._reactor = reactor
        self._expire = expire
        self._by_connection: dict[object, int] = {}
        self._by_qualifier: dict[str, int] = {}
        # transaction -> (connection, qualifier or None) for every counted transaction.
        self._owners: dict[Any, tuple[object, str | None]] = {}
        self._unused: deque[tuple[float, Any]] = deque()
        self._timer: Any = None

    def check(self, key: str, connection: object) -> None:
        """Refuse a BEGIN of ``key`` on ``connection`` that would cross a cap.

        Raises:
            TransactionError: the connection or the qualifier holds its maximum already.
        """
        count = self._by_connection.get(connection, 0)
        if count >= self._per_connection_max:
            raise TransactionError(
                f"Too many open transactions on this connection ({count}, at most "
                f"{self._per_connection_max}: maxTxPerConnection); finish some first."
            )
        if key.startswith("XID:"):
            qualifier = key.rsplit(":", 1)[1]
            count = self._by_qualifier.get(qualifier, 0)
            if count >= self._per_qualifier_max:
                raise TransactionError(
                    f"Too many open XA transactions for unique qualifier {qualifier!r} "
                    f"({count}, at most {self._per_qualifier_max}: maxXaTxPerQualifier); "
                    "finish some first."
                )

    def begun(self, transaction: Any, connection: object, timeout_s: int) -> None:
        """Count a transaction that ``check`` allowed and BEGIN created.

        Args:
            transaction: the new ``Transaction``.
            connection: the connection (session) that began it.
            timeout_s: the timeout the BEGIN asked for; without one (``<= 0``), an XA
                branch gets the unused-branch timeout.
        """
        self._by_connection[connection] = self._by_connection.get(connection, 0) + 1
        qualifier = None
        if transaction.is_xa:
            qualifier = transaction.unique_qualifier
            self._by_qualifier[qualifier] = self._by_qualifier.get(qualifier, 0) + 1
            if timeout_s <= 0 and self._unused_timeout_s > 0:
                deadline = self._reactor.seconds() + self._unused_timeout_s
                self._unused.append((deadline, transaction))
                if self._timer is None:
                    self._timer = self._reactor.callLater(self._unused_timeout_s, self._sweep)
        self._owners[transaction] = (connection, qualifier)

    def finished(self, transaction: Any) -> None:
        """Stop counting a transaction that left the table of open transactions."""
        owner = self._owners.pop(transaction, None)
        if owner is None:
            return
        connection, qualifier = owner
        _decrement(self._by_connection, connection)
        if qualifier is not None:
            _decrement(self._by_qualifier, qualifier)

    def connection_closed(self, connection: object) -> None:
        """Forget a closed connection's count (its XA branches still count per qualifier)."""
        self._by_connection.pop(connection, None)

    def close(self) -> None:
        """Cancel the timer (the broker is stopping)."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _sweep(self) -> None:
        """Roll back every branch whose unused timeout passed; re-arm for the next one."""
        self._timer = None
        now = self._reactor.seconds()
        unused = self._unused
        while unused and unused[0][0] <= now:
            _deadline, transaction = unused.popleft()
            if transaction in self._owners and transaction.state == states.START:
                self._expire(transaction)
        if unused:
            self._timer = self._reactor.callLater(max(unused[0][0] - now, 0.0), self._sweep)


def _decrement(counts: dict, key: object) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
