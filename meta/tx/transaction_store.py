"""Open transactions of a broker: begin, put, prepare, commit, rollback, forget, timeouts.

What lives here: ``TransactionStore``, the table of ``meta.tx.transaction.Transaction``
records (Java's ``TransactionalCommandProcessor`` with its ``JournalTransactionStore``).
Local transactions live in their connection's session, XA
branches in one broker-wide table, and operator-finished (heuristic) branches in a third
table until FORGET. A local commit still storing, or that failed to store, when its
connection closes leaves the session for a fourth (``_orphaned_commits``): it stays live, so
its COMMIT record stays pinned, but it no longer holds the connection.

Messages are kept in memory until PREPARE, which journals them (one APPEND record per
partition) ahead of the PREPARE record, or until a COMMIT without PREPARE, which journals
them inside its COMMIT_DATA record: a transaction that is neither prepared nor committed is
rolled back by a crash anyway.

Commit protocol (the heart of crash safety, docs/formats.md):
    1. each partition's batch gets its offset (the partition's next offset);
    2. the COMMIT record naming those locations (COMMIT_DATA with the batches, unless
       prepared before) is written to the journal;
    3. the offsets are reserved in the partitions (``PartitionLog.reserve``), in the same
       reactor turn, so they are exactly the offsets the record names;
    4. once the journal has synced the record (``flushTxLogAtCommit``), each batch fills its
       reservation; the reply goes when every partition acknowledged its batch.
A batch is therefore never written before its COMMIT record, and recovery, which checks each
named location by CRC, appends exactly the batches that are missing.

Invariants:
    * A transaction with journal records (prepared, committing) retains its first record's
      file until it is finished (and, for a heuristic outcome, until FORGET); ``location``
      orders checkpoints. An open transaction has no record, pins nothing.
    * Messages of a transaction are in memory only while it is open: at most ``maxOpenTx``
      open transactions and ``maxOpenTxBytes`` bytes in all, and less per client address
      (``meta.tx.branch_limits``); an open transaction that is not prepared is rolled back
      when a timeout passes (``meta.tx.branch_timeouts``).
    * A transaction is removed from its table only when FINISHED (or moved to the heuristic
      table, or, committing when its connection closes, to ``_orphaned_commits``); every
      state change goes through ``meta.tx.states.transition``.

Thread affinity: reactor thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from meta.errors import MetaError, TransactionError, XAError
from meta.protocol.xa import (
    XA_OK,
    XA_RBOTHER,
    XA_RDONLY,
    XAER_NOTA,
    XAER_RMERR,
    XAER_RMFAIL,
)
from meta.tx import branch_limits, branch_timeouts, states
from meta.tx.commit_failure import commit_failure_text
from meta.tx.journal import Journal
from meta.tx.journal_location import JournalLocation
from meta.tx.records import (
    HEURISTIC_COMMIT,
    HEURISTIC_NONE,
    HEURISTIC_ROLLBACK,
    AppendRecord,
    ForgetRecord,
    PrepareRecord,
    RollbackRecord,
    encode,
    encode_commit,
)
from meta.tx.transaction import Transaction

logger = logging.getLogger("meta.tx")

Done = Callable[[Any, BaseException | None], None]
"""``done(result, None)`` on success, ``done(None, error)`` on failure."""

_HEURISTIC_STATES = {
    HEURISTIC_COMMIT: states.HEURISTIC_COMMIT,
    HEURISTIC_ROLLBACK: states.HEURISTIC_ROLLBACK,
}


def not_started(key: str) -> MetaError:
    """Java's error for an unknown key: XAER_NOTA for XA, plain text for the others."""
    if key.startswith("XID:"):
        return XAError(XAER_NOTA, f"XA transaction '{key}' has not been started.")
    if key.startswith("TX:"):
        return TransactionError(f"Local transaction '{key}' has not been started.")
    return TransactionError(f"Transaction key '{key}' names no transaction.")


class TransactionStore:
    """Every open transaction of the broker, and the journal behind them.

    Args:
        config: the broker configuration.
        reactor: provides ``callLater`` (timeouts).
        store: the ``StoreManager`` the batches are committed to.
        journal: the transaction journal (already replayed by ``meta.tx.recovery``).
    """

    def __init__(self, config: Any, reactor: Any, store: Any, journal: Journal) -> None:
        self._reactor = reactor
        self._store = store
        self.journal = journal
        self._sessions: dict[object, dict[str, Transaction]] = {}
        self._xa: dict[str, Transaction] = {}
        self._heuristic: dict[str, Transaction] = {}
        self._orphaned_commits: set[Transaction] = set()
        self._open_count = 0
        self.byte_count = 0
        self.limits = branch_limits.BranchLimits(config, reactor)
        self.timeouts = branch_timeouts.BranchTimeouts(config, reactor, self._roll_back_expired)

    # -- lookup ------------------------------------------------------------------------------

    def _lookup(self, key: str, session: object) -> Transaction | None:
        if key.startswith("XID:"):
            return self._xa.get(key) or self._heuristic.get(key)
        return self._sessions.get(session, {}).get(key)

    def _find(self, key: str, session: object) -> Transaction:
        transaction = self._lookup(key, session)
        if transaction is None:
            raise self.timeouts.late_error(key, session) or not_started(key)
        return transaction

    def live_transactions(self) -> list[Transaction]:
        """Every transaction that pins journal records (open, committing or heuristic)."""
        found = [t for session in self._sessions.values() for t in session.values()]
        found += self._orphaned_commits
        return found + list(self._xa.values()) + list(self._heuristic.values())

    def oldest_location(self) -> JournalLocation | None:
        """The first record of the oldest live transaction (what a checkpoint may name)."""
        locations = [t.location for t in self.live_transactions() if t.location is not None]
        return min(locations) if locations else None

    # -- commands ----------------------------------------------------------------------------

    def begin(self, key: str, session: object, timeout_s: int, address: str | None = None) -> None:
        """BEGIN: create the transaction unless it exists; arm its timeouts.

        Args:
            key: the canonical transaction key.
            session: the connection that begins it.
            timeout_s: the BEGIN's timeout (``<= 0``: none of its own).
            address: the client address it counts against (``branch_limits.client_address``
                of the connection's peer); None counts it against no address.

        Raises:
            TransactionError: ``null`` key, a cap of ``BranchLimits`` is reached, or the timer
                capacity is exceeded (the transaction then stays created, as in Java).
        """
        if key == "null":
            raise TransactionError("Transaction key 'null' cannot begin a transaction.")
        is_xa = key.startswith("XID:")
        if key in (self._xa if is_xa else self._sessions.get(session, {})):
            return
        if key in self._heuristic:
            return
        transaction = Transaction(key, None if is_xa else session)
        self.limits.begin(transaction, session, address, self._open_count)
        self.timeouts.forget(key, session)
        table = self._xa if is_xa else self._sessions.setdefault(session, {})
        table[key] = transaction
        self._open_count += 1
        self.timeouts.begun(transaction, timeout_s)

    def check_put(self, key: str, session: object) -> Transaction:
        """Return the transaction a put goes to, or raise what the put must answer.

        Raises:
            MetaError: unknown transaction (plain text, no ``XAException:`` on this path), or
                a state that takes no messages.
        """
        transaction = self._find(key, session)
        if transaction.state is not states.IN_USE:
            states.transition(transaction.is_xa, key, transaction.state, states.PUT)
        return transaction

    def put(
        self, transaction: Transaction, topic: str, partition: int, record: bytes, count: int = 1
    ) -> None:
        """Keep one message (or ``count`` joined) of a transaction in memory until PREPARE or
        COMMIT journals it (see the module doc).

        Raises:
            MetaError: the transaction no longer takes messages, or a bound is reached.
        """
        new_state = states.IN_USE
        if transaction.state is not new_state:
            new_state = states.transition(
                transaction.is_xa, transaction.key, transaction.state, states.PUT
            )
        size = len(record)
        self.limits.check_bytes(transaction, size, self.byte_count)
        transaction.state = new_state  # only once the put is taken (Rule 2)
        records = transaction.batches.get((topic, partition))
        if records is None:
            transaction.batches[(topic, partition)] = [record]
        else:
            records.append(record)
        transaction.message_count += count
        transaction.byte_count += size
        self.byte_count += size
        self.limits.added(transaction, size)

    def has_room(self, transaction: Transaction, size: int) -> bool:
        """Whether ``put`` would take ``size`` more bytes into ``transaction`` (the byte
        caps; not its state)."""
        return self.limits.has_room(transaction, size, self.byte_count)

    def prepare(self, key: str, done: Done) -> None:
        """PREPARE: ``done(XA_OK)`` once the prepare record is synced, or ``done(XA_RDONLY)``."""
        if not key.startswith("XID:"):
            raise XAError(XAER_RMERR, "Prepare not implemented on Local Transactions.")
        transaction = self._find(key, None)
        new_state = states.transition(True, key, transaction.state, states.PREPARE)
        if new_state == states.FINISHED:
            self._finish(transaction)
            done(XA_RDONLY, None)
            return
        self._journal_batches(transaction, XAER_RMERR)
        self._journal_append(PrepareRecord(key), transaction, XAER_RMERR)
        transaction.state = new_state
        self.timeouts.settled(transaction)  # a prepared branch is never timed out
        self.journal.sync(lambda error: done(None if error else XA_OK, _xa_failure(error)))

    def _journal_batches(self, transaction: Transaction, code: int) -> None:
        """Journal each partition's messages as one APPEND record (they become one blob)."""
        key = transaction.key
        for (topic, partition), records in transaction.batches.items():
            data = records[0] if len(records) == 1 else b"".join(records)
            records[:] = [data]
            self._journal_append(AppendRecord(key, topic, partition, data), transaction, code)

    def commit(self, key: str, session: object, one_phase: bool, done: Done) -> None:
        """COMMIT_ONE_PHASE / COMMIT_TWO_PHASE: ``done(None, None)`` once every batch is stored."""
        transaction = self._find(key, session)
        event = states.COMMIT_ONE_PHASE if one_phase else states.COMMIT_TWO_PHASE
        new_state = states.transition(transaction.is_xa, key, transaction.state, event)
        if new_state == states.FINISHED:
            self._finish(transaction)
            done(None, None)
            return
        self._commit(transaction, HEURISTIC_NONE, done)

    def rollback(
        self, key: str, session: object, done: Done, outcome: int = HEURISTIC_NONE
    ) -> None:
        """ROLLBACK: drop the messages; ``done`` once the rollback record is synced.

        A transaction a timeout rolled back is answered OK: it is rolled back."""
        if self._lookup(key, session) is None and self.timeouts.reason(key, session):
            done(None, None)
            return
        transaction = self._find(key, session)
        was_prepared = transaction.state == states.PREPARED
        new_state = states.transition(transaction.is_xa, key, transaction.state, states.ROLLBACK)
        if transaction.location is not None:
            record = RollbackRecord(key, was_prepared, outcome)
            self._journal_append(record, transaction, XAER_RMERR)
        transaction.state = new_state
        self._finish(transaction, outcome)
        self.journal.sync(lambda error: done(None, _xa_failure(error)))

    def forget(self, key: str, done: Done) -> None:
        """FORGET: drop an operator-finished branch from the heuristic table.

        Any other XA key is answered OK with nothing to do, as Java does.
        """
        transaction = self._heuristic.get(key)
        if transaction is None:
            done(None, None)
            return
        self._journal_append(ForgetRecord(key), transaction, XAER_RMERR)
        del self._heuristic[key]
        if transaction.location is not None:
            self.journal.release(transaction.location.number)
        self.journal.sync(lambda error: done(None, _xa_failure(error)))

    def recover_keys(self, unique_qualifier: str | None) -> list[str]:
        """RECOVER: prepared and heuristic branches, filtered by qualifier when one is given."""
        found = [t for t in self._xa.values() if t.state == states.PREPARED]
        found += self._heuristic.values()
        return [
            t.key
            for t in found
            if unique_qualifier is None or t.unique_qualifier == unique_qualifier
        ]

    def heuristic(self, key: str, commit: bool, done: Done) -> None:
        """An operator finishes a prepared branch; the outcome is journaled and kept."""
        transaction = self._xa.get(key)
        if transaction is None or transaction.state != states.PREPARED:
            raise XAError(XAER_NOTA, f"XA transaction '{key}' is not prepared.")
        if commit:
            self._commit(transaction, HEURISTIC_COMMIT, done)
        else:
            self.rollback(key, None, done, HEURISTIC_ROLLBACK)

    def describe(self) -> list[tuple[str, str, int, int]]:
        """(key, state, message count, bytes) of every live transaction, for operators."""
        return [(t.key, t.state, t.message_count, t.byte_count) for t in self.live_transactions()]

    def session_closed(self, session: object) -> int:
        """Roll back the open local transactions of a closed connection (compatibility.md); its
        committing ones go on without it. Returns how many were rolled back."""
        rolled_back = 0
        for transaction in list(self._sessions.get(session, {}).values()):
            if transaction.state in (states.START, states.IN_USE):
                try:
                    self.rollback(transaction.key, session, _ignore)
                except MetaError as error:  # the journal failed or closed: restart rolls back
                    logger.error("could not roll back %s: %s", transaction.key, error)
                    continue
                rolled_back += 1
            elif transaction.state == states.COMMITTING:
                self._orphan(transaction)
        self.timeouts.session_closed(session)
        return rolled_back

    def _orphan(self, transaction: Transaction) -> None:
        """Move a committing local transaction out of its closed connection's session: it
        stays live (``_finish`` or a restart completes it) without holding the connection."""
        table = self._sessions[transaction.session]
        del table[transaction.key]
        if not table:
            del self._sessions[transaction.session]
        self.limits.finished(transaction)  # Counted against the connection only while it holds it.
        transaction.session = None
        self._orphaned_commits.add(transaction)

    # -- commit ------------------------------------------------------------------------------

    def _commit(self, transaction: Transaction, outcome: int, done: Done) -> None:
        """Journal the commit with its batch locations (and the batches, unless prepared:
        one COMMIT_DATA record), reserve them, append after the sync."""
        was_prepared = transaction.state == states.PREPARED
        logs = []
        for topic, partition in transaction.batches:
            log = self._store.get(topic, partition) or self._store.get_or_create(topic, partition)
            if not log.accepts_appends:
                if log.failed is None:  # closed: the broker is stopping; retry after restart
                    text = f"partition {log.name} is closed (the broker is stopping); "
                    raise _failure(transaction, XAER_RMFAIL, text + "nothing was changed.")
                self._rollback_failed_commit(transaction, was_prepared)
                text = f"partition {log.name} refuses appends; the transaction was rolled back."
                raise _failure(transaction, XA_RBOTHER, text)
            logs.append(log)
        batches = transaction.batches.values()
        parts = [
            (log, records[0] if len(records) == 1 else b"".join(records))
            for log, records in zip(logs, batches, strict=True)
        ]
        placed = [(log.topic, log.partition, log.next_offset, data) for log, data in parts]
        record = encode_commit(transaction.key, was_prepared, outcome, placed)
        self._journal_append(record, transaction, XAER_RMFAIL)
        transaction.state = states.COMMITTING
        self.timeouts.settled(transaction)
        waiting = [len(parts)]
        failures: list[BaseException] = []

        def stored(offset: int | None, error: BaseException | None) -> None:
            if error is not None:
                failures.append(error)
            waiting[0] -= 1
            if waiting[0] == 0:
                self._committed(transaction, outcome, failures, done)

        reservations = [(log, log.reserve(len(data), stored), data) for log, data in parts]
        for (log, reservation, _data), location in zip(reservations, placed, strict=True):
            assert reservation is not None and reservation.offset == location[2], log.name

        def synced(error: BaseException | None) -> None:
            for log, reservation, data in reservations:
                if error is None:
                    log.fill(reservation, data)
                else:
                    log.cancel(reservation, error)

        self.journal.sync(synced)

    def _committed(
        self, transaction: Transaction, outcome: int, failures: list, done: Done
    ) -> None:
        if failures:
            # The transaction stays COMMITTING (its journal file and the checkpoint stay
            # pinned); a restart decides the outcome from the journal (commit_failure).
            logger.error("commit of %s failed to store: %s", transaction.key, failures[0])
            text = commit_failure_text(transaction.key, failures[0], self.journal.failed)
            done(None, _failure(transaction, XAER_RMFAIL, text))
            # The COMMIT record holds the batches from now on; the memory goes.
            self.limits.released(transaction, transaction.byte_count)
            self.byte_count -= transaction.byte_count
            transaction.batches = {}
            transaction.byte_count = 0
            return
        transaction.state = states.FINISHED
        self._finish(transaction, outcome)
        done(None, None)

    def _rollback_failed_commit(self, transaction: Transaction, was_prepared: bool) -> None:
        if transaction.location is not None:
            record = RollbackRecord(transaction.key, was_prepared, HEURISTIC_NONE)
            self._journal_append(record, transaction, XAER_RMERR)
        transaction.state = states.FINISHED
        self._finish(transaction)

    # -- helpers -----------------------------------------------------------------------------

    def _journal_append(self, record: Any, transaction: Transaction, code: int) -> None:
        """Append ``record`` (or its framed bytes) to the transaction's journal file (its
        first record starts one)."""
        number = transaction.location.number if transaction.location is not None else None
        if record.__class__ is not bytes:
            record = encode(record)
        try:
            location = self.journal.append_encoded(record, number)
            if number is None:
                transaction.location = location
                self.journal.retain(location.number)
        except MetaError as error:
            raise (
                XAError(code, str(error)) if transaction.is_xa else TransactionError(str(error))
            ) from None

    def _finish(self, transaction: Transaction, outcome: int = HEURISTIC_NONE) -> None:
        """Remove a finished transaction (or move it to the heuristic table)."""
        key = transaction.key
        if transaction.is_xa:
            self._xa.pop(key, None)
        else:
            self._orphaned_commits.discard(transaction)
            table = self._sessions.get(transaction.session)
            if table is not None:
                table.pop(key, None)
                if not table:
                    del self._sessions[transaction.session]
        self._open_count -= 1
        self.limits.finished(transaction)
        self.timeouts.settled(transaction)
        self.byte_count -= transaction.byte_count
        transaction.batches = {}
        transaction.byte_count = 0
        if outcome != HEURISTIC_NONE:
            transaction.state = _HEURISTIC_STATES[outcome]
            self._heuristic[key] = transaction
        elif transaction.location is not None:
            self.journal.release(transaction.location.number)

    def _roll_back_expired(self, transaction: Transaction) -> bool:
        """Roll back a transaction whose timeout passed; False when the journal failed (a
        restart then rolls it back)."""
        try:
            self.rollback(transaction.key, transaction.session, _ignore)
        except MetaError as error:
            logger.error("could not roll back %s: %s", transaction.key, error)
            return False
        return True

    # -- recovery (called by meta.tx.recovery) -------------------------------------------------

    def restore(self, transaction: Transaction) -> None:
        """Put back a prepared XA branch or a heuristic outcome found in the journal."""
        if transaction.location is not None:
            self.journal.retain(transaction.location.number)
        if transaction.state == states.PREPARED:
            self._xa[transaction.key] = transaction
            self._open_count += 1
            self.byte_count += transaction.byte_count
        else:
            self._heuristic[transaction.key] = transaction

    def close(self) -> None:
        """Cancel every timeout (the broker is stopping)."""
        self.timeouts.close(self.live_transactions())


def _failure(transaction: Transaction, code: int, text: str) -> MetaError:
    """An XA error for a branch; plain text for a local transaction (as Java answers)."""
    return XAError(code, text) if transaction.is_xa else TransactionError(text)


def _xa_failure(error: BaseException | None) -> BaseException | None:
    if error is None:
        return None
    return XAError(XAER_RMFAIL, f"the transaction journal could not sync: {error}")


def _ignore(result: Any, error: BaseException | None) -> None:
    if error is not None:
        logger.error("rolling back an abandoned transaction failed: %s", error)
