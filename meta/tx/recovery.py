"""Recovery of transactions at start-up: replay the journal, finish commits, restore branches.

What lives here: ``recover`` (Java's, with compatibility.md's changes), run once by the
``TransactionManager`` after the partitions were loaded and before the broker listens:

1. Replay the journal from the newest checkpoint (``Journal.replay`` truncates a damaged or
   torn tail). APPEND records rebuild each open transaction; PREPARE marks an XA branch
   prepared; COMMIT and ROLLBACK finish it; COMMIT_DATA is a whole committed transaction; a
   heuristic outcome is kept until FORGET. A COMMIT of a transaction whose records precede
   the checkpoint was already fully stored (a committing transaction pins the checkpoint),
   so it is skipped, record and all.
2. For each replayed COMMIT, check every batch at the location the record names: the CRC of
   the bytes there matches, so it is stored; the partition ends at or before the location,
   so the whole batch is appended; the partition holds a prefix of the batch (a crash tore the
   append), so the rest is appended. Anything else is logged and the batch is appended at the
   end: no committed message is lost. Appends go to the live partition log (docs/compatibility.md).
   Then every partition is flushed: a batch found in place may be in the page cache only.
3. Roll back every transaction still open that was not prepared (a ROLLBACK record each),
   and restore each prepared XA branch so that RECOVER lists it.

Thread affinity: reactor thread only (partition appends complete through the flusher).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from twisted.internet import defer

from meta.errors import MetaError, StoreError
from meta.protocol.crc import crc32
from meta.protocol.message import CHECKSUM_MASK
from meta.tx import states
from meta.tx.journal_location import JournalLocation
from meta.tx.records import (
    HEURISTIC_NONE,
    AppendRecord,
    BatchLocation,
    CommitDataRecord,
    CommitRecord,
    ForgetRecord,
    PrepareRecord,
    RollbackRecord,
)
from meta.tx.transaction_store import _HEURISTIC_STATES, Transaction, TransactionStore

logger = logging.getLogger("meta.tx")


@dataclass
class RecoveryReport:
    """What a recovery did; logged, and kept by the manager for stats and tests."""

    start: JournalLocation | None = None
    records: int = 0
    commits_checked: int = 0
    batches_appended: int = 0
    rolled_back: int = 0
    prepared: int = 0
    heuristic: int = 0
    bytes_cut: int = 0


class _Replay:
    """The state rebuilt from the journal records.

    ``commits`` holds ``[record, transaction]`` in journal order. A later COMMIT record of a
    transaction already committed is a relocation written by an earlier recovery (its batch
    had to go elsewhere than first recorded): its locations replace the first record's.
    """

    def __init__(self) -> None:
        self.open: dict[str, Transaction] = {}
        self.commits: list[list] = []
        self.latest_commit: dict[str, int] = {}
        self.heuristic: dict[str, Transaction] = {}

    def apply(self, location: JournalLocation, record) -> None:
        key = record.key
        if isinstance(record, CommitDataRecord):
            transaction = Transaction(key, None, states.IN_USE)
            transaction.location = location
            locations = []
            for batch in record.batches:
                data = batch.data
                transaction.batches[(batch.topic, batch.partition)] = [data]
                transaction.byte_count += len(data)
                locations.append(
                    BatchLocation(batch.topic, batch.partition, batch.offset, len(data), _crc(data))
                )
            self.latest_commit[key] = len(self.commits)
            commit = CommitRecord(key, False, HEURISTIC_NONE, tuple(locations))
            self.commits.append([commit, transaction])
        elif isinstance(record, AppendRecord):
            transaction = self.open.get(key)
            if transaction is None:
                transaction = self.open[key] = Transaction(key, None, states.IN_USE)
                transaction.location = location
            transaction.batches.setdefault((record.topic, record.partition), []).append(
                record.record
            )
            transaction.byte_count += len(record.record)
        elif isinstance(record, PrepareRecord):
            if key in self.open:
                self.open[key].state = states.PREPARED
        elif isinstance(record, CommitRecord | RollbackRecord):
            transaction = self.open.pop(key, None)
            if isinstance(record, CommitRecord):
                if transaction is not None:
                    self.latest_commit[key] = len(self.commits)
                    self.commits.append([record, transaction])
                elif key in self.latest_commit:
                    entry = self.commits[self.latest_commit[key]]
                    entry[0] = _relocated(entry[0], record)
                    return
            if record.outcome != HEURISTIC_NONE:
                kept = Transaction(key, None, _HEURISTIC_STATES[record.outcome])
                kept.location = transaction.location if transaction is not None else location
                self.heuristic[key] = kept
        elif isinstance(record, ForgetRecord):
            self.heuristic.pop(key, None)


def _relocated(record: CommitRecord, relocation: CommitRecord) -> CommitRecord:
    moved = {(batch.topic, batch.partition): batch for batch in relocation.batches}
    batches = tuple(moved.get((b.topic, b.partition), b) for b in record.batches)
    return CommitRecord(record.key, record.was_prepared, record.outcome, batches)


@defer.inlineCallbacks
def recover(transactions: TransactionStore, store, start: JournalLocation | None):
    """Replay the journal into ``transactions``; return a ``RecoveryReport`` (Deferred).

    Raises (through the Deferred):
        StoreError: the journal cannot be read, or a committed batch cannot be stored.
    """
    journal = transactions.journal
    report = RecoveryReport(start=start)
    replay = _Replay()
    for location, record in journal.replay(start):
        replay.apply(location, record)
        report.records += 1
    journal.start()
    report.bytes_cut = journal.bytes_cut
    report.commits_checked = len(replay.commits)
    yield _finish_commits(journal, store, replay.commits, report)
    for transaction in replay.open.values():
        if transaction.is_xa and transaction.state == states.PREPARED:
            transactions.restore(transaction)
            report.prepared += 1
        else:
            record = RollbackRecord(transaction.key, False, HEURISTIC_NONE)
            journal.append(record, transaction.location.number)
            report.rolled_back += 1
    for transaction in replay.heuristic.values():
        transactions.restore(transaction)
        report.heuristic += 1
    journal.sweep()
    return report


@defer.inlineCallbacks
def _finish_commits(journal, store, commits: list, report: RecoveryReport):
    """Check every committed batch, per partition in offset order, and append what is missing.

    A batch that cannot go at its recorded offset gets a relocation record (fsynced in mode 1)
    before it is appended, so a crash during recovery never appends it twice. Every dirty
    partition, those holding batches found in place included, is flushed before the journal
    files that named the batches may be deleted.

    Raises (through the Deferred):
        StoreError: a batch cannot be stored, or the flush of a partition holding one failed.
    """
    checks = [
        (b.topic, b.partition, b.offset, record, t, b)
        for record, t in commits
        for b in record.batches
    ]
    checks.sort(key=lambda check: check[:3])
    for _topic, _partition, _offset, record, transaction, batch in checks:
        # One at a time: the next check reads what this append wrote.
        missing = _missing(store, record.key, batch, transaction)
        if missing is None:
            continue
        log, data, relocate = missing
        try:
            if relocate:
                moved = BatchLocation(
                    log.topic, log.partition, log.next_offset, len(data), _crc(data)
                )
                relocation = CommitRecord(record.key, record.was_prepared, record.outcome, (moved,))
                journal.append(relocation, transaction.location.number)
                yield _synced(journal)
            yield log.append(data)
        except MetaError as error:
            raise StoreError(
                f"recovery could not store the batch of {record.key} in {log.name}: {error}"
            ) from None
        report.batches_appended += 1
    # The batches found in place may never have been fsynced (a crash leaves written bytes
    # in the page cache): make them durable, with those appended, before the sweep or a
    # checkpoint lets go of the records naming them.
    yield store.flush_all()
    for log in {store.get(check[0], check[1]) for check in checks} - {None}:
        if log.failed is not None:
            raise StoreError(f"recovery could not make committed batches durable: {log.failed}")


def _synced(journal) -> defer.Deferred:
    synced: defer.Deferred = defer.Deferred()
    journal.sync(lambda error: synced.callback(None) if error is None else synced.errback(error))
    return synced


def _missing(store, key: str, batch: BatchLocation, transaction: Transaction):
    """What of one committed batch must be appended: None, or (log, bytes, relocate).

    ``relocate`` is False when the bytes go exactly where the COMMIT record says.
    """
    data = b"".join(transaction.batches.get((batch.topic, batch.partition), ()))
    name = f"{batch.topic}-{batch.partition}"
    if len(data) != batch.length or _crc(data) != batch.crc:
        logger.error(
            "commit of %s: the journaled messages of %s do not match the commit "
            "record's length/CRC; using the journaled messages",
            key,
            name,
        )
    try:
        log = store.get(batch.topic, batch.partition) or store.get_or_create(
            batch.topic, batch.partition
        )
    except MetaError as error:
        raise StoreError(f"commit of {key}: cannot open partition {name}: {error}") from None
    end = log.written_end
    if batch.offset < log.min_offset:
        logger.warning(
            "commit of %s: offset %d of %s was already deleted by retention; not checked",
            key,
            batch.offset,
            name,
        )
        return None
    stored = _read(log, batch.offset, min(batch.length, max(0, end - batch.offset)))
    if len(stored) == batch.length and _crc(stored) == batch.crc:
        return None
    if end == batch.offset + len(stored) and data.startswith(stored):
        if len(stored) == len(data):
            return None
        if stored:
            logger.warning(
                "commit of %s: %d of %d bytes of its batch are in %s at %d; appending the rest",
                key,
                len(stored),
                len(data),
                name,
                batch.offset,
            )
        return log, data[len(stored) :], False
    logger.error(
        "commit of %s: %s %s offset %d; appending the batch at its end (offset %d)",
        key,
        name,
        "ends before" if end < batch.offset else "holds other bytes at",
        batch.offset,
        end,
    )
    return log, data, True


def _read(log, offset: int, length: int) -> bytes:
    parts = []
    while length > 0:
        found = log.slice(offset, length)
        if found.kind != "data" or found.length == 0:
            break
        chunk = log.read(found)
        parts.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(parts)


def _crc(data: bytes) -> int:
    return crc32(data) & CHECKSUM_MASK
