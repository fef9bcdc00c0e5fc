"""Recovery at start-up and checkpoints: a crash at each step of the commit protocol, the
batch checks of docs/formats.md section 6.1, prepared and heuristic branches, and replay
starting at the newest checkpoint (zk spec section 4.6, DECISIONS 11 and 17).

A crash is ``TxBroker.restart``: every descriptor is closed with no flush and no last
checkpoint, then a new store and transaction manager open the same directories. Lost page
cache is simulated by truncating files.
"""

from __future__ import annotations

import errno
import os
import zlib

import pytest
from twisted.internet.task import Clock

from meta.errors import StoreError, TransactionError, XAError
from meta.protocol.xa import XA_HEURCOM, XA_OK, XAER_NOTA
from meta.store.group_commit import SynchronousExecutor
from meta.store.manager import StoreManager
from meta.tx import checkpoint
from meta.tx.manager import TransactionManager
from meta.tx.records import (
    FILE_MAGIC_V1,
    HEURISTIC_NONE,
    AppendRecord,
    BatchLocation,
    CommitDataRecord,
    CommitRecord,
    PrepareRecord,
    encode,
)
from tests.store.conftest import ManualExecutor, PowerLossFiles, collect, record
from tests.tx.conftest import LOCAL, XID, Done, EventFiles, TxBroker, journal_records, tx_config

XID_OTHER = "XID:1:0c:0d:q1"


@pytest.fixture
def broker(tmp_path):
    return TxBroker(tx_config(tmp_path))


def committed(broker, key=LOCAL, payloads=(b"a", b"b", b"c"), partition=0):
    """Begin, put and commit ``key``; return its batch (the stored records joined)."""
    broker.transactions.begin(key, "c1", 0)
    records = broker.put(key, payloads, partition=partition)
    done = broker.commit(key)
    broker.run()
    assert done.ok
    return b"".join(records)


def prepared(broker, key=XID, payloads=(b"x1", b"x2")):
    broker.transactions.begin(key, None, 0)
    records = broker.put(key, payloads, session=None)
    done = broker.prepare(key)
    broker.run()
    assert done.calls == [(XA_OK, None)]
    return b"".join(records)


def committed_two_phase(broker):
    """Prepare ``XID`` and commit it two-phase: APPEND, PREPARE and COMMIT records."""
    batch = prepared(broker)
    done = broker.commit(XID, None, one_phase=False)
    broker.run()
    assert done.ok
    return batch


def first_location(broker, kind):
    """The journal location of the first record of class ``kind``."""
    return next(
        location
        for location, entry in journal_records(broker.journal_directory)
        if isinstance(entry, kind)
    )


def truncate_segment(broker, size, partition=0):
    os.truncate(broker.segment_path(partition), size)


def newest_checkpoint(broker):
    return checkpoint.read_latest(EventFiles(), broker.journal_directory)[1]


# -- open transactions -------------------------------------------------------------------


def test_an_in_flight_local_transaction_leaves_nothing_to_replay(broker):
    """Messages are journaled at PREPARE or COMMIT: a crash simply forgets an open one."""
    broker.transactions.begin(LOCAL, "c1", 0)
    broker.put(LOCAL, [b"a"])
    broker.end_of_batch()
    restarted = broker.restart()
    assert (restarted.report.records, restarted.report.rolled_back) == (0, 0)
    assert restarted.transactions.describe() == []


def test_an_in_flight_transaction_leaves_nothing_in_the_partition(broker):
    broker.transactions.begin(LOCAL, "c1", 0)
    broker.put(LOCAL, [b"a"])
    broker.log(0)
    broker.end_of_batch()
    restarted = broker.restart()
    assert (restarted.log(0).max_offset, restarted.segment_bytes(0)) == (0, b"")


def test_an_unprepared_xa_branch_is_gone_after_a_restart(broker):
    broker.transactions.begin(XID, None, 0)
    broker.put(XID, [b"a"], session=None)
    broker.end_of_batch()
    restarted = broker.restart()
    assert (restarted.report.rolled_back, restarted.transactions.recover_keys(None)) == (0, [])


def test_a_rolled_back_in_flight_transaction_is_not_rolled_back_again(broker):
    broker.transactions.begin(LOCAL, "c1", 0)
    broker.put(LOCAL, [b"a"])
    broker.end_of_batch()
    assert broker.restart().restart().report.rolled_back == 0


def test_a_prepared_branch_is_restored_and_recover_lists_it(broker):
    prepared(broker)
    restarted = broker.restart()
    assert restarted.report.prepared == 1
    assert restarted.transactions.recover_keys("q1") == [XID]


def test_a_restored_prepared_branch_is_still_invisible(broker):
    prepared(broker)
    broker.log(0)
    assert broker.restart().log(0).max_offset == 0


def test_a_restored_prepared_branch_commits_two_phase_exactly_once(broker):
    """Goal: a branch prepared before a crash is committed once by COMMIT_TWO_PHASE after it.

    Method: prepare, crash, commit after the restart, crash again: the partition holds the
    batch once and RECOVER no longer lists the branch.
    """
    batch = prepared(broker)
    restarted = broker.restart()
    assert restarted.commit(XID, None, one_phase=False).ok
    again = restarted.restart()
    assert again.segment_bytes(0) == batch
    assert again.transactions.recover_keys(None) == []


def test_a_restored_branch_commits_into_the_live_log_so_later_puts_follow_it(broker):
    """DECISIONS 17: the restored branch's batch is readable at once and a later put gets
    the offset after it (Java overwrote it through a stale copy of the partition)."""
    batch = prepared(broker)
    restarted = broker.restart()
    restarted.commit(XID, None, one_phase=False)
    log = restarted.log(0)
    later = collect(log.append(record(b"later")))
    assert (later, log.max_offset) == ([len(batch)], len(batch) + len(record(b"later")))
    assert restarted.segment_bytes(0) == batch + record(b"later")


def test_a_restored_prepared_branch_can_be_rolled_back(broker):
    prepared(broker)
    restarted = broker.restart()
    assert restarted.rollback(XID, None).ok
    again = restarted.restart()
    assert (again.transactions.recover_keys(None), again.log(0).max_offset) == ([], 0)


def test_a_prepared_branch_survives_two_restarts(broker):
    prepared(broker)
    assert broker.restart().restart().transactions.recover_keys(None) == [XID]


# -- commits and their batches -------------------------------------------------------------


def test_a_commit_whose_journal_fsync_never_ran_is_completed_at_restart(tmp_path):
    """Goal: a crash after the COMMIT record was written but before its batch was appends
    the batch at restart.

    Method: hold the flush batches (ManualExecutor), commit, crash with the journal fsync
    still queued, restart.
    """
    broker = TxBroker(tx_config(tmp_path), manual=True)
    broker.transactions.begin(LOCAL, "c1", 0)
    records = broker.put(LOCAL, [b"a", b"b"])
    broker.log(0)
    broker.run()
    broker.commit(LOCAL)
    assert broker.segment_bytes(0) == b""
    restarted = broker.restart()
    assert restarted.segment_bytes(0) == b"".join(records)
    assert restarted.report.batches_appended == 1


def test_a_commit_found_in_place_survives_a_power_loss_after_the_restart(tmp_path):
    """Goal: a committed batch that a crash left written but never fsynced, which recovery
    then finds in place, survives a power loss soon after the restart.

    Method: hold the flush batches, commit, run only the journal's fsync (the batch is then
    written, its partition's fsync still queued), crash; start again (the journal lets go of
    the COMMIT record once recovery is done); lose power; start again and read.
    """
    files = PowerLossFiles()
    config = tx_config(tmp_path)
    broker = TxBroker(config, files=files, manual=True)
    broker.transactions.begin(LOCAL, "c1", 0)
    records = broker.put(LOCAL, [b"a", b"b"])
    broker.log(0)
    broker.run()
    broker.commit(LOCAL)
    broker.executor.run_next()  # the journal's fsync; the batch is written after it
    assert broker.segment_bytes(0) == b"".join(records)
    broker.crash()
    restarted = TxBroker(config, files=files, manual=True)
    assert restarted.report.batches_appended == 0
    restarted.crash()
    files.power_loss()
    assert TxBroker(config, files=files, manual=True).segment_bytes(0) == b"".join(records)


def test_a_failed_fsync_of_a_batch_found_in_place_fails_recovery(tmp_path):
    """Goal: recovery does not let go of a COMMIT record whose batch it could not fsync.

    Method: as above, but every segment fsync fails at the restart: opening fails with
    ``StoreError`` and the journal still holds the COMMIT record.
    """
    files = PowerLossFiles()
    config = tx_config(tmp_path)
    broker = TxBroker(config, files=files, manual=True)
    broker.transactions.begin(LOCAL, "c1", 0)
    broker.put(LOCAL, [b"a"])
    broker.log(0)
    broker.run()
    broker.commit(LOCAL)
    broker.executor.run_next()
    broker.crash()
    files.fsync_error, files.fsync_error_only = errno.EIO, "test-0"
    with pytest.raises(AssertionError, match="recovery could not make committed batches"):
        TxBroker(config, files=files, manual=True)
    kinds = [type(entry).__name__ for _location, entry in journal_records(broker.journal_directory)]
    assert "CommitDataRecord" in kinds


def test_a_commit_whose_batch_is_missing_is_appended_at_restart(broker):
    batch = committed(broker)
    truncate_segment(broker, 0)
    restarted = broker.restart()
    assert restarted.segment_bytes(0) == batch
    assert restarted.log(0).max_offset == len(batch)


def test_a_missing_batch_is_appended_exactly_once_over_two_restarts(broker):
    batch = committed(broker)
    truncate_segment(broker, 0)
    again = broker.restart().restart()
    assert again.segment_bytes(0) == batch and again.report.batches_appended == 0


def test_a_partly_present_batch_gets_only_its_missing_suffix(broker):
    """Goal: a batch torn at a record boundary is completed, not appended whole again.

    Method: commit three records, cut the segment after the first one, restart.
    """
    batch = committed(broker, payloads=(b"a", b"bb", b"ccc"))
    truncate_segment(broker, len(record(b"a")))
    restarted = broker.restart()
    assert restarted.segment_bytes(0) == batch
    assert restarted.report.batches_appended == 1


def test_a_batch_torn_inside_a_record_gets_only_its_missing_suffix(broker):
    batch = committed(broker, payloads=(b"a", b"bb", b"ccc"))
    truncate_segment(broker, len(record(b"a")) + 7)
    assert broker.restart().segment_bytes(0) == batch


def test_a_fully_present_batch_is_not_appended_again(broker):
    batch = committed(broker)
    restarted = broker.restart()
    assert (restarted.report.commits_checked, restarted.report.batches_appended) == (1, 0)
    assert restarted.segment_bytes(0) == batch


def test_only_the_partition_missing_its_batch_gets_it(broker):
    broker.transactions.begin(LOCAL, "c1", 0)
    first = b"".join(broker.put(LOCAL, [b"a"], partition=0))
    second = b"".join(broker.put(LOCAL, [b"b"], partition=1))
    assert broker.commit(LOCAL).ok
    truncate_segment(broker, 0, partition=1)
    restarted = broker.restart()
    assert (restarted.segment_bytes(0), restarted.segment_bytes(1)) == (first, second)
    assert restarted.report.batches_appended == 1


def test_missing_batches_of_two_commits_are_appended_in_commit_order(broker):
    first = committed(broker, "TX:s:1", (b"first",))
    second = committed(broker, "TX:s:2", (b"second",))
    truncate_segment(broker, 0)
    assert broker.restart().segment_bytes(0) == first + second


def test_a_batch_whose_offset_holds_other_bytes_is_appended_at_the_end(broker):
    batch = committed(broker, payloads=(b"a",))
    truncate_segment(broker, 0)
    with open(broker.segment_path(0), "wb") as file:
        file.write(record(b"z", msg_id=99))
    restarted = broker.restart()
    assert restarted.segment_bytes(0) == record(b"z", msg_id=99) + batch


def test_a_torn_commit_record_leaves_the_local_transaction_uncommitted(broker):
    """Goal: a commit whose record did not fully reach the journal is not committed.

    Method: commit a local transaction (one COMMIT_DATA record), then cut that record in
    half and the batch off the segment (a crash while both were being written), restart.
    """
    committed(broker)
    location = first_location(broker, CommitDataRecord)
    os.truncate(os.path.join(broker.journal_directory, "redo.1"), location.position + 10)
    truncate_segment(broker, 0)
    restarted = broker.restart()
    assert (restarted.report.commits_checked, restarted.segment_bytes(0)) == (0, b"")
    assert restarted.report.bytes_cut > 0


def test_a_torn_two_phase_commit_record_leaves_the_branch_prepared(broker):
    """Goal: a COMMIT record cut short after PREPARE leaves the branch prepared (RECOVER
    lists it), with nothing of its batch in the partition."""
    committed_two_phase(broker)
    location = first_location(broker, CommitRecord)
    os.truncate(os.path.join(broker.journal_directory, "redo.1"), location.position + 10)
    truncate_segment(broker, 0)
    restarted = broker.restart()
    assert restarted.transactions.recover_keys(None) == [XID]
    assert (restarted.report.bytes_cut > 0, restarted.segment_bytes(0)) == (True, b"")


def test_a_commit_whose_appends_precede_the_checkpoint_is_stepped_over(broker):
    """Goal: DECISIONS 11 — replay steps over a COMMIT of a transaction it never saw, and
    does not check or append its batch.

    Method: commit two-phase, then write a checkpoint naming the COMMIT record itself (its
    APPEND records now lie before the checkpoint), cut the batch off the segment, restart.
    """
    committed_two_phase(broker)
    location = first_location(broker, CommitRecord)
    broker.crash()
    checkpoint.write_checkpoint(EventFiles(), broker.journal_directory, 99, location, keep=3)
    truncate_segment(broker, 0)
    restarted = TxBroker(broker.config)
    assert (restarted.report.start, restarted.report.commits_checked) == (location, 0)
    assert restarted.segment_bytes(0) == b""


def test_records_after_a_stepped_over_commit_are_still_replayed(broker):
    committed_two_phase(broker)
    prepared(broker, key=XID_OTHER)
    location = first_location(broker, CommitRecord)
    broker.crash()
    checkpoint.write_checkpoint(EventFiles(), broker.journal_directory, 99, location, keep=3)
    restarted = TxBroker(broker.config)
    assert restarted.transactions.recover_keys(None) == [XID_OTHER]


def test_an_xa_branch_committed_in_one_phase_is_completed_once_after_a_crash(broker):
    """Goal: an XA branch committed without PREPARE is journaled as one COMMIT_DATA record
    like a local transaction: its batch, lost from the partition, comes back once, and
    RECOVER does not list the branch."""
    broker.transactions.begin(XID, None, 0)
    batch = b"".join(broker.put(XID, [b"x1", b"x2"], session=None))
    assert broker.commit(XID, None, one_phase=True).ok
    kinds = [type(entry) for _, entry in journal_records(broker.journal_directory)]
    assert kinds == [CommitDataRecord]
    truncate_segment(broker, 0)
    restarted = broker.restart()
    assert (restarted.segment_bytes(0), restarted.report.batches_appended) == (batch, 1)
    assert restarted.transactions.recover_keys(None) == []
    assert restarted.restart().segment_bytes(0) == batch


def test_a_local_commit_in_a_version_1_journal_is_completed_after_an_upgrade(tmp_path):
    """Goal: a journal written before COMMIT_DATA existed (APPEND records, then a COMMIT
    naming the batch) is still recovered: the committed batch missing from the partition is
    appended once, and new transactions go to a new file.

    Method: write such a journal by hand (a local commit whose batch never reached the
    segment), start a broker on it, commit another transaction, restart again.
    """
    config = tx_config(tmp_path)
    first = TxBroker(config)
    first.log(0)
    first.crash()
    batch = record(b"a", msg_id=7) + record(b"b", msg_id=8)
    location = BatchLocation("test", 0, 0, len(batch), zlib.crc32(batch) & 0x7FFFFFFF)
    directory = first.journal_directory
    for name in os.listdir(directory):
        os.remove(os.path.join(directory, name))  # no checkpoint: replay the whole file
    with open(os.path.join(directory, "redo.1"), "wb") as file:
        file.write(FILE_MAGIC_V1)
        file.write(encode(AppendRecord(LOCAL, "test", 0, batch)))
        file.write(encode(CommitRecord(LOCAL, False, HEURISTIC_NONE, (location,))))
    upgraded = TxBroker(config)
    assert (upgraded.report.batches_appended, upgraded.segment_bytes(0)) == (1, batch)
    later = committed(upgraded, key="TX:s:2", payloads=(b"c",))
    assert upgraded.journal.file_numbers[-1] == 2
    assert upgraded.restart().segment_bytes(0) == batch + later


# -- heuristic outcomes ------------------------------------------------------------------


def heuristic(broker, key, commit):
    done = Done()
    broker.transactions.heuristic(key, commit, done)
    broker.run()
    assert done.ok
    return done


def test_a_heuristic_commit_is_listed_by_recover_after_a_restart(broker):
    prepared(broker)
    heuristic(broker, XID, True)
    restarted = broker.restart()
    assert restarted.transactions.recover_keys(None) == [XID]
    assert restarted.report.heuristic == 1


def test_a_heuristic_commit_still_answers_xa_heurcom_after_a_restart(broker):
    prepared(broker)
    heuristic(broker, XID, True)
    restarted = broker.restart()
    with pytest.raises(XAError) as caught:
        restarted.commit(XID, None, one_phase=False)
    assert caught.value.error_code == XA_HEURCOM


def test_a_heuristic_commit_stores_its_batch_once_over_restarts(broker):
    batch = prepared(broker)
    heuristic(broker, XID, True)
    assert broker.restart().restart().segment_bytes(0) == batch


def test_a_forgotten_heuristic_outcome_stays_forgotten_after_a_restart(broker):
    prepared(broker)
    heuristic(broker, XID, False)
    done = Done()
    broker.transactions.forget(XID, done)
    restarted = broker.restart()
    assert done.ok and restarted.transactions.recover_keys(None) == []
    with pytest.raises(XAError) as caught:
        restarted.commit(XID, None, one_phase=False)
    assert caught.value.error_code == XAER_NOTA


# -- journal damage ----------------------------------------------------------------------


def test_a_garbage_journal_tail_is_cut_and_reported(broker):
    prepared(broker)
    broker.crash()
    with open(os.path.join(broker.journal_directory, "redo.1"), "ab") as file:
        file.write(b"\x00\x00\x00\x07garbage-garbage")
    restarted = TxBroker(broker.config)
    assert restarted.report.bytes_cut == 19
    assert restarted.transactions.recover_keys(None) == [XID]


def test_a_java_journal_stops_the_start_with_an_error_naming_the_file(tmp_path):
    config = tx_config(tmp_path)
    directory = os.path.join(config.data_log_path, "transactions")
    os.makedirs(directory)
    with open(os.path.join(directory, "redo.1"), "wb") as file:
        file.write(bytes.fromhex("0000000c 0802 1208 0a06 54583a733a31"))
    clock = Clock()
    store = StoreManager(config, clock, executor=SynchronousExecutor())
    store.load()
    opened = collect(TransactionManager(config, clock, store).open())
    assert opened[0].check(StoreError) and "redo.1" in opened[0].getErrorMessage()


# -- checkpoints -------------------------------------------------------------------------


def test_open_writes_a_checkpoint_at_the_journal_end(broker):
    assert newest_checkpoint(broker) == broker.journal.end


def test_a_clean_close_leaves_nothing_to_replay(broker):
    committed(broker)
    broker.close()
    restarted = TxBroker(broker.config)
    assert (restarted.report.records, restarted.report.commits_checked) == (0, 0)


def test_the_checkpoint_timer_names_the_first_record_of_the_oldest_open_transaction(
    tmp_path,
):
    broker = TxBroker(tx_config(tmp_path, checkpoint_interval_ms=1000))
    committed(broker, "TX:s:1")
    prepared(broker)
    committed(broker, "TX:s:3")
    location = broker.transactions.oldest_location()
    broker.clock.advance(1)
    assert newest_checkpoint(broker) == location


def test_a_checkpoint_is_not_written_when_it_would_not_move(tmp_path):
    broker = TxBroker(tx_config(tmp_path, checkpoint_interval_ms=1000))
    written = broker.tx.checkpoints_written
    broker.clock.advance(5)
    assert broker.tx.checkpoints_written == written


def test_replay_starts_at_the_last_checkpoint_and_old_redo_files_are_gone(tmp_path):
    """Goal: with a short checkpoint interval, a restart replays only what followed the
    last checkpoint, and the redo files of finished transactions are deleted.

    Method: many committed transactions over small redo files, a checkpoint tick after
    each, then one open transaction after the last tick; crash and restart.
    """
    config = tx_config(
        tmp_path, checkpoint_interval_ms=1000, tx_journal_file_bytes=200, max_checkpoints=2
    )
    broker = TxBroker(config)
    for number in range(1, 31):
        committed(broker, f"TX:s:{number}", (b"m%d" % number,))
        broker.clock.advance(1)
    last = newest_checkpoint(broker)
    prepared(broker)
    restarted = broker.restart()
    names = sorted(os.listdir(restarted.journal_directory))
    assert (restarted.report.start, restarted.report.records) == (last, 2)  # APPEND, PREPARE
    assert len([name for name in names if name.startswith("redo.")]) == 1
    assert len([name for name in names if name.startswith("checkpoint.")]) == 2


def test_the_broker_unlinks_unused_journal_files_on_the_stores_background_executor(tmp_path):
    """Goal: the transaction manager hands its journal the store's background executor, so
    a full journal file is unlinked off the reactor thread.

    Method: small redo files, the store's background executor held (ManualExecutor); commit
    until the journal rolled: the unused files stay until the background jobs run.
    """
    background = ManualExecutor()
    config = tx_config(tmp_path, tx_journal_file_bytes=200)
    broker = TxBroker(config, background=background)
    for number in range(1, 12):
        committed(broker, f"TX:s:{number}", (b"m",))
    older = range(1, broker.journal.file_numbers[-1])
    paths = [os.path.join(broker.journal_directory, f"redo.{number}") for number in older]
    assert paths and all(os.path.exists(path) for path in paths)
    background.run_all()
    assert not any(os.path.exists(path) for path in paths)


def test_an_open_transaction_does_not_hold_the_checkpoint_back(tmp_path):
    """It has no journal record yet, so replay never needs to start before it."""
    config = tx_config(tmp_path, checkpoint_interval_ms=1000, tx_journal_file_bytes=200)
    broker = TxBroker(config)
    broker.transactions.begin(LOCAL, "c1", 0)
    broker.put(LOCAL, [b"open"])
    for number in range(2, 12):
        committed(broker, f"TX:s:{number}", (b"m",))
        broker.clock.advance(1)
    assert newest_checkpoint(broker) == broker.journal.end


def test_a_checkpoint_never_passes_a_prepared_branch(tmp_path):
    config = tx_config(tmp_path, checkpoint_interval_ms=1000, tx_journal_file_bytes=200)
    broker = TxBroker(config)
    prepared(broker)
    for number in range(2, 12):
        committed(broker, f"TX:s:{number}", (b"m",))
        broker.clock.advance(1)
    restarted = broker.restart()
    assert restarted.transactions.recover_keys(None) == [XID]
    assert restarted.commit(XID, None, one_phase=False).ok


def test_a_prepare_record_is_in_the_journal_before_xa_ok(tmp_path):
    broker = TxBroker(tx_config(tmp_path), manual=True)
    broker.transactions.begin(XID, None, 0)
    broker.put(XID, [b"a"], session=None)
    done = broker.prepare(XID)
    broker.run()
    entries = [entry for _, entry in journal_records(broker.journal_directory)]
    assert done.calls == [(XA_OK, None)] and PrepareRecord(XID) in entries


def test_replay_deletes_redo_files_below_the_checkpoint(tmp_path):
    config = tx_config(tmp_path, checkpoint_interval_ms=1000, tx_journal_file_bytes=100)
    broker = TxBroker(config)
    for number in range(1, 6):
        committed(broker, f"TX:s:{number}", (b"m",))
    broker.clock.advance(1)
    broker.crash()
    last = checkpoint.read_latest(EventFiles(), broker.journal_directory)[1]
    # An old file an earlier crash left behind (its transactions long finished).
    with open(os.path.join(broker.journal_directory, "redo.1"), "wb") as file:
        file.write(b"metaqtx\x01")
    restarted = TxBroker(broker.config)
    assert restarted.journal.file_numbers == [last.number]
    assert not os.path.exists(os.path.join(broker.journal_directory, "redo.1"))


# -- more crash points -------------------------------------------------------------------


def test_a_commit_that_failed_to_store_is_completed_by_the_restart(tmp_path):
    """Goal: "a broker restart completes it" — the promise of a commit answered with an
    error (plain text for a local transaction, XAER_RMFAIL for a branch) because its
    partition failed.

    Method: fail the segment fsync during the commit, lose the unsynced batch (truncate),
    restart.
    """
    files = EventFiles()
    broker = TxBroker(tx_config(tmp_path), files=files)
    broker.transactions.begin(LOCAL, "c1", 0)
    records = broker.put(LOCAL, [b"a", b"b"])
    broker.log(0)
    files.fsync_error, files.fsync_error_only = 5, "test-0"
    done = broker.commit(LOCAL)
    assert isinstance(done.error, TransactionError)
    assert "a broker restart completes it" in str(done.error)
    truncate_segment(broker, 0)
    assert broker.restart().segment_bytes(0) == b"".join(records)


def test_a_batch_of_a_partition_whose_directory_is_gone_is_appended(broker):
    batch = committed(broker, partition=3)
    broker.crash()
    directory = os.path.dirname(broker.segment_path(3))
    for name in os.listdir(directory):
        os.remove(os.path.join(directory, name))
    os.rmdir(directory)
    assert TxBroker(broker.config).segment_bytes(3) == batch


def test_a_heuristic_outcome_restored_at_start_up_can_be_forgotten(broker):
    prepared(broker)
    heuristic(broker, XID, True)
    restarted = broker.restart()
    done = Done()
    restarted.transactions.forget(XID, done)
    assert done.ok and restarted.restart().transactions.recover_keys(None) == []


def test_a_batch_appended_at_the_end_is_not_appended_again_after_a_crash_in_recovery(broker):
    """Goal: exactly once even when the broker crashes again right after recovery appended
    a batch somewhere else than its COMMIT record names, before the post-recovery checkpoint.

    Method: commit, replace the segment's bytes with another record (the batch must go at
    the end), restart; then crash and remove the checkpoint that restart wrote (the crash
    came before it), and restart again.
    """
    batch = committed(broker, payloads=(b"a",))
    truncate_segment(broker, 0)
    with open(broker.segment_path(0), "wb") as file:
        file.write(record(b"z", msg_id=99))
    restarted = broker.restart()
    assert restarted.segment_bytes(0) == record(b"z", msg_id=99) + batch
    restarted.crash()
    numbers = checkpoint.checkpoint_numbers(EventFiles(), restarted.journal_directory)
    os.remove(os.path.join(restarted.journal_directory, f"checkpoint.{numbers[-1]}"))
    again = TxBroker(restarted.config)
    assert again.segment_bytes(0) == record(b"z", msg_id=99) + batch


def test_batches_of_commits_begun_in_different_redo_files_keep_their_offsets(tmp_path):
    """Goal: two commits in flight at a crash get their batches back at the offsets their
    COMMIT records name (commit order), even when the later commit's transaction began in
    an older redo file (replay reads redo.1 before redo.2).

    Method: tiny redo files; branch 1 is prepared in redo.1, branch 2 in redo.2; commit 2
    then 1 with the flush batches held; crash before any batch is written.
    """
    broker = TxBroker(tx_config(tmp_path, tx_journal_file_bytes=40), manual=True)
    keys = ("XID:1:01:01:q", "XID:1:02:02:q")
    batches = []
    for key, payload in zip(keys, (b"one", b"two-two"), strict=True):
        broker.transactions.begin(key, None, 0)
        batches.append(b"".join(broker.put(key, [payload], session=None)))
        broker.prepare(key)
        broker.run()
    first, second = batches
    assert broker.journal.file_numbers == [1, 2]
    broker.log(0)
    broker.run()
    broker.commit(keys[1], None, one_phase=False)
    broker.commit(keys[0], None, one_phase=False)
    restarted = broker.restart()
    assert restarted.segment_bytes(0) == second + first
