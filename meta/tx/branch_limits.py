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

A transaction is counted from its BEGIN until it leaves the table of open transactions;
branches restored from the journal at start-up were not begun here and count against no
connection and no qualifier. The unused-branch deadlines form a FIFO (one timeout for all,
so begin order is deadline order) served by one reactor timer, so 100,000 begins cost one
``DelayedCall``, not 100,000. A closed connection's count goes away with its last
transaction (its local ones are rolled back at once, its XA branches when they finish).

Thread affinity: reactor thread only.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from meta.errors import MetaError, TransactionError
from meta.tx import states

__all__ = ["BranchLimits"]

logger = logging.getLogger("meta.tx")


class BranchLimits:
    """Counts open transactions per connection and per XA qualifier; expires unused branches.

    Args:
        config: provides ``tx_per_connection_max``, ``xa_per_qualifier_max`` and
            ``tx_unused_timeout_s``.
        reactor: provides ``callLater`` and ``seconds``.
        find_xa: returns the open XA branch of a key, or None.
        rollback: ``TransactionStore.rollback``: rolls a branch back by key.
    """

    def __init__(
        self,
        config: Any,
        reactor: Any,
        find_xa: Callable[[str], Any],
        rollback: Callable[[str, object, Callable[[Any, BaseException | None], None]], None],
    ) -> None:
        self._per_connection_max: int = config.tx_per_connection_max
        self._per_qualifier_max: int = config.xa_per_qualifier_max
        self._unused_timeout_s: float = config.tx_unused_timeout_s
        self._reactor = reactor
        self._find_xa = find_xa
        self._rollback = rollback
        self._by_connection: dict[object, int] = {}
        self._by_qualifier: dict[str, int] = {}
        # identity -> (connection, qualifier or None, begin number) of every counted
        # transaction; the identity is the key of an XA branch, (connection, key) of a local
        # transaction (local keys are per connection).
        self._owners: dict[object, tuple[object, str | None, int]] = {}
        self._begin_numbers = itertools.count()
        self._unused: deque[tuple[float, str, int]] = deque()
        self._timer: Any = None

    def begin(self, key: str, connection: object, timeout_s: int) -> None:
        """Count a new transaction ``key`` begun on ``connection``, or refuse it.

        Call it when BEGIN is about to create the transaction (not for a key that exists).

        Args:
            key: the canonical transaction key.
            connection: the connection (session) that begins it.
            timeout_s: the timeout the BEGIN asked for; without one (``<= 0``), an XA
                branch gets the unused-branch timeout.

        Raises:
            TransactionError: the connection or the qualifier holds its maximum already;
                nothing was counted.
        """
        count = self._by_connection.get(connection, 0)
        if count >= self._per_connection_max:
            raise TransactionError(
                f"Too many open transactions on this connection ({count}, at most "
                f"{self._per_connection_max}: maxTxPerConnection); finish some first."
            )
        qualifier = None
        if key.startswith("XID:"):
            qualifier = key.rsplit(":", 1)[1]
            count = self._by_qualifier.get(qualifier, 0)
            if count >= self._per_qualifier_max:
                raise TransactionError(
                    f"Too many open XA transactions for unique qualifier {qualifier!r} "
                    f"({count}, at most {self._per_qualifier_max}: maxXaTxPerQualifier); "
                    "finish some first."
                )
            self._by_qualifier[qualifier] = count + 1
        self._by_connection[connection] = self._by_connection.get(connection, 0) + 1
        number = next(self._begin_numbers)
        identity = key if qualifier is not None else (connection, key)
        self._owners[identity] = (connection, qualifier, number)
        if qualifier is not None and timeout_s <= 0 and self._unused_timeout_s > 0:
            self._unused.append((self._reactor.seconds() + self._unused_timeout_s, key, number))
            if self._timer is None:
                self._timer = self._reactor.callLater(self._unused_timeout_s, self._sweep)

    def finished(self, transaction: Any) -> None:
        """Stop counting a transaction that left the table of open transactions."""
        key = transaction.key
        identity = key if transaction.is_xa else (transaction.session, key)
        owner = self._owners.pop(identity, None)
        if owner is None:  # restored from the journal: never counted
            return
        connection, qualifier, _number = owner
        _decrement(self._by_connection, connection)
        if qualifier is not None:
            _decrement(self._by_qualifier, qualifier)

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
            _deadline, key, number = unused.popleft()
            owner = self._owners.get(key)
            if owner is None or owner[2] != number:  # finished (and perhaps begun again)
                continue
            transaction = self._find_xa(key)
            if transaction is not None and transaction.state == states.START:
                self._expire(key)
        if unused:
            self._timer = self._reactor.callLater(max(unused[0][0] - now, 0.0), self._sweep)

    def _expire(self, key: str) -> None:
        logger.info("XA transaction %s was begun and never used; rolling it back", key)
        try:
            self._rollback(key, None, _rolled_back)
        except MetaError as error:  # the journal failed: a restart rolls it back
            logger.error("could not roll back %s: %s", key, error)


def _rolled_back(_result: Any, error: BaseException | None) -> None:
    if error is not None:
        logger.error("rolling back an unused XA transaction failed: %s", error)


def _decrement(counts: dict, key: object) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
