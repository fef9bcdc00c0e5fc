"""``meta.tx.java_journal``: a Java journal replayed read-only, as a Java broker's start would."""

from __future__ import annotations

from meta.protocol.message import pack_message
from meta.tx.java_journal import inspect_java_journal, is_java_journal_file
from tests.tx.java_journal_files import (
    LOCAL_COMMIT,
    LOCAL_ROLLBACK,
    XA_COMMIT,
    XA_PREPARE,
    append,
    attachment_entry,
    operation,
    write_journal,
)

BATCH = pack_message(7, 0, b"one") + pack_message(8, 0, b"two")


def segment(tmp_path, topic="orders", partition=0, start=0, data=BATCH):
    directory = tmp_path / f"{topic}-{partition}"
    directory.mkdir(exist_ok=True)
    (directory / f"{start:020d}.meta").write_bytes(data)


def committed(key: str, offset: int = 0, kind: int = LOCAL_COMMIT) -> bytes:
    entry = attachment_entry("orders", 0, offset, BATCH)
    return append(key, "orders", 0, b"one") + operation(kind, key, entry)


def test_an_empty_java_journal_has_nothing_pending(tmp_path):
    journal = write_journal(tmp_path, {1: b""})
    report = inspect_java_journal(str(journal), [str(tmp_path)])
    assert not report.pending
    assert report.checkpoint is None
    assert report.redo_files == ["redo.1"]


def test_a_commit_whose_batch_is_in_its_segment_is_not_pending(tmp_path):
    segment(tmp_path)
    journal = write_journal(tmp_path, {1: committed("TX:s:1")})
    report = inspect_java_journal(str(journal), [str(tmp_path)])
    assert [(b.transaction_id, b.intact) for b in report.batches] == [("TX:s:1", True)]
    assert not report.pending


def test_a_commit_whose_batch_never_reached_its_segment_is_pending(tmp_path):
    segment(tmp_path, data=BATCH[:10])
    journal = write_journal(tmp_path, {1: committed("TX:s:1")})
    report = inspect_java_journal(str(journal), [str(tmp_path)])
    assert report.pending
    assert "segment ends before" in report.incomplete_batches[0].reason


def test_a_commit_whose_bytes_differ_is_pending(tmp_path):
    segment(tmp_path, data=BATCH[:-1] + b"X")
    journal = write_journal(tmp_path, {1: committed("TX:s:1")})
    report = inspect_java_journal(str(journal), [str(tmp_path)])
    assert "do not match" in report.incomplete_batches[0].reason


def test_a_commit_for_a_partition_that_is_not_found_is_pending(tmp_path):
    journal = write_journal(tmp_path, {1: committed("TX:s:1")})
    report = inspect_java_journal(str(journal), [str(tmp_path)])
    assert "no directory orders-0" in report.incomplete_batches[0].reason


def test_a_batch_already_removed_by_retention_counts_as_intact(tmp_path):
    segment(tmp_path, start=1000, data=b"later")
    journal = write_journal(tmp_path, {1: committed("TX:s:1", offset=0)})
    assert not inspect_java_journal(str(journal), [str(tmp_path)]).pending


def test_a_prepared_xa_transaction_is_pending_and_an_open_one_is_rolled_back(tmp_path):
    xid, local = "XID:1:6774:6271", "TX:s:2"
    data = append(xid, "orders", 0, b"x") + operation(XA_PREPARE, xid) + append(local, "o", 0, b"y")
    journal = write_journal(tmp_path, {1: data})
    report = inspect_java_journal(str(journal), [str(tmp_path)])
    assert report.prepared == [xid]
    assert report.in_flight == [local]
    assert report.pending


def test_finished_transactions_leave_nothing_open(tmp_path):
    segment(tmp_path)
    xid = "XID:1:61:62"
    data = append(xid, "orders", 0, b"x") + operation(XA_PREPARE, xid)
    data += operation(XA_COMMIT, xid, attachment_entry("orders", 0, 0, BATCH))
    data += append("TX:s:3", "orders", 0, b"z") + operation(LOCAL_ROLLBACK, "TX:s:3")
    report = inspect_java_journal(str(write_journal(tmp_path, {1: data})), [str(tmp_path)])
    assert (report.prepared, report.in_flight, report.pending) == ([], [], False)


def test_a_commit_of_an_unknown_transaction_still_skips_its_attachment(tmp_path):
    """Java misreads the attachment as a record in this case; the replay here skips it, so the
    prepared transaction after it is still found."""
    segment(tmp_path)
    xid = "XID:1:71:72"
    data = committed("TX:s:1")[len(append("TX:s:1", "orders", 0, b"one")) :]
    data += append(xid, "orders", 0, b"x") + operation(XA_PREPARE, xid)
    report = inspect_java_journal(str(write_journal(tmp_path, {1: data})), [str(tmp_path)])
    assert report.prepared == [xid]
    assert report.unreadable == []


def test_replay_starts_at_the_newest_checkpoint(tmp_path):
    first = append("TX:s:1", "orders", 0, b"x") + operation(XA_PREPARE, "TX:s:1")
    second = append("TX:s:2", "orders", 0, b"y")
    journal = write_journal(tmp_path, {1: first, 2: second}, checkpoint='{"number":2,"offset":0}')
    report = inspect_java_journal(str(journal), [str(tmp_path)])
    assert report.checkpoint == (2, 0)
    assert (report.prepared, report.in_flight) == ([], ["TX:s:2"])


def test_a_torn_tail_ends_the_file_as_java_truncates_it(tmp_path):
    xid = "XID:1:81:82"
    data = append(xid, "orders", 0, b"x") + operation(XA_PREPARE, xid)[:-3]
    report = inspect_java_journal(str(write_journal(tmp_path, {1: data})), [str(tmp_path)])
    assert report.unreadable and "redo.1 at" in report.unreadable[0]
    assert report.in_flight == [xid]
    assert not report.pending


def test_java_and_metaq_py_files_are_told_apart_by_their_first_bytes():
    assert is_java_journal_file(append("TX:s:1", "orders", 0, b"x")[:8])
    assert is_java_journal_file(operation(XA_PREPARE, "XID:1:1:1")[:8])
    assert not is_java_journal_file(b"metaqtx\x02")
    assert not is_java_journal_file(b"")
