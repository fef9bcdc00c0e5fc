"""A failed write or fsync cuts the partition back to its acknowledged end (DECISIONS 3, 4),
and running out of file descriptors is transient (meta.store.tail_cut, PartitionLog)."""

from __future__ import annotations

import errno
import os

from twisted.python.failure import Failure

from meta.errors import DescriptorShortageError, PartitionFailedError
from meta.protocol.message import iter_messages
from tests.store.conftest import (
    EIO,
    ENOSPC,
    ManualExecutor,
    RecordingFiles,
    collect,
    open_partition,
    record,
)

EMFILE = errno.EMFILE


def stored_payloads(directory: str) -> list[bytes]:
    """The payloads of every whole record in the directory's segments, read without the store."""
    data = b"".join(
        open(os.path.join(directory, name), "rb").read()  # noqa: SIM115 - read whole, closed by gc
        for name in sorted(os.listdir(directory))
        if name.endswith(".meta")
    )
    return [message.payload for message in iter_messages(data)]


def outcome(box: list) -> object:
    """The offset an append was acknowledged with, or its error's class."""
    assert len(box) == 1
    return box[0].value.__class__ if isinstance(box[0], Failure) else box[0]


def test_a_failed_fsync_cuts_every_unacknowledged_record(tmp_path, files):
    """Goal: a put answered 500 because its fsync failed is not in the file. Method: group
    commit; one append is acknowledged, two more are written and wait for their fsync, which
    fails; the file then holds only the first record, the partition is failed."""
    directory = str(tmp_path / "test-0")
    executor = ManualExecutor()
    log = open_partition(directory, files=files, executor=executor)
    first = collect(log.append(record(b"acknowledged")))
    executor.run_all()
    waiting = [collect(log.append(record(b"waiting-%d" % n))) for n in range(2)]
    assert stored_payloads(directory)[-1] == b"waiting-1"
    files.fsync_error = EIO
    executor.run_all()
    assert [outcome(first), *map(outcome, waiting)] == [0, *[PartitionFailedError] * 2]
    assert stored_payloads(directory) == [b"acknowledged"]
    assert (log.failed is not None, log.written_end, log.max_offset) == (True, 32, 32)


def test_a_failed_write_cuts_the_records_written_before_it_too(tmp_path, files):
    """Goal: not only the failing write is undone. Method: group commit; a commit is written
    and waits for its fsync when the next write fails with ENOSPC: both appends fail and
    neither is in the file."""
    directory = str(tmp_path / "test-0")
    executor = ManualExecutor()
    log = open_partition(directory, files=files, executor=executor)
    collect(log.append(record(b"acknowledged")))
    executor.run_all()
    written = collect(log.append(record(b"written, not synced")))
    files.write_error = ENOSPC
    failed = collect(log.append(record(b"refused by the disk")))
    files.write_error = None
    assert [outcome(written), outcome(failed)] == [PartitionFailedError] * 2
    executor.run_all()
    assert stored_payloads(directory) == [b"acknowledged"]


def test_threshold_mode_keeps_the_records_it_acknowledged_before_their_fsync(tmp_path, files):
    directory = str(tmp_path / "test-0")
    executor = ManualExecutor()
    log = open_partition(directory, files=files, executor=executor, threshold=1000)
    acknowledged = [collect(log.append(record(b"acked-%d" % n))) for n in range(3)]
    assert [outcome(box) for box in acknowledged] == [0, 27, 54]
    files.write_error = ENOSPC
    collect(log.append(record(b"refused")))
    assert stored_payloads(directory) == [b"acked-0", b"acked-1", b"acked-2"]


def test_a_cut_across_a_roll_unlinks_the_new_segment_and_the_partition_reopens(tmp_path, files):
    """Goal: a roll after the acknowledged end leaves no file that breaks contiguity. Method:
    small segments; the unacknowledged appends fill the first segment and roll to a second;
    the fsync fails; the second file is gone, the first cut, and the directory reopens with
    the acknowledged record only."""
    directory = str(tmp_path / "test-0")
    executor = ManualExecutor()
    log = open_partition(directory, files=files, executor=executor, segment_bytes_max=100)
    collect(log.append(record(b"acknowledged")))
    executor.run_all()
    waiting = [collect(log.append(record(b"x" * 30))) for _ in range(3)]
    assert len(log.segments) == 2
    files.fsync_error = EIO
    executor.run_all()
    assert [outcome(box) for box in waiting] == [PartitionFailedError] * 3
    assert sorted(os.listdir(directory)) == ["00000000000000000000.meta"]
    log.close()
    reopened = open_partition(directory)
    assert (reopened.max_offset, stored_payloads(directory)) == (32, [b"acknowledged"])


def test_a_cut_that_the_disk_refuses_is_logged_and_the_partition_still_fails(
    tmp_path, files, caplog
):
    directory = str(tmp_path / "test-0")
    executor = ManualExecutor()
    log = open_partition(directory, files=files, executor=executor)
    waiting = collect(log.append(record(b"waiting")))

    def read_only(fd, size):
        raise OSError(errno.EROFS, "Read-only file system")

    files.truncate = read_only
    files.fsync_error = errno.EROFS
    executor.run_all()
    assert outcome(waiting) is PartitionFailedError
    assert "cannot cut it back to the acknowledged end 0" in caplog.text


def test_a_roll_without_a_free_descriptor_refuses_the_append_and_retries(tmp_path, files):
    """Goal: EMFILE when the next segment must be opened is transient. Method: the first
    append fills the segment; opening the next one fails with EMFILE, so the second append
    gets DescriptorShortageError and the partition stays open; once descriptors are free,
    the third append rolls and is acknowledged right after the first."""
    directory = str(tmp_path / "test-0")
    log = open_partition(directory, files=files, segment_bytes_max=40)
    open_file = files.open

    def no_descriptor(path, *, create=False, writable=True):
        raise OSError(EMFILE, "Too many open files")

    files.open = no_descriptor
    first = collect(log.append(record(b"x" * 30)))
    second = collect(log.append(record(b"refused")))
    files.open = open_file
    third = collect(log.append(record(b"after")))
    assert [outcome(first), outcome(second), outcome(third)] == [0, DescriptorShortageError, 50]
    assert (log.failed, len(log.segments)) == (None, 2)
    assert stored_payloads(directory) == [b"x" * 30, b"after"]


class NoDirectoryDescriptor(RecordingFiles):
    """Directory fsyncs fail with EMFILE while ``short`` is set."""

    short = False

    def fsync_directory(self, path: str) -> None:
        if self.short:
            raise OSError(EMFILE, "Too many open files")
        super().fsync_directory(path)


def test_a_flush_without_a_free_descriptor_cuts_back_and_the_partition_recovers(tmp_path):
    """Goal: EMFILE in a flush (the directory fsync after a roll) is transient. Method: the
    appends roll to a new segment; the flush cannot open the directory, so they get
    DescriptorShortageError, the new file is unlinked and the log ends where it was; once
    descriptors are free the same appends are acknowledged at the same offsets."""
    directory = str(tmp_path / "test-0")
    files = NoDirectoryDescriptor()
    executor = ManualExecutor()
    log = open_partition(directory, files=files, executor=executor, segment_bytes_max=40)
    collect(log.append(record(b"acknowledged")))
    executor.run_all()
    files.short = True
    waiting = [collect(log.append(record(b"y" * 30))) for _ in range(2)]
    executor.run_all()
    assert [outcome(box) for box in waiting] == [DescriptorShortageError] * 2
    assert (log.failed, log.written_end, stored_payloads(directory)) == (
        None,
        32,
        [b"acknowledged"],
    )
    files.short = False
    again = [collect(log.append(record(b"y" * 30))) for _ in range(2)]
    executor.run_all()
    assert [outcome(box) for box in again] == [32, 82]
    assert stored_payloads(directory) == [b"acknowledged", b"y" * 30, b"y" * 30]


def counters(log) -> tuple[int, int, int, int]:
    """What the stats show of a partition: messages, bytes, appended messages and bytes."""
    return log.message_count, log.byte_count, log.appended_messages, log.appended_bytes


def test_appends_cut_by_a_failed_fsync_do_not_count_as_stored(tmp_path, files):
    """Goal: the stats count only what the log keeps. Method: one append is acknowledged,
    two more are written and cut back when their fsync fails; every counter then shows the
    first append alone, as it did before the two were written."""
    directory = str(tmp_path / "test-0")
    executor = ManualExecutor()
    log = open_partition(directory, files=files, executor=executor)
    collect(log.append(record(b"acknowledged")))
    executor.run_all()
    assert counters(log) == (1, 32, 1, 32)
    waiting = [collect(log.append(record(b"waiting-%d" % n))) for n in range(2)]
    assert log.message_count == 3
    files.fsync_error = EIO
    executor.run_all()
    assert [outcome(box) for box in waiting] == [PartitionFailedError] * 2
    assert counters(log) == (1, 32, 1, 32)


def test_appends_cut_across_a_roll_do_not_count_as_stored(tmp_path, files):
    """Goal: a cut that unlinks a rolled segment corrects the counters too. Method: small
    segments; three unacknowledged appends fill the first segment and roll to a second;
    the fsync fails; the counters show the acknowledged append alone."""
    directory = str(tmp_path / "test-0")
    executor = ManualExecutor()
    log = open_partition(directory, files=files, executor=executor, segment_bytes_max=100)
    collect(log.append(record(b"acknowledged")))
    executor.run_all()
    [collect(log.append(record(b"x" * 30))) for _ in range(3)]
    assert (len(log.segments), log.message_count) == (2, 4)
    files.fsync_error = EIO
    executor.run_all()
    assert counters(log) == (1, 32, 1, 32)


def test_appends_cut_for_want_of_a_descriptor_do_not_count_and_later_ones_do(tmp_path):
    """Goal: after a transient cut the partition counts on from the right numbers. Method:
    the flush after a roll cannot open the directory (EMFILE), the two appends are cut; once
    descriptors are free the same two are acknowledged: three appends count."""
    directory = str(tmp_path / "test-0")
    files = NoDirectoryDescriptor()
    executor = ManualExecutor()
    log = open_partition(directory, files=files, executor=executor, segment_bytes_max=40)
    collect(log.append(record(b"acknowledged")))
    executor.run_all()
    files.short = True
    [collect(log.append(record(b"y" * 30))) for _ in range(2)]
    executor.run_all()
    assert counters(log) == (1, 32, 1, 32)
    files.short = False
    [collect(log.append(record(b"y" * 30))) for _ in range(2)]
    executor.run_all()
    assert counters(log) == (3, 132, 3, 132)


def test_a_partial_write_the_disk_refuses_to_cut_is_named_for_the_operator(tmp_path, files, caplog):
    """Goal: when a write stops part way (whole records of its batch may be in the file)
    and the disk refuses to cut them, the partition's log names every offset a restart may
    serve and the command that drops them. Method: the second append's write takes the
    first record of its batch, then fails with EROFS, and so does the truncation."""
    directory = str(tmp_path / "test-0")
    log = open_partition(directory, files=files)
    collect(log.append(record(b"acknowledged")))
    kept = log.max_offset
    original_write = files.write
    calls = []

    def first_record_only(fd, data, position):
        calls.append(position)
        if len(calls) > 1:
            raise OSError(errno.EROFS, "Read-only file system")
        return original_write(fd, data[: len(record(b"one"))], position)

    def read_only(fd, size):
        raise OSError(errno.EROFS, "Read-only file system")

    files.write, files.truncate = first_record_only, read_only
    batch = [record(b"one"), record(b"two")]
    answers = []
    for data in batch:  # one write for both
        log.stage(data, lambda offset, error: answers.append(error.__class__ if error else offset))
    log.commit()
    assert answers == [PartitionFailedError] * 2
    end = kept + sum(len(data) for data in batch)
    assert f"may serve records of offsets {kept} to {end}" in caplog.text
    assert f"meta-admin truncate-partition {tmp_path} test-0 --end {kept} --execute" in (
        caplog.text
    )
