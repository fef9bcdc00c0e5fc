"""The reply text of a commit that failed to store says what a restart does, truthfully."""

from __future__ import annotations

import errno

from meta.errors import TransactionError
from meta.tx.commit_failure import commit_failure_text
from meta.tx.journal import JournalError
from tests.tx.conftest import LOCAL, EventFiles, TxBroker, tx_config


def test_a_partition_failure_promises_completion_at_restart():
    text = commit_failure_text("TX:s:1", OSError("disk"))
    assert text.endswith("its commit record is on disk, so a broker restart completes it.")


def test_a_journal_failure_does_not_promise_completion():
    text = commit_failure_text("TX:s:1", JournalError("no space"))
    assert "completes it" not in text
    assert "may not have reached the disk" in text


def test_a_commit_whose_journal_sync_fails_promises_no_completion(tmp_path):
    """Goal: a commit answered with an error because the journal's fsync failed (a full
    disk) does not claim that a restart completes it.

    Method: fail every fsync from the commit on; the journal's comes first.
    """
    files = EventFiles()
    broker = TxBroker(tx_config(tmp_path), files=files)
    broker.transactions.begin(LOCAL, "c1", 0)
    broker.put(LOCAL, [b"a", b"b"])
    broker.log(0)
    files.fsync_error = errno.ENOSPC
    done = broker.commit(LOCAL)
    assert isinstance(done.error, TransactionError)
    assert "may not have reached the disk" in str(done.error)
    assert "rolled back" in str(done.error)
