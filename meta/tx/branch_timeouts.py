"""Timeouts of transactions that are not prepared, and what a late command is told.

What lives here: ``BranchTimeouts``, every timeout of a transaction that is not prepared.
The first two are counted from BEGIN with one value for every transaction, so begin order
is deadline order: each is an insertion-ordered table served by one reactor timer, and
100,000 begins cost one ``DelayedCall``.

* Active (``txActiveTimeoutInSeconds``): a transaction, local or an XA branch, still active
  (begun, perhaps holding messages, neither prepared nor committing) this long after its BEGIN
  is rolled back: its messages are dropped and its bytes and slots are released. Its messages
  were only in memory (the journal sees them at PREPARE or COMMIT), so it leaves nothing to
  recover. A prepared branch is never timed out: it is the transaction manager's promise.
* Unused (``txUnusedTimeoutInSeconds``): an XA branch begun without a timeout of its own that
  has taken no put by then is rolled back sooner.
* The BEGIN's own timeout (Java's): at most ``maxTxTimeoutInSeconds``, with at most
  ``maxTxTimeoutTimerCapacity`` armed at once; a command after it is answered as Java does
  ("has not been started"). One ``DelayedCall`` each (``Transaction.timer``), as in Java.

All that apply to a transaction are armed; the first to pass rolls it back. One rolled back
by the active or the unused timeout is remembered (at most ``EXPIRED_REMEMBERED_MAX`` keys,
the oldest forgotten first; a local one until its connection closes), so that a later
PREPARE, COMMIT or put is told why (``TransactionStore`` answers ``XA_RBTIMEOUT`` for an XA
branch) and a ROLLBACK is answered OK. The tables hold open transactions only (one leaves
them when it is prepared, starts committing or finishes), so they are bounded by
``maxOpenTx``; a sweep rolls back at most ``SWEEP_BATCH`` transactions per reactor turn.

Thread affinity: reactor thread only.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from meta.errors import MetaError, TransactionError, XAError
from meta.protocol.xa import XA_RBTIMEOUT
from meta.tx import states

__all__ = ["EXPIRED_REMEMBERED_MAX", "SWEEP_BATCH", "BranchTimeouts"]

logger = logging.getLogger("meta.tx")

EXPIRED_REMEMBERED_MAX = 10_000
"""Keys of timed-out transactions remembered for the error of a late command."""

SWEEP_BATCH = 1000
"""Transactions rolled back by one sweep; more wait for the next turn of the reactor."""

EXPIRED_LOGGED_MAX = 5
"""Timed-out transactions logged one by one per sweep; the rest in one summary line."""

_ACTIVE = (states.START, states.IN_USE)


class BranchTimeouts:
    """The active and unused deadlines of open transactions, and the keys that timed out.

    Args:
        config: provides ``tx_active_timeout_s`` and ``tx_unused_timeout_s`` (0: never),
            ``tx_timeout_max_s`` and ``tx_timeout_timer_capacity``.
        reactor: provides ``callLater`` and ``seconds``.
        roll_back: rolls a timed-out transaction back; returns False when it could not (the
            journal failed: a restart rolls it back).
    """

    def __init__(self, config: Any, reactor: Any, roll_back: Callable[[Any], bool]) -> None:
        self.active_timeout_s: float = config.tx_active_timeout_s
        self.unused_timeout_s: float = config.tx_unused_timeout_s
        self._begin_timeout_max_s: int = config.tx_timeout_max_s
        self._begin_timers_max: int = config.tx_timeout_timer_capacity
        self._begin_timers = 0
        self._reactor = reactor
        self._roll_back = roll_back
        self._active: OrderedDict[Any, float] = OrderedDict()
        self._unused: OrderedDict[Any, float] = OrderedDict()
        self._timer: Any = None
        # (session or None for XA, key) -> why it was rolled back
        self._expired: OrderedDict[tuple[object, str], str] = OrderedDict()
        self._expired_sessions: dict[object, int] = {}

    def begun(self, transaction: Any, timeout_s: int) -> None:
        """Arm the timeouts of a transaction just begun (``timeout_s``: the BEGIN's own).

        Raises:
            TransactionError: ``maxTxTimeoutTimerCapacity`` BEGIN timeouts are armed already
                (Java's text); the transaction keeps its other deadlines, as in Java.
        """
        now = self._reactor.seconds()
        if self.active_timeout_s > 0:
            self._active[transaction] = deadline = now + self.active_timeout_s
            self._due(deadline, now)
        if timeout_s <= 0:
            if transaction.is_xa and self.unused_timeout_s > 0:
                self._unused[transaction] = deadline = now + self.unused_timeout_s
                self._due(deadline, now)
            return
        if self._begin_timers >= self._begin_timers_max:
            raise TransactionError(
                f"Timer size {self._begin_timers} is great than maxTimerCapacity "
                f"{self._begin_timers_max}"
            )
        timeout_s = min(timeout_s, self._begin_timeout_max_s)
        transaction.timer = self._reactor.callLater(timeout_s, self._begin_timeout, transaction)
        self._begin_timers += 1

    def settled(self, transaction: Any) -> None:
        """``transaction`` is no longer active (prepared, committing or finished)."""
        self._active.pop(transaction, None)
        self._unused.pop(transaction, None)
        if transaction.timer is not None:
            if transaction.timer.active():
                transaction.timer.cancel()
            transaction.timer = None
            self._begin_timers -= 1

    def remember(self, transaction: Any, reason: str) -> None:
        """Keep why ``transaction`` was rolled back by a timeout, for a late command."""
        session = None if transaction.is_xa else transaction.session
        entry = (session, transaction.key)
        if entry not in self._expired and session is not None:
            self._expired_sessions[session] = self._expired_sessions.get(session, 0) + 1
        self._expired[entry] = reason
        while len(self._expired) > EXPIRED_REMEMBERED_MAX:
            (old_session, _key), _reason = self._expired.popitem(last=False)
            if old_session is not None:
                self._forget_session_entry(old_session)

    def reason(self, key: str, session: object) -> str | None:
        """Why the transaction ``key`` of ``session`` was rolled back by a timeout, or None."""
        if not self._expired:
            return None
        return self._expired.get((None if key.startswith("XID:") else session, key))

    def late_error(self, key: str, session: object) -> MetaError | None:
        """The error of a command for the transaction ``key`` of ``session`` that a timeout
        rolled back (``XA_RBTIMEOUT`` for an XA branch), or None."""
        reason = self.reason(key, session)
        if reason is None:
            return None
        return XAError(XA_RBTIMEOUT, reason) if key.startswith("XID:") else TransactionError(reason)

    def forget(self, key: str, session: object) -> None:
        """``key`` is begun again: a later error is about the new transaction."""
        if self._expired:
            entry = (None if key.startswith("XID:") else session, key)
            if self._expired.pop(entry, None) is not None and entry[0] is not None:
                self._forget_session_entry(entry[0])

    def session_closed(self, session: object) -> None:
        """Forget the timed-out local transactions of a closed connection."""
        if self._expired_sessions.pop(session, 0):
            for entry in [entry for entry in self._expired if entry[0] is session]:
                del self._expired[entry]

    def close(self, transactions: Any) -> None:
        """Cancel every timer, those of ``transactions`` too (the broker is stopping)."""
        for transaction in transactions:
            self.settled(transaction)
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _begin_timeout(self, transaction: Any) -> None:
        """The BEGIN's own timeout passed: roll the transaction back unless it is prepared.
        Not remembered: a later command gets Java's answer ("has not been started")."""
        transaction.timer = None
        self._begin_timers -= 1
        if transaction.state in _ACTIVE:
            logger.info("transaction %s timed out; rolling it back", transaction.key)
            self._roll_back(transaction)

    def _forget_session_entry(self, session: object) -> None:
        left = self._expired_sessions.get(session, 0) - 1
        if left > 0:
            self._expired_sessions[session] = left
        else:
            self._expired_sessions.pop(session, None)

    def _due(self, deadline: float, now: float) -> None:
        """Make the timer fire by ``deadline``."""
        timer = self._timer
        if timer is None:
            self._timer = self._reactor.callLater(max(deadline - now, 0.0), self._sweep)
        elif deadline < timer.getTime():
            timer.reset(max(deadline - now, 0.0))

    def _sweep(self) -> None:
        """Roll back the transactions whose deadline passed (at most SWEEP_BATCH); re-arm."""
        self._timer = None
        now = self._reactor.seconds()
        due = [(t, True) for t in _take_due(self._unused, now, SWEEP_BATCH, (states.START,))]
        due += [(t, False) for t in _take_due(self._active, now, SWEEP_BATCH - len(due), _ACTIVE)]
        rolled_back = []
        for transaction, unused in due:
            if transaction.state not in _ACTIVE:  # both deadlines passed: already rolled back
                continue
            held, owner = transaction.byte_count, transaction.owner
            if self._roll_back(transaction):
                reason = self._reason(transaction, unused)
                self.remember(transaction, reason)
                rolled_back.append((reason, held, None if owner is None else owner[2]))
        _log_rolled_back(rolled_back)
        fronts = [table[next(iter(table))] for table in (self._active, self._unused) if table]
        if fronts:
            self._due(min(fronts), now)

    def _reason(self, transaction: Any, unused: bool) -> str:
        if unused:
            return (
                f"XA transaction '{transaction.key}' was rolled back: it took no message "
                f"within {self.unused_timeout_s:g} s of its BEGIN (txUnusedTimeoutInSeconds)."
            )
        kind = "XA transaction" if transaction.is_xa else "Local transaction"
        return (
            f"{kind} '{transaction.key}' was rolled back: it was still active (not prepared, "
            f"not committed) {self.active_timeout_s:g} s after its BEGIN "
            "(txActiveTimeoutInSeconds)."
        )


def _take_due(
    table: OrderedDict[Any, float], now: float, limit: int, wanted: tuple[str, ...]
) -> list[Any]:
    """Remove from the front of ``table`` up to ``limit`` entries whose deadline passed;
    return those in a ``wanted`` state."""
    due = []
    while table and len(due) < limit:
        transaction = next(iter(table))
        if table[transaction] > now:
            break
        del table[transaction]
        if transaction.state in wanted:
            due.append(transaction)
    return due


def _log_rolled_back(rolled_back: list[tuple[str, int, str | None]]) -> None:
    """Log each of the first EXPIRED_LOGGED_MAX (reason, bytes, address); then one line."""
    for reason, held, address in rolled_back[:EXPIRED_LOGGED_MAX]:
        logger.info("%s %d bytes released (begun from %s)", reason, held, address or "?")
    if len(rolled_back) > EXPIRED_LOGGED_MAX:
        more = rolled_back[EXPIRED_LOGGED_MAX:]
        logger.info(
            "%d more transactions timed out and were rolled back; %d bytes released",
            len(more),
            sum(held for _reason, held, _address in more),
        )
