"""``TransactionManager``: the journal, the open transactions, recovery and checkpoints.

What lives here: the owner of ``<dataLogPath>/transactions`` for one broker. ``open`` replays
the journal from the newest checkpoint (``meta.tx.recovery``), writes a fresh checkpoint, and
starts the ``checkpointInterval`` timer; ``checkpoint`` writes ``checkpoint.<N+1>`` naming the
first record of the oldest live transaction, or the end of the journal when none is live
(Java writes none then, so its replay grows without bound), and only when it moved forward;
``close`` stops the timer and writes a last checkpoint.

Invariants: replay never starts after a record some live transaction still needs (the
checkpoint is at or before every live transaction's first record); at most ``maxCheckpoints``
checkpoint files exist.

Thread affinity: reactor thread only. A checkpoint (a few dozen bytes, two fsyncs, at most one
per interval) is written on the reactor thread, so it can never race the journal it names.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from twisted.internet import defer
from twisted.internet.task import LoopingCall

from meta.tx import checkpoint
from meta.tx.journal import Journal
from meta.tx.journal_location import JournalLocation
from meta.tx.recovery import RecoveryReport, recover
from meta.tx.transaction_store import TransactionStore

logger = logging.getLogger("meta.tx")


class TransactionManager:
    """Transactions of one broker.

    Attributes:
        transactions: the ``TransactionStore`` the handlers use.
        journal: the journal.
        report: what the last ``open`` recovered.
        checkpoints_written: checkpoints written since ``open``.
    """

    def __init__(self, config: Any, reactor: Any, store: Any) -> None:
        self._config = config
        self._reactor = reactor
        self._files = store.files
        self.directory = os.path.join(config.data_log_path, "transactions")
        self.journal = Journal(
            self.directory,
            files=store.files,
            flusher=store.flusher,
            reactor=reactor,
            file_bytes_max=config.tx_journal_file_bytes,
            flush_mode=config.journal_flush_mode,
            background=store.background,
        )
        self.transactions = TransactionStore(config, reactor, store, self.journal)
        self._store = store
        self._checkpoint_number = 0
        self._last_checkpoint: JournalLocation | None = None
        self._timer: LoopingCall | None = None
        self.report = RecoveryReport()
        self.checkpoints_written = 0

    @defer.inlineCallbacks
    def open(self):
        """Recover, checkpoint, and start the checkpoint timer (Deferred)."""
        self.journal.make_directory()
        number, start = checkpoint.read_latest(self._files, self.directory)
        self._checkpoint_number = number
        if start is not None:
            logger.info(
                "replaying the transaction journal from redo.%d position %d (checkpoint.%d)",
                start.number,
                start.position,
                number,
            )
        else:
            logger.info("replaying the transaction journal from its beginning (no checkpoint)")
        self.report = yield recover(self.transactions, self._store, start)
        report = self.report
        logger.info(
            "transaction journal replayed: %d records, %d commits checked, %d batches appended, "
            "%d transactions rolled back, %d prepared XA branches restored, %d heuristic "
            "outcomes kept, %d damaged bytes cut",
            report.records,
            report.commits_checked,
            report.batches_appended,
            report.rolled_back,
            report.prepared,
            report.heuristic,
            report.bytes_cut,
        )
        self.checkpoint()
        self._timer = LoopingCall(self.checkpoint)
        self._timer.clock = self._reactor
        self._timer.start(self._config.checkpoint_interval_ms / 1000, now=False)

    def checkpoint(self) -> bool:
        """Write a checkpoint if replay could now start later; return whether one was written."""
        self.journal.write_staged()
        if self.journal.failed is not None:
            return False
        location = self.transactions.oldest_location() or self.journal.end
        if self._last_checkpoint is not None and location <= self._last_checkpoint:
            return False
        try:
            checkpoint.write_checkpoint(
                self._files,
                self.directory,
                self._checkpoint_number + 1,
                location,
                self._config.max_checkpoints,
            )
        except OSError as error:
            logger.error("could not write a transaction checkpoint: %s", error)
            return False
        self._checkpoint_number += 1
        self._last_checkpoint = location
        self.checkpoints_written += 1
        logger.debug(
            "checkpoint.%d: redo.%d position %d",
            self._checkpoint_number,
            location.number,
            location.position,
        )
        return True

    def close(self) -> None:
        """Stop the timer and timeouts and write a last checkpoint (the store still open)."""
        if self._timer is not None and self._timer.running:
            self._timer.stop()
        self.transactions.close()
        self.checkpoint()

    def close_files(self) -> None:
        """Close the journal files (once the store's flusher is idle)."""
        self.journal.close()
