"""TransactionStore on a real StoreManager: visibility, the commit protocol, ordering,
timeouts, sessions, RECOVER, heuristic outcomes and bounds (zk spec section 4, wire spec
section 2.7, docs/formats.md section 6)."""

from __future__ import annotations

import gc
import os
import weakref
import zlib

import pytest

from meta.errors import MetaError, PartitionFailedError, TransactionError, XAError
from meta.protocol.xa import (
    XA_HEURCOM,
    XA_HEURRB,
    XA_OK,
    XA_RBOTHER,
    XA_RDONLY,
    XAER_NOTA,
    XAER_PROTO,
    XAER_RMERR,
    XAER_RMFAIL,
)
from meta.tx.records import CommitDataRecord, CommitRecord
from tests.store.conftest import EIO, ManualExecutor, collect, record
from tests.tx.conftest import LOCAL, XID, Done, TxBroker, journal_records, tx_config

XID_2 = "XID:1:0b:0c:q"

SEGMENT_0 = "test-0/00000000000000000000.meta"
REDO_1 = "transactions/redo.1"


@pytest.fixture
def broker(tmp_path, files):
    """Flush mode 1 with a synchronous flusher: every commit completes at once."""
    return TxBroker(tx_config(tmp_path), files=files)


@pytest.fixture
def manual(tmp_path, files):
    """Flush mode 1 with flush batches run by the test (``broker.run()``)."""
    return TxBroker(tx_config(tmp_path), files=files, manual=True)


def begun(broker, key=LOCAL, session="c1", timeout_s=0):
    broker.transactions.begin(key, session, timeout_s)
    return broker


def prepared(broker, key=XID, payloads=(b"x1", b"x2")):
    """Begin, put and prepare the XA branch ``key``; return the stored records."""
    begun(broker, key, None)
    records = broker.put(key, payloads, session=None)
    done = broker.prepare(key)
    broker.run()
    assert done.calls == [(XA_OK, None)]
    return records


# -- visibility and the commit protocol ---------------------------------------------------


def test_messages_of_an_open_transaction_are_invisible(broker):
    begun(broker).put(LOCAL, [b"one", b"two"])
    broker.end_of_batch()
    assert (broker.log(0).max_offset, broker.segment_bytes(0)) == (0, b"")


def test_commit_appends_one_contiguous_batch_per_partition_in_put_order(broker):
    begun(broker)
    first = broker.put(LOCAL, [b"a1"], partition=0)
    second = broker.put(LOCAL, [b"b1"], partition=1)
    third = broker.put(LOCAL, [b"a2", b"a3"], partition=0)
    assert broker.commit(LOCAL).ok
    assert broker.segment_bytes(0) == b"".join(first + third)
    assert broker.segment_bytes(1) == b"".join(second)


def test_commit_writes_each_partition_batch_with_one_write(broker, files):
    begun(broker).put(LOCAL, [b"a", b"b", b"c"])
    broker.log(0)
    files.events.clear()
    broker.commit(LOCAL)
    assert files.of(SEGMENT_0).count("write") == 1


def test_committed_messages_become_readable(broker):
    begun(broker)
    records = broker.put(LOCAL, [b"a", b"b"])
    broker.commit(LOCAL)
    log = broker.log(0)
    assert log.read(log.slice(0, 1000)) == b"".join(records)


def test_commit_keeps_the_message_ids_given_at_put_time(broker):
    begun(broker)
    records = broker.put(LOCAL, [b"a"])
    broker.commit(LOCAL)
    assert broker.segment_bytes(0)[8:16] == records[0][8:16]


def test_a_committed_transaction_is_gone(broker):
    begun(broker).put(LOCAL, [b"a"])
    broker.commit(LOCAL)
    with pytest.raises(TransactionError, match="has not been started"):
        broker.transactions.check_put(LOCAL, "c1")


def test_rollback_leaves_nothing_in_the_partition(broker):
    begun(broker).put(LOCAL, [b"a", b"b"])
    broker.log(0)
    assert broker.rollback(LOCAL).ok
    broker.end_of_batch()
    assert (broker.log(0).max_offset, broker.segment_bytes(0)) == (0, b"")


def test_a_commit_with_no_messages_answers_at_once_and_writes_nothing(broker, files):
    begun(broker)
    files.events.clear()
    assert broker.commit(LOCAL).ok and files.count("write") == 0


def test_commit_answers_only_after_the_journal_fsync_and_the_batch_fsync(manual, files):
    """Goal: with flushTxLogAtCommit=1 the reply waits for the journal and the partition.

    Method: step the flush batches one by one and watch the commit's done callback.
    """
    begun(manual).put(LOCAL, [b"a"])
    manual.log(0)
    manual.run()
    done = manual.commit(LOCAL)
    assert done.calls == []
    manual.executor.run_next()  # the journal fsync; the batch is written after it
    assert done.calls == []
    manual.run()
    assert done.ok


def test_a_batch_is_written_only_after_the_journal_fsync_of_its_commit_record(manual, files):
    begun(manual).put(LOCAL, [b"a"])
    manual.log(0)
    manual.run()
    files.events.clear()
    manual.commit(LOCAL)
    assert files.of(SEGMENT_0) == []
    manual.run()
    journal_fsync = files.events.index(("fsync", REDO_1))
    assert files.events.index(("write", SEGMENT_0)) > journal_fsync


def test_the_commit_record_names_the_offset_the_batch_is_written_at(manual):
    """Goal: the COMMIT_DATA record's location is where the batch lands, even with other
    puts, and it carries the batch's bytes.

    Method: write a plain record first, commit, then read the record back from the journal
    files and compare it with the partition.
    """
    log = manual.log(0)
    log.append(record(b"plain"))
    manual.run()
    begun(manual)
    records = manual.put(LOCAL, [b"a", b"b"])
    manual.commit(LOCAL)
    manual.run()
    entries = journal_records(manual.journal_directory)
    (commit,) = [entry for _, entry in entries if isinstance(entry, CommitDataRecord)]
    (batch,) = commit.batches
    assert (batch.offset, batch.data) == (len(record(b"plain")), b"".join(records))
    assert manual.segment_bytes(0)[batch.offset :] == batch.data


def test_a_two_phase_commit_record_names_the_offset_and_crc_of_the_batch(manual):
    log = manual.log(0)
    log.append(record(b"plain"))
    manual.run()
    begun(manual, XID, None)
    records = manual.put(XID, [b"a", b"b"], session=None)
    manual.prepare(XID)
    manual.run()
    manual.commit(XID, None, one_phase=False)
    manual.run()
    entries = journal_records(manual.journal_directory)
    (commit,) = [entry for _, entry in entries if isinstance(entry, CommitRecord)]
    (batch,) = commit.batches
    data = b"".join(records)
    expected = (len(record(b"plain")), len(data), zlib.crc32(data) & 0x7FFFFFFF)
    assert (batch.offset, batch.length, batch.crc) == expected


def test_records_put_after_a_pending_commit_are_stored_and_acknowledged_after_it(manual, files):
    """Goal: the partition keeps offset order across a commit waiting for its journal sync.

    Method: hold the journal fsync of a commit, append a plain record to the same
    partition, then run everything: the plain record must not be written or acknowledged
    before the batch, and the segment must hold the batch first.
    """
    begun(manual)
    records = manual.put(LOCAL, [b"a", b"b"])
    log = manual.log(0)
    manual.run()
    done = manual.commit(LOCAL)
    later = collect(log.append(record(b"later")))
    assert (later, log.written_end) == ([], 0)
    manual.run()
    assert done.ok and later == [len(b"".join(records))]
    assert manual.segment_bytes(0) == b"".join(records) + record(b"later")


def test_the_commit_is_answered_before_a_record_put_after_it(manual):
    begun(manual).put(LOCAL, [b"a"])
    log = manual.log(0)
    manual.run()
    order = []
    manual.transactions.commit(LOCAL, "c1", True, lambda *_: order.append("commit"))
    log.append(record(b"later")).addCallback(lambda _: order.append("later"))
    manual.run()
    assert order == ["commit", "later"]


def test_two_pending_commits_on_one_partition_are_stored_in_commit_order(manual):
    begun(manual, "TX:s:1")
    first = manual.put("TX:s:1", [b"first"])
    begun(manual, "TX:s:2")
    second = manual.put("TX:s:2", [b"second"])
    manual.log(0)
    manual.run()
    done_first, done_second = manual.commit("TX:s:1"), manual.commit("TX:s:2")
    manual.run()
    assert done_first.ok and done_second.ok
    assert manual.segment_bytes(0) == b"".join(first + second)


def test_a_journal_fsync_failure_fails_the_commit_with_xaer_rmfail(manual, files):
    begun(manual, XID, None)
    manual.put(XID, [b"a"], session=None)
    manual.log(0)
    manual.run()
    done = manual.commit(XID, None)
    files.fsync_error = EIO
    files.fsync_error_only = "transactions"
    manual.run()
    assert isinstance(done.error, XAError) and done.error.error_code == XAER_RMFAIL


def test_a_journal_fsync_failure_writes_no_batch(manual, files):
    begun(manual).put(LOCAL, [b"a"])
    manual.log(0)
    manual.run()
    manual.commit(LOCAL)
    files.fsync_error = EIO
    files.fsync_error_only = "transactions"
    manual.run()
    assert manual.segment_bytes(0) == b""


def test_a_commit_into_a_failed_partition_rolls_back_with_xa_rbother(broker, files):
    begun(broker, XID, None)
    broker.put(XID, [b"a"], session=None)
    log = broker.log(0)
    files.fsync_error = EIO
    collect(log.append(record(b"lost")))
    files.fsync_error = None
    assert isinstance(log.failed, PartitionFailedError)
    with pytest.raises(XAError) as caught:
        broker.commit(XID, None)
    assert caught.value.error_code == XA_RBOTHER
    assert broker.transactions.recover_keys(None) == []


@pytest.mark.parametrize("key", [XID, LOCAL])
def test_a_commit_while_the_broker_stops_changes_nothing(tmp_path, key):
    """Goal: a COMMIT that arrives while a graceful stop has closed the partitions fails
    with XAER_RMFAIL and leaves the transaction as it was: a prepared branch is still
    prepared after the restart (before the fix it was rolled back, breaking the promise
    PREPARE made: the coordinator then saw a mixed outcome). Method: what Broker._stop does
    (tx.close, then each partition stops appends), then the commit."""
    broker = TxBroker(tx_config(tmp_path))
    if key == XID:
        prepared(broker)
    else:
        begun(broker).put(LOCAL, [b"a"])
    broker.log(0)  # The partition exists (a put's partition does, in the broker).
    broker.tx.close()
    for log in broker.store.partitions():
        log.stop_appends()
    with pytest.raises(MetaError, match="the broker is stopping") as caught:
        broker.commit(key, None if key == XID else "c1", one_phase=key == LOCAL)
    if key == XID:
        assert caught.value.error_code == XAER_RMFAIL
    kinds = [type(r).__name__ for _location, r in journal_records(broker.journal_directory)]
    assert "RollbackRecord" not in kinds
    again = broker.restart()
    assert again.transactions.recover_keys(None) == ([XID] if key == XID else [])
    if key == XID:
        assert again.commit(XID, None, one_phase=False).ok
        assert again.log(0).next_offset > 0


# -- prepare and two-phase commit --------------------------------------------------------


def test_prepare_answers_xa_ok_only_after_the_journal_fsync(manual):
    begun(manual, XID, None)
    manual.put(XID, [b"a"], session=None)
    done = manual.prepare(XID)
    assert done.calls == []
    manual.run()
    assert done.calls == [(XA_OK, None)]


def test_prepare_of_a_branch_without_messages_answers_xa_rdonly_and_forgets_it(broker):
    begun(broker, XID, None)
    assert broker.prepare(XID).calls == [(XA_RDONLY, None)]
    with pytest.raises(XAError) as caught:
        broker.transactions.check_put(XID, None)
    assert caught.value.error_code == XAER_NOTA


def test_prepare_of_a_local_transaction_is_xaer_rmerr(broker):
    begun(broker).put(LOCAL, [b"a"])
    with pytest.raises(XAError) as caught:
        broker.prepare(LOCAL)
    assert caught.value.error_code == XAER_RMERR


def test_a_prepared_branch_is_still_invisible(broker):
    prepared(broker)
    assert broker.log(0).max_offset == 0


def test_two_phase_commit_of_a_prepared_branch_stores_its_batch(broker):
    records = prepared(broker)
    assert broker.commit(XID, None, one_phase=False).ok
    assert broker.segment_bytes(0) == b"".join(records)


def test_two_phase_commit_of_an_unprepared_branch_is_xaer_proto(broker):
    begun(broker, XID, None)
    broker.put(XID, [b"a"], session=None)
    with pytest.raises(XAError) as caught:
        broker.commit(XID, None, one_phase=False)
    assert caught.value.error_code == XAER_PROTO


def test_a_prepared_branch_takes_no_more_messages(broker):
    prepared(broker)
    with pytest.raises(TransactionError):
        broker.put(XID, [b"late"], session=None)


def test_an_unknown_local_transaction_has_not_been_started(broker):
    with pytest.raises(TransactionError, match="Local transaction 'TX:s:9' has not been started."):
        broker.commit("TX:s:9")


def test_an_unknown_xa_branch_is_xaer_nota(broker):
    with pytest.raises(XAError) as caught:
        broker.commit("XID:1:0a:0c:q1", None)
    assert caught.value.error_code == XAER_NOTA


def test_a_local_transaction_is_invisible_to_another_session(broker):
    begun(broker).put(LOCAL, [b"a"])
    with pytest.raises(TransactionError, match="has not been started"):
        broker.commit(LOCAL, session="c2")


# -- timeouts ----------------------------------------------------------------------------


def test_a_begun_transaction_is_rolled_back_when_its_timeout_fires(broker):
    begun(broker, timeout_s=5)
    broker.clock.advance(5)
    with pytest.raises(TransactionError, match="has not been started"):
        broker.transactions.check_put(LOCAL, "c1")


def test_an_in_use_transaction_is_rolled_back_when_its_timeout_fires(broker):
    begun(broker, timeout_s=5).put(LOCAL, [b"a"])
    broker.clock.advance(5)
    assert broker.transactions.describe() == []


def test_a_transaction_is_not_rolled_back_before_its_timeout(broker):
    begun(broker, timeout_s=5).put(LOCAL, [b"a"])
    broker.clock.advance(4.9)
    assert [key for key, *_ in broker.transactions.describe()] == [LOCAL]


def test_a_timed_out_transaction_stores_nothing_when_committed_later(broker):
    begun(broker, timeout_s=5).put(LOCAL, [b"a"])
    broker.clock.advance(5)
    with pytest.raises(TransactionError):
        broker.commit(LOCAL)
    assert broker.log(0).max_offset == 0


def test_a_prepared_branch_is_not_rolled_back_by_its_timeout(broker):
    begun(broker, XID, None, timeout_s=5)
    broker.put(XID, [b"a"], session=None)
    broker.prepare(XID)
    broker.clock.advance(60)
    assert broker.transactions.recover_keys(None) == [XID]


def test_an_xa_branch_in_use_is_rolled_back_by_its_timeout(broker):
    begun(broker, XID, None, timeout_s=5)
    broker.put(XID, [b"a"], session=None)
    broker.clock.advance(5)
    with pytest.raises(XAError) as caught:
        broker.prepare(XID)
    assert caught.value.error_code == XAER_NOTA


def test_a_timeout_is_clamped_to_the_maximum(tmp_path):
    broker = begun(TxBroker(tx_config(tmp_path, tx_timeout_max_s=10)), timeout_s=3600)
    broker.clock.advance(9.99)
    assert len(broker.transactions.describe()) == 1
    broker.clock.advance(0.01)
    assert broker.transactions.describe() == []


def test_a_timeout_of_zero_never_fires(tmp_path, files):
    """Without a timeout of its own (and with the active timeout off) nothing fires."""
    broker = TxBroker(tx_config(tmp_path, tx_active_timeout_s=0), files=files)
    begun(broker, timeout_s=0)
    broker.clock.advance(10**6)
    assert len(broker.transactions.describe()) == 1


def test_begin_beyond_the_timer_capacity_is_refused_with_javas_text(tmp_path):
    broker = TxBroker(tx_config(tmp_path, tx_timeout_timer_capacity=1))
    begun(broker, "TX:s:1", timeout_s=5)
    with pytest.raises(TransactionError) as caught:
        broker.transactions.begin("TX:s:2", "c1", 5)
    assert str(caught.value) == "Timer size 1 is great than maxTimerCapacity 1"


def test_begin_beyond_the_timer_capacity_still_creates_the_transaction(tmp_path):
    broker = TxBroker(tx_config(tmp_path, tx_timeout_timer_capacity=1))
    begun(broker, "TX:s:1", timeout_s=5)
    with pytest.raises(TransactionError):
        broker.transactions.begin("TX:s:2", "c1", 5)
    broker.put("TX:s:2", [b"a"])
    assert broker.commit("TX:s:2").ok


def test_finishing_a_transaction_frees_its_timer(tmp_path):
    broker = TxBroker(tx_config(tmp_path, tx_timeout_timer_capacity=1))
    begun(broker, "TX:s:1", timeout_s=5)
    broker.commit("TX:s:1")
    broker.transactions.begin("TX:s:2", "c1", 5)  # does not raise


def test_a_fired_timeout_frees_its_timer(tmp_path):
    broker = TxBroker(tx_config(tmp_path, tx_timeout_timer_capacity=1))
    begun(broker, "TX:s:1", timeout_s=5)
    broker.clock.advance(5)
    broker.transactions.begin("TX:s:2", "c1", 5)  # does not raise


# -- sessions ----------------------------------------------------------------------------


def test_closing_a_session_rolls_back_its_open_local_transactions(broker):
    begun(broker, "TX:s:1", "c1").put("TX:s:1", [b"a"], session="c1")
    begun(broker, "TX:s:2", "c1")
    assert broker.transactions.session_closed("c1") == 2
    assert broker.transactions.describe() == []


def test_closing_a_session_leaves_other_sessions_transactions(broker):
    begun(broker, "TX:s:1", "c1").put("TX:s:1", [b"a"], session="c1")
    begun(broker, "TX:t:1", "c2").put("TX:t:1", [b"b"], session="c2")
    broker.transactions.session_closed("c1")
    assert broker.commit("TX:t:1", session="c2").ok


def test_closing_a_session_leaves_xa_branches(broker):
    begun(broker, XID, None)
    broker.put(XID, [b"a"], session=None)
    broker.transactions.session_closed("c1")
    assert [key for key, *_ in broker.transactions.describe()] == [XID]


def test_closing_a_session_does_not_touch_a_commit_in_progress(manual):
    begun(manual).put(LOCAL, [b"a"])
    manual.log(0)
    manual.run()
    done = manual.commit(LOCAL)
    assert manual.transactions.session_closed("c1") == 0
    manual.run()
    assert done.ok and manual.log(0).max_offset > 0


class Session:
    """A connection stand-in that a weak reference can watch."""


class SessionDone(Done):
    """A ``done`` that holds its connection, as the server's reply callback does."""

    def __init__(self, session: object) -> None:
        super().__init__()
        self.session = session


def failed_commit(broker, files, session: object) -> list[bytes]:
    """A local commit whose batch fsync fails: answered with an error, left COMMITTING (its
    COMMIT record stands, a restart completes it). Returns the stored records."""
    begun(broker, LOCAL, session)
    records = broker.put(LOCAL, [b"a", b"b"], session=session)
    broker.log(0)
    files.fsync_error, files.fsync_error_only = EIO, "test-0"
    done = SessionDone(session)
    broker.transactions.commit(LOCAL, session, True, done)
    broker.end_of_batch()
    assert "a broker restart completes it" in str(done.error)
    return records


def test_a_commit_that_failed_to_store_no_longer_counts_its_messages_in_memory(broker, files):
    """The COMMIT record holds the batches now; the open-transaction byte bound is freed."""
    failed_commit(broker, files, "c1")
    assert broker.transactions.byte_count == 0


def test_closing_a_session_lets_go_of_it_when_its_commit_failed_to_store(broker, files):
    """Goal: a connection whose local commit failed to store is not kept until a restart.

    Method: fail the commit, close the session, drop the test's reference, and watch the
    session object with a weak reference.
    """
    session = Session()
    failed_commit(broker, files, session)
    broker.transactions.session_closed(session)
    watcher = weakref.ref(session)
    del session
    gc.collect()
    assert watcher() is None


def test_a_failed_commit_of_a_closed_session_still_pins_its_commit_record(broker, files):
    """Goal: after its session closed, the failed commit is still listed and a checkpoint
    still cannot pass its COMMIT record, so the restart completes it.

    Method: fail the commit, close the session, write a checkpoint, lose the unsynced batch
    (truncate the segment), restart.
    """
    records = failed_commit(broker, files, "c1")
    broker.transactions.session_closed("c1")
    assert [(key, state) for key, state, *_ in broker.transactions.describe()] == [
        (LOCAL, "COMMITTING")
    ]
    broker.tx.checkpoint()
    os.truncate(broker.segment_path(0), 0)
    assert broker.restart().segment_bytes(0) == b"".join(records)


# -- RECOVER, heuristic outcomes, FORGET -------------------------------------------------


def test_recover_lists_only_prepared_branches_of_the_given_qualifier(broker):
    prepared(broker, "XID:1:0a:01:q1")
    prepared(broker, "XID:1:0a:02:q2")
    assert broker.transactions.recover_keys("q1") == ["XID:1:0a:01:q1"]


def test_recover_without_a_qualifier_lists_every_prepared_branch(broker):
    prepared(broker, "XID:1:0a:01:q1")
    prepared(broker, "XID:1:0a:02:q2")
    assert sorted(broker.transactions.recover_keys(None)) == ["XID:1:0a:01:q1", "XID:1:0a:02:q2"]


def test_recover_does_not_list_branches_that_are_not_prepared(broker):
    begun(broker, XID, None)
    broker.put(XID, [b"a"], session=None)
    assert broker.transactions.recover_keys(None) == []


def heuristic(broker, key, commit):
    done = Done()
    broker.transactions.heuristic(key, commit, done)
    broker.run()
    return done


def test_a_heuristic_commit_stores_the_batch(broker):
    records = prepared(broker)
    assert heuristic(broker, XID, True).ok
    assert broker.segment_bytes(0) == b"".join(records)


def test_a_heuristically_committed_branch_answers_xa_heurcom(broker):
    prepared(broker)
    heuristic(broker, XID, True)
    with pytest.raises(XAError) as caught:
        broker.commit(XID, None, one_phase=False)
    assert caught.value.error_code == XA_HEURCOM


def test_a_heuristic_rollback_stores_nothing_and_answers_xa_heurrb(broker):
    prepared(broker)
    heuristic(broker, XID, False)
    with pytest.raises(XAError) as caught:
        broker.rollback(XID, None)
    assert (caught.value.error_code, broker.log(0).max_offset) == (XA_HEURRB, 0)


def test_recover_lists_a_heuristic_branch_until_forget(broker):
    prepared(broker)
    heuristic(broker, XID, True)
    listed = broker.transactions.recover_keys("q1")
    done = Done()
    broker.transactions.forget(XID, done)
    assert (listed, done.ok, broker.transactions.recover_keys(None)) == ([XID], True, [])


def test_a_forgotten_branch_is_xaer_nota(broker):
    prepared(broker)
    heuristic(broker, XID, False)
    broker.transactions.forget(XID, Done())
    with pytest.raises(XAError) as caught:
        broker.commit(XID, None, one_phase=False)
    assert caught.value.error_code == XAER_NOTA


def test_forget_of_an_xa_key_without_a_heuristic_outcome_answers_ok(broker):
    """Wire spec section 2.7.2: FORGET drops the key from the heuristic table; only a
    non-XA or null key is XAER_NOTA (Java's ``forgetTransaction`` removes and returns)."""
    done = Done()
    broker.transactions.forget("XID:1:0a:0c:q1", done)
    assert done.ok


def test_a_heuristic_outcome_of_an_unprepared_branch_is_refused(broker):
    begun(broker, XID, None)
    broker.put(XID, [b"a"], session=None)
    with pytest.raises(XAError):
        broker.transactions.heuristic(XID, True, Done())


# -- bounds ------------------------------------------------------------------------------


def test_begin_beyond_transactions_max_is_refused(tmp_path, files):
    broker = TxBroker(tx_config(tmp_path, tx_open_max=2), files=files)
    begun(broker, "TX:s:1")
    begun(broker, "TX:s:2")
    with pytest.raises(TransactionError, match="Too many open transactions"):
        broker.transactions.begin("TX:s:3", "c1", 0)


def test_finishing_a_transaction_frees_its_slot(tmp_path, files):
    broker = TxBroker(tx_config(tmp_path, tx_open_max=1), files=files)
    begun(broker, "TX:s:1")
    broker.rollback("TX:s:1")
    broker.transactions.begin("TX:s:2", "c1", 0)  # does not raise


def test_a_refused_begin_creates_no_transaction(tmp_path, files):
    broker = TxBroker(tx_config(tmp_path, tx_open_max=1), files=files)
    begun(broker, "TX:s:1")
    with pytest.raises(TransactionError):
        broker.transactions.begin("TX:s:2", "c1", 0)
    assert [key for key, *_ in broker.transactions.describe()] == ["TX:s:1"]


def test_a_put_beyond_transaction_bytes_max_is_refused(tmp_path, files):
    broker = TxBroker(tx_config(tmp_path, tx_open_bytes_max=50), files=files)
    begun(broker).put(LOCAL, [b"a" * 10])  # 30 bytes
    with pytest.raises(TransactionError, match="at most 50"):
        broker.put(LOCAL, [b"b" * 10])


def test_the_byte_bound_counts_every_open_transaction(tmp_path, files):
    broker = TxBroker(tx_config(tmp_path, tx_open_bytes_max=50), files=files)
    begun(broker, "TX:s:1").put("TX:s:1", [b"a" * 10])
    begun(broker, "TX:s:2")
    with pytest.raises(TransactionError):
        broker.put("TX:s:2", [b"b" * 10])


def test_a_refused_put_leaves_the_transaction_usable_without_it(tmp_path, files):
    broker = TxBroker(tx_config(tmp_path, tx_open_bytes_max=50), files=files)
    begun(broker)
    kept = broker.put(LOCAL, [b"a" * 10])
    with pytest.raises(TransactionError):
        broker.put(LOCAL, [b"b" * 10])
    assert broker.commit(LOCAL).ok
    assert broker.segment_bytes(0) == b"".join(kept)


def test_a_refused_first_put_leaves_an_xa_branch_with_nothing_to_prepare(tmp_path, files):
    """Rule 2 of meta/tx/states.py: a refused event leaves the state unchanged, so a branch
    whose only put was refused is still empty and PREPARE answers XA_RDONLY."""
    broker = TxBroker(tx_config(tmp_path, tx_open_bytes_max=10), files=files)
    begun(broker, XID, None)
    with pytest.raises(TransactionError):
        broker.put(XID, [b"too big"], session=None)
    assert broker.prepare(XID).calls == [(XA_RDONLY, None)]


def test_a_commit_after_a_refused_first_put_is_answered(tmp_path, files):
    broker = TxBroker(tx_config(tmp_path, tx_open_bytes_max=10), files=files)
    begun(broker)
    with pytest.raises(TransactionError):
        broker.put(LOCAL, [b"too big"])
    assert broker.commit(LOCAL).ok


def test_committed_bytes_no_longer_count_against_the_bound(tmp_path, files):
    broker = TxBroker(tx_config(tmp_path, tx_open_bytes_max=50), files=files)
    begun(broker, "TX:s:1").put("TX:s:1", [b"a" * 10])
    broker.commit("TX:s:1")
    begun(broker, "TX:s:2").put("TX:s:2", [b"b" * 10])
    assert broker.transactions.byte_count == 30


# -- journal files ------------------------------------------------------------------------


def test_a_finished_transaction_lets_its_old_journal_file_go(tmp_path):
    """Goal: a redo file is deleted once it is not current and its transactions finished.

    Method: with a tiny file size, prepared branch 1 fills redo.1, branch 2 starts in
    redo.2; committing branch 1 must delete redo.1.
    """
    broker = TxBroker(tx_config(tmp_path, tx_journal_file_bytes=40))
    for key in (XID, XID_2):
        begun(broker, key, None).put(key, [b"a"], session=None)
        broker.prepare(key)
        broker.run()
    assert broker.journal.file_numbers == [1, 2]
    broker.commit(XID, None, one_phase=False)
    broker.run()
    assert broker.journal.file_numbers == [2]
    assert not os.path.exists(os.path.join(broker.journal_directory, "redo.1"))


@pytest.mark.parametrize("finish", ["rollback", "forget"])
def test_a_finished_branch_stays_finished_when_its_file_deletion_is_lost(tmp_path, finish):
    """Goal: a ROLLBACK (or FORGET) answered OK holds after a crash that comes before the
    unlink of the branch's old redo file (or a power loss that undoes it): the file was
    let go only once that last record was written and fsynced.

    Method: branch 1 fills redo.1, branch 2 starts redo.2; branch 1 is rolled back (or
    heuristically rolled back, then forgotten), and the unlink job is never run. Before the
    fix the record was never written (the file left the journal first), so the branch came
    back PREPARED (or the forgotten outcome came back) at restart.
    """
    unlinks = ManualExecutor()
    broker = TxBroker(tx_config(tmp_path, tx_journal_file_bytes=40), background=unlinks)
    for key in (XID, XID_2):
        prepared(broker, key)
        broker.run()
    assert broker.journal.file_numbers == [1, 2]
    if finish == "rollback":
        done = broker.rollback(XID, None)
    else:
        broker.transactions.heuristic(XID, False, Done())
        done = Done()
        broker.transactions.forget(XID, done)
    assert done.ok
    assert broker.journal.file_numbers == [2] and len(unlinks.queue) == 1
    events = broker.files.of("transactions/redo.1")
    assert events[-2:] == ["write", "fsync"]  # the last record, durable before the unlink
    again = broker.restart()
    assert again.transactions.recover_keys(None) == [XID_2]


def test_a_prepared_branch_keeps_its_journal_file(tmp_path):
    broker = TxBroker(tx_config(tmp_path, tx_journal_file_bytes=40))
    for key in (XID, XID_2):
        begun(broker, key, None).put(key, [b"a"], session=None)
        broker.prepare(key)
        broker.run()
    broker.commit(XID_2, None, one_phase=False)
    broker.run()
    assert 1 in broker.journal.file_numbers


def test_an_open_transaction_journals_nothing_until_it_commits(broker):
    """Messages are journaled at COMMIT, in one COMMIT_DATA record with every batch."""
    begun(broker).put(LOCAL, [b"a", b"b"])
    broker.end_of_batch()
    assert journal_records(broker.journal_directory) == []
    broker.commit(LOCAL)
    broker.run()
    kinds = [
        type(record).__name__ for _location, record in journal_records(broker.journal_directory)
    ]
    assert kinds == ["CommitDataRecord"]


def test_prepare_journals_one_append_record_per_partition_and_commit_names_them(broker):
    begun(broker, XID, None).put(XID, [b"a"], session=None, partition=0)
    broker.put(XID, [b"b"], session=None, partition=1)
    broker.prepare(XID)
    broker.run()
    broker.commit(XID, None, one_phase=False)
    broker.run()
    kinds = [
        type(record).__name__ for _location, record in journal_records(broker.journal_directory)
    ]
    assert kinds == ["AppendRecord", "AppendRecord", "PrepareRecord", "CommitRecord"]


def test_threshold_mode_answers_a_commit_only_after_its_batch_is_written(tmp_path):
    """Goal: a topic that acks puts without fsync (unflushThreshold=N) still answers a
    commit only once its batch is in the segment, after the journal sync.

    Method: stage a plain put and then commit in one batch, as a pipelining client does,
    and hold the journal fsync; run the end-of-batch writes and look at the commit.
    """
    broker = TxBroker(tx_config(tmp_path, unflush_threshold=1000), manual=True)
    begun(broker).put(LOCAL, [b"a"])
    log = broker.log(0)
    broker.run()
    log.stage(record(b"plain"), lambda *_: None)
    done = broker.commit(LOCAL)
    broker.end_of_batch()
    assert (done.calls, log.written_end) == ([], len(record(b"plain")))


# -- flushTxLogAtCommit 0 and 2 ------------------------------------------------------------


def test_mode_2_answers_a_commit_without_waiting_for_a_journal_fsync(tmp_path, files):
    broker = TxBroker(tx_config(tmp_path, flush_tx_log_at_commit=2), files=files)
    begun(broker).put(LOCAL, [b"a"])
    broker.log(0)
    files.events.clear()
    assert broker.commit(LOCAL).ok and "fsync" not in files.of(REDO_1)


def test_mode_2_fsyncs_the_journal_within_a_second(tmp_path, files):
    broker = TxBroker(tx_config(tmp_path, flush_tx_log_at_commit=2), files=files)
    begun(broker).put(LOCAL, [b"a"])
    broker.commit(LOCAL)
    files.events.clear()
    broker.clock.advance(1)
    assert "fsync" in files.of(REDO_1)


def test_mode_0_never_fsyncs_the_journal(tmp_path, files):
    broker = TxBroker(tx_config(tmp_path, flush_tx_log_at_commit=0), files=files)
    begun(broker).put(LOCAL, [b"a"])
    files.events.clear()
    assert broker.commit(LOCAL).ok
    broker.clock.advance(10)
    assert "fsync" not in files.of(REDO_1)


def test_the_commits_one_journal_fsync_completes_share_one_write_per_partition(tmp_path, files):
    """Goal: a burst of commits costs one journal write and one segment write, not one each.
    Method: three commits in one read (no ``end_of_batch`` between them) while the fsync of
    an earlier commit runs; the three share the next journal write and fsync, and once that
    is done, one segment write."""
    broker = TxBroker(tx_config(tmp_path), files=files, manual=True)
    keys = [f"TX:s:{n}" for n in (0, 1, 2, 3)]
    records = []
    for key in keys:
        begun(broker, key)
        records += broker.put(key, [key.encode()])
    running = broker.commit(keys[0])  # its journal fsync is queued, not run yet
    files.events.clear()
    dones = []
    for key in keys[1:]:
        dones.append(Done())
        broker.transactions.commit(key, "c1", True, dones[-1])
    broker.end_of_batch()
    broker.run()
    assert running.ok and all(done.ok for done in dones)
    assert broker.segment_bytes() == b"".join(records)
    assert files.of(REDO_1).count("write") == 1
    assert files.of(SEGMENT_0).count("write") == 2  # the first commit's, then the three
