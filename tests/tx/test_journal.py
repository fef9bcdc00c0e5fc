"""The redo files: replay and tail repair, placement and rolling, deletion, durability modes."""

from __future__ import annotations

import errno
import logging
import os
import struct

import pytest
from twisted.internet.task import Clock

from meta.config import journal_flush_mode
from meta.errors import StoreError
from meta.store.group_commit import Flusher, SynchronousExecutor
from meta.tx import journal as journal_module
from meta.tx.journal import Journal, JournalError
from meta.tx.journal_location import JournalLocation
from meta.tx.records import (
    FILE_MAGIC,
    FILE_MAGIC_V1,
    AppendRecord,
    PrepareRecord,
    RollbackRecord,
    encode,
)
from tests.descriptors import closers
from tests.store.conftest import EIO, ENOSPC, ManualExecutor, record
from tests.tx.conftest import journal_records

EMFILE = errno.EMFILE

REDO_1 = "transactions/redo.1"
REDO_2 = "transactions/redo.2"


@pytest.fixture
def directory(tmp_path):
    return str(tmp_path / "meta" / "transactions")


def open_journal(
    directory,
    files,
    *,
    executor=None,
    flusher=None,
    clock=None,
    mode=1,
    file_bytes_max=1 << 20,
    start=None,
    background=None,
):
    """Replay ``directory`` and start the journal; return it and what replay yielded. The
    journal is closed after the test."""
    if flusher is None:
        flusher = Flusher(executor if executor is not None else SynchronousExecutor())
    journal = Journal(
        directory,
        files=files,
        flusher=flusher,
        reactor=clock if clock is not None else Clock(),
        file_bytes_max=file_bytes_max,
        flush_mode=journal_flush_mode(mode),
        background=background,
    )
    closers.add(journal.close)
    replayed = list(journal.replay(start))
    journal.start()
    return journal, replayed


def append(key: str, payload: bytes = b"m") -> AppendRecord:
    return AppendRecord(key, "test", 0, record(payload))


def redo(directory, number: int) -> str:
    return os.path.join(directory, f"redo.{number}")


def file_size(path: str) -> int:
    return os.path.getsize(path)


def syncs(journal):
    """Call ``journal.sync`` and return the list its answer lands in."""
    answers: list = []
    journal.sync(answers.append)
    return answers


# -- replay and tail repair --------------------------------------------------------------


def test_a_new_journal_is_redo_1_holding_only_the_magic(directory, files):
    open_journal(directory, files)
    assert os.listdir(directory) == ["redo.1"]
    with open(redo(directory, 1), "rb") as file:
        assert file.read() == FILE_MAGIC


def test_replay_yields_what_was_appended_at_the_locations_append_returned(directory, files):
    journal, _ = open_journal(directory, files)
    written = []
    for entry in (append("TX:s:1", b"one"), append("TX:s:2", b"two"), PrepareRecord("TX:s:1")):
        written.append((journal.append(entry), entry))
    journal.close()
    _, replayed = open_journal(directory, files)
    assert replayed == written


def test_the_first_record_lies_just_after_the_magic(directory, files):
    journal, _ = open_journal(directory, files)
    assert journal.append(PrepareRecord("TX:s:1")) == JournalLocation(1, len(FILE_MAGIC))


def test_a_torn_tail_is_cut_at_the_last_whole_record(directory, files):
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:1"))
    journal.append(append("TX:s:2", b"torn"))
    journal.close()
    whole = len(FILE_MAGIC) + len(encode(PrepareRecord("TX:s:1")))
    os.truncate(redo(directory, 1), whole + 12)
    _, replayed = open_journal(directory, files)
    assert [entry for _, entry in replayed] == [PrepareRecord("TX:s:1")]
    assert file_size(redo(directory, 1)) == whole


def test_the_journal_appends_after_the_cut_of_a_torn_tail(directory, files):
    """Goal: after a torn tail was cut, new records follow the last whole one.

    Method: cut the second record in half, reopen, append, and replay once more: the new
    record must sit right after the first and both must be read back.
    """
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:1"))
    journal.append(append("TX:s:2", b"torn"))
    journal.close()
    whole = len(FILE_MAGIC) + len(encode(PrepareRecord("TX:s:1")))
    os.truncate(redo(directory, 1), whole + 12)
    journal, _ = open_journal(directory, files)
    location = journal.append(PrepareRecord("TX:s:3"))
    journal.close()
    _, replayed = open_journal(directory, files)
    assert location == JournalLocation(1, whole)
    assert [entry for _, entry in replayed] == [PrepareRecord("TX:s:1"), PrepareRecord("TX:s:3")]


def test_replay_reads_records_across_read_chunks(directory, files, monkeypatch):
    monkeypatch.setattr(journal_module, "READ_CHUNK_BYTES", 7)
    journal, _ = open_journal(directory, files)
    written = [
        (journal.append(append(f"TX:s:{n}", b"x" * n)), append(f"TX:s:{n}", b"x" * n))
        for n in range(1, 6)
    ]
    journal.close()
    _, replayed = open_journal(directory, files)
    assert replayed == written


def test_a_torn_tail_is_cut_when_read_in_small_chunks(directory, files, monkeypatch):
    monkeypatch.setattr(journal_module, "READ_CHUNK_BYTES", 5)
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:1"))
    journal.append(PrepareRecord("TX:s:2"))
    journal.close()
    os.truncate(redo(directory, 1), 8 + 17 + 16)
    journal, replayed = open_journal(directory, files)
    assert ([entry for _, entry in replayed], journal.bytes_cut) == ([PrepareRecord("TX:s:1")], 16)


def test_files_that_are_not_redo_files_are_left_alone(directory, files):
    os.makedirs(directory)
    for name in ("redo.0", "redo.tmp", "notes"):
        with open(os.path.join(directory, name), "wb") as file:
            file.write(b"x")
    open_journal(directory, files, start=JournalLocation(5, 8))
    assert sorted(os.listdir(directory)) == ["notes", "redo.0", "redo.1", "redo.tmp"]


def test_a_garbage_tail_is_cut_and_counted(directory, files):
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:1"))
    journal.close()
    garbage = bytes((index * 73 + 11) % 256 for index in range(100))
    with open(redo(directory, 1), "ab") as file:
        file.write(garbage)
    journal, replayed = open_journal(directory, files)
    assert [entry for _, entry in replayed] == [PrepareRecord("TX:s:1")]
    assert journal.bytes_cut == 100


def test_a_garbage_tail_with_an_implausible_length_is_cut(directory, files):
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:1"))
    journal.close()
    with open(redo(directory, 1), "ab") as file:
        file.write(b"\xff" * 40)
    journal, _ = open_journal(directory, files)
    assert (journal.bytes_cut, file_size(redo(directory, 1))) == (40, 8 + 17)


def test_the_journal_appends_after_the_cut_of_a_garbage_tail(directory, files):
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:1"))
    journal.close()
    with open(redo(directory, 1), "ab") as file:
        file.write(b"\x00\x00\x00\x01" + b"\x00" * 30)
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:2"))
    journal.close()
    _, replayed = open_journal(directory, files)
    assert [entry for _, entry in replayed] == [PrepareRecord("TX:s:1"), PrepareRecord("TX:s:2")]


def test_a_damaged_record_drops_every_record_after_it_in_its_file(directory, files):
    journal, _ = open_journal(directory, files)
    for number in range(1, 4):
        journal.append(PrepareRecord(f"TX:s:{number}"))
    journal.close()
    with open(redo(directory, 1), "r+b") as file:
        file.seek(8 + 17 + 12)  # inside the key of the second record
        byte = file.read(1)[0]
        file.seek(8 + 17 + 12)
        file.write(bytes([byte ^ 0x01]))
    _, replayed = open_journal(directory, files)
    assert [entry for _, entry in replayed] == [PrepareRecord("TX:s:1")]


def test_the_bytes_cut_are_logged_with_the_file(directory, files, caplog):
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:1"))
    journal.close()
    with open(redo(directory, 1), "ab") as file:
        file.write(b"\x01" * 5)
    with caplog.at_level(logging.ERROR, logger="meta.tx"):
        open_journal(directory, files)
    assert "cutting 5 bytes" in caplog.text and "redo.1" in caplog.text


def test_a_java_journal_file_stops_the_start_with_an_error_naming_it(directory, files):
    os.makedirs(directory)
    java_record = struct.pack(">i", 12) + bytes.fromhex("0802 1208 0a06 54583a733a31")
    with open(redo(directory, 1), "wb") as file:
        file.write(java_record)
    with pytest.raises(StoreError, match="redo.1 is not a metaq-py transaction journal"):
        open_journal(directory, files)


def test_a_java_journal_file_is_left_as_it_was(directory, files):
    os.makedirs(directory)
    java_record = struct.pack(">i", 12) + bytes.fromhex("0802 1208 0a06 54583a733a31")
    with open(redo(directory, 1), "wb") as file:
        file.write(java_record)
    with pytest.raises(StoreError):
        open_journal(directory, files)
    with open(redo(directory, 1), "rb") as file:
        assert file.read() == java_record


def test_a_file_torn_while_being_created_gets_its_magic(directory, files):
    os.makedirs(directory)
    with open(redo(directory, 1), "wb") as file:
        file.write(FILE_MAGIC[:3])
    journal, replayed = open_journal(directory, files)
    assert (replayed, journal.end) == ([], JournalLocation(1, len(FILE_MAGIC)))


def test_an_appended_record_reaches_the_file_only_when_staged_records_are_written(directory, files):
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:1"))
    before = file_size(redo(directory, 1))
    journal.write_staged()
    assert (before, file_size(redo(directory, 1))) == (8, 8 + 17)


def test_records_staged_for_one_file_are_written_with_one_write(directory, files):
    journal, _ = open_journal(directory, files)
    files.events.clear()
    for number in range(3):
        journal.append(PrepareRecord(f"TX:s:{number}"))
    journal.write_staged()
    assert files.events == [("write", REDO_1)]


def test_sync_writes_the_staged_records_before_the_fsync(directory, files):
    executor = ManualExecutor()
    journal, _ = open_journal(directory, files, executor=executor, mode=1)
    executor.run_all()
    files.events.clear()
    journal.append(PrepareRecord("TX:s:1"))
    syncs(journal)
    executor.run_all()
    assert files.of(REDO_1) == ["write", "fsync"]


def test_close_writes_the_staged_records(directory, files):
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:1"))
    journal.close()
    assert file_size(redo(directory, 1)) == 8 + 17


# -- placement and rolling ---------------------------------------------------------------


def test_the_current_file_rolls_when_a_new_transaction_starts_past_the_maximum(directory, files):
    journal, _ = open_journal(directory, files, file_bytes_max=40)
    first = journal.append(append("TX:s:1"))  # 8 + 58 bytes: past the maximum
    journal.retain(first.number)
    second = journal.append(append("TX:s:2"))
    assert (first.number, second) == (1, JournalLocation(2, len(FILE_MAGIC)))


def test_the_current_file_does_not_roll_below_the_maximum(directory, files):
    journal, _ = open_journal(directory, files, file_bytes_max=1000)
    journal.append(append("TX:s:1"))
    assert journal.append(append("TX:s:2")).number == 1


def test_records_of_an_older_transaction_keep_going_to_its_own_file(directory, files):
    """Goal: a transaction's records never span files (zk spec section 4.4).

    Method: start transaction 1 in redo.1, let transaction 2 start in redo.2 after the
    roll, then append transaction 1's prepare with its file number.
    """
    journal, _ = open_journal(directory, files, file_bytes_max=40)
    first = journal.append(append("TX:s:1"))
    journal.retain(first.number)
    journal.retain(journal.append(append("TX:s:2")).number)
    journal.write_staged()
    end_of_first = file_size(redo(directory, 1))
    location = journal.append(PrepareRecord("TX:s:1"), first.number)
    assert location == JournalLocation(1, end_of_first)


def test_appending_to_a_transaction_file_never_rolls(directory, files):
    journal, _ = open_journal(directory, files, file_bytes_max=40)
    first = journal.append(append("TX:s:1"))
    journal.retain(first.number)
    for _ in range(3):
        journal.append(append("TX:s:1"), first.number)
    assert journal.file_numbers == [1]


# -- deletion ----------------------------------------------------------------------------


def rolled_journal(directory, files, **options):
    """A journal whose redo.1 holds transaction 1 (retained) and whose current file is redo.2."""
    journal, _ = open_journal(directory, files, file_bytes_max=40, **options)
    journal.retain(journal.append(append("TX:s:1")).number)
    journal.retain(journal.append(append("TX:s:2")).number)
    assert journal.file_numbers == [1, 2]
    return journal


def test_a_file_still_referenced_is_kept_after_the_roll(directory, files):
    rolled_journal(directory, files)
    assert os.path.exists(redo(directory, 1))


def test_a_file_is_deleted_once_not_current_and_its_references_drop_to_zero(directory, files):
    journal = rolled_journal(directory, files)
    journal.release(1)
    assert (os.path.exists(redo(directory, 1)), journal.file_numbers) == (False, [2])


def test_an_unused_file_is_unlinked_by_the_background_executor_not_the_caller(
    directory, files, caplog
):
    """Goal: unlinking a full journal file (milliseconds: its blocks are freed) never stalls
    the reactor thread; the journal forgets the file at once and logs the deletion once the
    background job ran.

    Method: a held background executor (ManualExecutor); release the rolled-past file.
    """
    background = ManualExecutor()
    journal = rolled_journal(directory, files, background=background)
    journal.release(1)
    assert (journal.file_numbers, os.path.exists(redo(directory, 1))) == ([2], True)
    assert "remove" not in files.of(REDO_1)
    with caplog.at_level(logging.INFO, logger="meta.tx"):
        background.run_all()
    assert not os.path.exists(redo(directory, 1))
    assert f"deleted journal file {redo(directory, 1)}" in caplog.text


def test_a_failed_unlink_is_logged_and_the_journal_keeps_working(directory, files, caplog):
    background = ManualExecutor()
    journal = rolled_journal(directory, files, background=background)
    journal.release(1)
    os.remove(redo(directory, 1))  # the unlink will fail: ENOENT
    with caplog.at_level(logging.ERROR, logger="meta.tx"):
        background.run_all()
    assert f"could not delete journal file {redo(directory, 1)}" in caplog.text
    journal.append(append("TX:s:3"))
    journal.write_staged()
    assert journal.failed is None


def test_a_file_with_two_transactions_is_kept_until_both_finish(directory, files):
    journal, _ = open_journal(directory, files, file_bytes_max=100)
    journal.retain(journal.append(append("TX:s:1")).number)
    journal.retain(journal.append(append("TX:s:2")).number)
    journal.retain(journal.append(append("TX:s:3")).number)  # rolls to redo.2
    journal.release(1)
    assert os.path.exists(redo(directory, 1))


def test_the_current_file_is_not_deleted_when_its_references_drop_to_zero(directory, files):
    journal, _ = open_journal(directory, files)
    journal.retain(journal.append(append("TX:s:1")).number)
    journal.release(1)
    assert journal.file_numbers == [1] and os.path.exists(redo(directory, 1))


def test_an_unused_file_is_deleted_when_the_journal_rolls_past_it(directory, files):
    journal, _ = open_journal(directory, files, file_bytes_max=40)
    journal.retain(journal.append(append("TX:s:1")).number)
    journal.release(1)
    journal.append(append("TX:s:2"))
    assert journal.file_numbers == [2] and not os.path.exists(redo(directory, 1))


def test_a_file_is_not_deleted_while_an_fsync_of_it_runs(directory, files):
    """Goal: a released file is removed only after the fsync that covers it finished.

    Method: hold the flush batch that fsyncs redo.1 (ManualExecutor), release the last
    reference meanwhile, then run the batch and look at the order of events on redo.1.
    """
    executor = ManualExecutor()
    journal = rolled_journal(directory, files, executor=executor)
    journal.append(RollbackRecord("TX:s:1", False, 0), 1)
    answers = syncs(journal)
    journal.release(1)
    assert os.path.exists(redo(directory, 1))
    executor.run_all()
    assert answers == [None]
    assert files.of(REDO_1)[-2:] == ["fsync", "remove"]


def test_replay_deletes_the_files_below_the_checkpoint(directory, files):
    journal = rolled_journal(directory, files)
    journal.close()
    open_journal(directory, files, start=JournalLocation(2, len(FILE_MAGIC)))
    assert sorted(os.listdir(directory)) == ["redo.2"]


def test_replay_starts_at_the_checkpoint_position(directory, files):
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:1"))
    second = journal.append(PrepareRecord("TX:s:2"))
    journal.close()
    _, replayed = open_journal(directory, files, start=second)
    assert replayed == [(second, PrepareRecord("TX:s:2"))]


def test_sweep_deletes_every_unreferenced_file_but_the_current_one(directory, files):
    journal = rolled_journal(directory, files)
    journal.close()
    journal, _ = open_journal(directory, files, file_bytes_max=40)
    journal.sweep()
    assert journal.file_numbers == [2]


# -- durability --------------------------------------------------------------------------


def test_mode_1_sync_answers_only_after_the_fsync_batch_ran(directory, files):
    executor = ManualExecutor()
    journal, _ = open_journal(directory, files, executor=executor, mode=1)
    journal.append(PrepareRecord("TX:s:1"))
    answers = syncs(journal)
    assert (answers, files.count("fsync")) == ([], 0)
    executor.run_all()
    assert answers == [None] and files.of(REDO_1)[-1] == "fsync"


def test_mode_1_fsyncs_a_new_file_and_its_directory_entry(directory, files):
    executor = ManualExecutor()
    journal, _ = open_journal(directory, files, executor=executor, mode=1)
    syncs(journal)
    executor.run_all()
    assert ("fsync_directory", "transactions") in files.events and "fsync" in files.of(REDO_1)


def test_mode_1_syncs_arriving_during_an_fsync_share_the_next_one(directory, files):
    """Goal: concurrent commits share fsyncs (group commit of the journal).

    Method: one sync starts a batch; two more records and syncs arrive while it is held;
    running everything must answer all three with two fsyncs of redo.1, not three.
    """
    executor = ManualExecutor()
    journal, _ = open_journal(directory, files, executor=executor, mode=1)
    journal.append(PrepareRecord("TX:s:1"))
    answers = syncs(journal)
    journal.append(PrepareRecord("TX:s:2"))
    journal.sync(answers.append)
    journal.append(PrepareRecord("TX:s:3"))
    journal.sync(answers.append)
    executor.run_all()
    assert (answers, files.of(REDO_1).count("fsync")) == ([None] * 3, 2)


class _Busy:
    """A flush client with nothing to sync but a task: it keeps the flusher busy."""

    def flush_snapshot(self):
        return self

    def run(self):
        pass

    def flush_done(self, task):
        pass

    def flush_failed(self, task, error):
        pass


def test_mode_1_syncs_waiting_for_the_flusher_share_one_fsync(directory, files):
    """Goal: syncs that queue up while the flusher is busy are answered by one fsync.

    Method: keep the flusher busy with another client, then write and sync twice.
    """
    executor = ManualExecutor()
    flusher = Flusher(executor)
    journal, _ = open_journal(directory, files, flusher=flusher)
    flusher.request(_Busy())
    answers = []
    for number in range(2):
        journal.append(PrepareRecord(f"TX:s:{number}"))
        journal.sync(answers.append)
    executor.run_all()
    assert (answers, files.of(REDO_1).count("fsync")) == ([None, None], 1)


def test_mode_1_a_sync_with_nothing_written_still_answers(directory, files):
    executor = ManualExecutor()
    journal, _ = open_journal(directory, files, executor=executor, mode=1)
    syncs(journal)
    executor.run_all()
    answers = syncs(journal)
    executor.run_all()
    assert answers == [None]


def test_mode_0_sync_answers_at_once_without_an_fsync(directory, files):
    clock = Clock()
    journal, _ = open_journal(directory, files, mode=0, clock=clock)
    journal.append(PrepareRecord("TX:s:1"))
    answers = syncs(journal)
    clock.advance(10)
    assert (answers, files.count("fsync")) == ([None], 0)


def test_mode_2_sync_answers_at_once_before_any_fsync(directory, files):
    journal, _ = open_journal(directory, files, mode=2)
    journal.append(PrepareRecord("TX:s:1"))
    assert (syncs(journal), files.count("fsync")) == ([None], 0)


def test_mode_2_fsyncs_the_written_files_once_a_second(directory, files):
    clock = Clock()
    journal, _ = open_journal(directory, files, mode=2, clock=clock)
    journal.append(PrepareRecord("TX:s:1"))
    clock.advance(0.999)
    assert files.count("fsync") == 0
    clock.advance(0.001)
    assert files.of(REDO_1).count("fsync") == 1


def test_mode_2_does_not_fsync_when_nothing_was_written(directory, files):
    clock = Clock()
    journal, _ = open_journal(directory, files, mode=2, clock=clock)
    clock.advance(1)
    files.events.clear()
    clock.advance(5)
    assert files.count("fsync") == 0


def test_an_fsync_failure_fails_the_waiting_syncs(directory, files):
    executor = ManualExecutor()
    journal, _ = open_journal(directory, files, executor=executor, mode=1)
    journal.append(PrepareRecord("TX:s:1"))
    answers = syncs(journal)
    files.fsync_error = EIO
    executor.run_all()
    assert len(answers) == 1 and isinstance(answers[0], JournalError)


def test_after_an_fsync_failure_every_append_fails(directory, files):
    executor = ManualExecutor()
    journal, _ = open_journal(directory, files, executor=executor, mode=1)
    journal.append(PrepareRecord("TX:s:1"))
    syncs(journal)
    files.fsync_error = EIO
    executor.run_all()
    files.fsync_error = None
    with pytest.raises(JournalError):
        journal.append(PrepareRecord("TX:s:2"))


def test_after_an_fsync_failure_every_later_sync_fails(directory, files):
    executor = ManualExecutor()
    journal, _ = open_journal(directory, files, executor=executor, mode=1)
    journal.append(PrepareRecord("TX:s:1"))
    syncs(journal)
    files.fsync_error = EIO
    executor.run_all()
    files.fsync_error = None
    answers = syncs(journal)
    assert len(answers) == 1 and isinstance(answers[0], JournalError)


def test_a_failed_write_fails_the_journal_for_good(directory, files):
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:1"))
    files.write_error = ENOSPC
    journal.write_staged()
    files.write_error = None
    with pytest.raises(JournalError):
        journal.append(PrepareRecord("TX:s:2"))


def test_a_failed_write_fails_the_sync_that_wrote_it(directory, files):
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:1"))
    files.write_error = ENOSPC
    answers = syncs(journal)
    assert len(answers) == 1 and isinstance(answers[0], JournalError)


def test_a_write_failing_after_a_short_write_is_cut_back(directory, files):
    # Mode 0 answers a sync once written: the first record stays, only the failed one goes.
    journal, _ = open_journal(directory, files, mode=0)
    journal.append(PrepareRecord("TX:s:1"))
    journal.write_staged()
    journal.append(PrepareRecord("TX:s:2"))
    files.short_write_bytes = 5
    write, calls = files.write, []

    def write_then_fail(fd, data, position):
        calls.append(position)
        if len(calls) == 2:
            raise OSError(ENOSPC, "No space left on device")
        return write(fd, data, position)

    files.write = write_then_fail
    journal.write_staged()
    assert (journal.failed is not None, file_size(redo(directory, 1))) == (True, 8 + 17)


def test_a_short_write_is_completed(directory, files):
    journal, _ = open_journal(directory, files)
    files.short_write_bytes = 3
    journal.append(PrepareRecord("TX:s:1"))
    files.short_write_bytes = None
    journal.close()
    _, replayed = open_journal(directory, files)
    assert [entry for _, entry in replayed] == [PrepareRecord("TX:s:1")]


# -- versions ----------------------------------------------------------------------------


def write_v1_file(directory, number: int, *records) -> None:
    """A redo file as a broker of journal version 1 wrote it (kinds 1 to 5 only)."""
    os.makedirs(directory, exist_ok=True)
    with open(redo(directory, number), "wb") as file:
        file.write(FILE_MAGIC_V1 + b"".join(encode(entry) for entry in records))


def test_a_version_1_file_is_replayed(directory, files):
    write_v1_file(directory, 1, append("TX:s:1"), PrepareRecord("TX:s:1"))
    _, replayed = open_journal(directory, files)
    assert [entry for _location, entry in replayed] == [append("TX:s:1"), PrepareRecord("TX:s:1")]


def test_new_transactions_never_go_to_a_version_1_file(directory, files):
    """Goal: after an upgrade, a version 1 file gets no new transaction (a broker of version
    1 could then still read it), but keeps taking its own transactions' records.

    Method: start on a version 1 file holding a prepared branch; start a new transaction,
    add a record of the old one, and look at both files.
    """
    write_v1_file(directory, 1, append("XID:1:0a:0b:q"), PrepareRecord("XID:1:0a:0b:q"))
    journal, _ = open_journal(directory, files)
    journal.retain(1)
    assert journal.end == JournalLocation(2, len(FILE_MAGIC))
    assert journal.append(PrepareRecord("TX:s:2")).number == 2
    assert journal.append(RollbackRecord("XID:1:0a:0b:q", True, 0), 1).number == 1
    journal.write_staged()
    with open(redo(directory, 1), "rb") as old, open(redo(directory, 2), "rb") as new:
        assert (old.read(8), new.read(8)) == (FILE_MAGIC_V1, FILE_MAGIC)


def test_a_version_1_file_is_kept_until_its_transactions_finish(directory, files):
    write_v1_file(directory, 1, append("XID:1:0a:0b:q"), PrepareRecord("XID:1:0a:0b:q"))
    journal, _ = open_journal(directory, files)
    journal.retain(1)
    journal.sweep()
    assert journal.file_numbers == [1, 2]
    journal.release(1)
    assert journal.file_numbers == [2]


def test_a_file_of_a_newer_version_stops_the_start_with_an_error_naming_it(directory, files):
    os.makedirs(directory)
    with open(redo(directory, 1), "wb") as file:
        file.write(b"metaqtx\x03" + encode(PrepareRecord("TX:s:1")))
    with pytest.raises(StoreError, match="redo.1 is not a metaq-py transaction journal"):
        open_journal(directory, files)


# -- when staged records are written -------------------------------------------------------


def test_records_staged_while_a_flush_is_requested_wait_for_its_snapshot(directory, files):
    """Goal: in mode 1, the end of a read does not write records a requested flush will
    write anyway: commits staged while an fsync runs share one write.

    Method: hold a running flush (ManualExecutor); stage and sync two records in two
    "reads", ending each with ``end_of_batch``; count the writes, then run the flushes.
    """
    executor = ManualExecutor()
    journal, _ = open_journal(directory, files, executor=executor)
    journal.append(PrepareRecord("TX:s:1"))
    first = syncs(journal)  # the flusher was idle: its snapshot wrote this record at once
    writes = files.count("write")
    journal.append(PrepareRecord("TX:s:2"))
    second = syncs(journal)
    journal.end_of_batch()
    journal.append(PrepareRecord("TX:s:3"))
    third = syncs(journal)
    journal.end_of_batch()
    assert files.count("write") == writes
    executor.run_next()
    assert (first, second, third) == ([None], [], [])
    assert files.count("write") == writes + 1
    executor.run_all()
    assert (second, third) == ([None], [None])
    assert file_size(redo(directory, 1)) == len(FILE_MAGIC) + 3 * 17


def test_records_staged_with_no_flush_requested_are_written_at_the_end_of_the_read(
    directory, files
):
    journal, _ = open_journal(directory, files, mode=2)
    journal.append(PrepareRecord("TX:s:1"))
    journal.end_of_batch()
    assert file_size(redo(directory, 1)) == len(FILE_MAGIC) + 17


def test_a_failed_write_in_group_commit_cuts_every_unsynced_record(directory, files):
    """Goal: a journal failing in group commit keeps only what a sync answered (DECISIONS 3).
    Method: sync one PREPARE, write a second without a sync, fail the write of a third; the
    file is cut back to the end of the synced record and a replay yields only it."""
    journal, _ = open_journal(directory, files)
    journal.append(PrepareRecord("TX:s:1"))
    assert syncs(journal) == [None]
    synced_size = file_size(redo(directory, 1))
    journal.append(PrepareRecord("TX:s:2"))
    journal.write_staged()
    assert file_size(redo(directory, 1)) > synced_size
    journal.append(PrepareRecord("TX:s:3"))
    files.write_error = ENOSPC
    journal.write_staged()
    files.write_error = None
    assert journal.failed is not None
    assert file_size(redo(directory, 1)) == synced_size
    assert [record.key for _, record in journal_records(directory)] == ["TX:s:1"]


def test_a_failed_fsync_in_group_commit_cuts_the_records_it_covered(directory, files):
    executor = ManualExecutor()
    journal, _ = open_journal(directory, files, executor=executor)
    journal.append(PrepareRecord("TX:s:1"))
    syncs(journal)
    executor.run_all()
    synced_size = file_size(redo(directory, 1))
    journal.append(PrepareRecord("TX:s:2"))
    answers = syncs(journal)
    files.fsync_error = EIO
    executor.run_all()
    files.fsync_error = None
    assert len(answers) == 1 and isinstance(answers[0], JournalError)
    assert file_size(redo(directory, 1)) == synced_size


def test_a_roll_without_a_free_descriptor_keeps_the_current_file(directory, files):
    """Goal: EMFILE when the journal rolls is transient. Method: a tiny file size makes the
    second transaction roll; its open fails with EMFILE, the record goes to the current file
    and syncs; once descriptors are free the next transaction rolls to redo.2."""
    journal, _ = open_journal(directory, files, file_bytes_max=16)
    journal.retain(journal.append(PrepareRecord("TX:s:1")).number)
    open_file = files.open

    def no_descriptor(path, *, create=False, writable=True):
        raise OSError(EMFILE, "Too many open files")

    files.open = no_descriptor
    location = journal.append(PrepareRecord("TX:s:2"))
    assert (location.number, syncs(journal), journal.failed) == (1, [None], None)
    files.open = open_file
    assert journal.append(PrepareRecord("TX:s:3")).number == 2


def test_a_flush_without_a_free_descriptor_is_retried_and_its_sync_answered(directory, files):
    """Goal: EMFILE while the journal fsyncs its directory is transient. Method: a new file
    makes the directory dirty; its fsync fails with EMFILE, so the sync is not answered and
    the journal stays usable; once descriptors are free the retry answers it."""
    clock = Clock()
    journal, _ = open_journal(directory, files, clock=clock)
    fsync_directory = files.fsync_directory

    def no_descriptor(path):
        raise OSError(EMFILE, "Too many open files")

    files.fsync_directory = no_descriptor
    journal.append(PrepareRecord("TX:s:1"))
    answers = syncs(journal)
    assert (answers, journal.failed) == ([], None)
    files.fsync_directory = fsync_directory
    clock.advance(journal_module.DESCRIPTOR_RETRY_S)
    assert (answers, journal.failed) == ([None], None)
