"""The cut a failed partition owes is recorded and made by the next start
(meta.store.pending_truncation, PartitionLog._fail, StoreManager.load)."""

from __future__ import annotations

import errno
import os

import pytest

from meta.errors import PartitionFailedError, StoreError
from meta.store.pending_truncation import (
    FALLBACK_DIRECTORY,
    RECORD_NAME,
    PendingTruncations,
    cut_partition_files,
    parse_record,
    record_text,
)
from tests.store.conftest import (
    EIO,
    ManualExecutor,
    RecordingFiles,
    broker_config,
    collect,
    open_partition,
    record,
    topic_config,
)
from tests.store.test_manager import manager_for
from tests.store.test_tail_cut import outcome, stored_payloads


def refuse_cut(files: RecordingFiles) -> None:
    """The disk refuses the truncation of segments (and their fsyncs, set by the caller)."""

    real_truncate = files.truncate

    def read_only(fd, size):
        if files.names[fd].endswith(".meta"):
            raise OSError(errno.EROFS, "Read-only file system")
        real_truncate(fd, size)

    files.truncate = read_only


def failed_partition(tmp_path, files: RecordingFiles, roots: list[str]):
    """A partition with one acknowledged record and one answered 500 whose cut was refused."""
    directory = str(tmp_path / "data" / "test-0")
    executor = ManualExecutor()
    log = open_partition(directory, files=files, executor=executor)
    log.truncation = PendingTruncations(files, roots).of(directory, "test-0")
    acknowledged = collect(log.append(record(b"acknowledged")))
    executor.run_all()
    refused = collect(log.append(record(b"refused")))
    refuse_cut(files)
    files.fsync_error, files.fsync_error_only = EIO, "test-0/0"
    executor.run_all()
    assert (outcome(acknowledged), outcome(refused)) == (0, PartitionFailedError)
    assert stored_payloads(directory) == [b"acknowledged", b"refused"]  # the cut was refused
    return log, directory


def test_the_record_round_trips_and_a_damaged_one_is_refused():
    text = record_text("orders-3", 1234)
    assert text.startswith(b"metaq-pending-truncation 1\norders-3 1234\n")
    assert parse_record(text, "orders-3", "r") == 1234
    # The example of docs/formats.md §3.5.
    example = b"metaq-pending-truncation 1\norders-0 225310\n2044635157\n"
    assert record_text("orders-0", 225310) == example
    with pytest.raises(StoreError, match="damaged"):
        parse_record(text.replace(b"1234", b"1235"), "orders-3", "r")
    with pytest.raises(StoreError, match="not about orders-4"):
        parse_record(text, "orders-4", "r")


def test_a_refused_cut_is_recorded_next_to_the_partition_and_made_at_the_next_start(
    tmp_path, files, caplog
):
    log, directory = failed_partition(tmp_path, files, [])
    assert f"recorded in {os.path.join(directory, RECORD_NAME)}" in caplog.text
    assert "meta-admin truncate-partition" in caplog.text
    log.close()
    truncations = PendingTruncations(RecordingFiles(), [])
    truncations.apply_pending(directory, "test-0")
    assert stored_payloads(directory) == [b"acknowledged"]
    assert not os.path.exists(os.path.join(directory, RECORD_NAME))
    assert "cut 27 bytes after offset 32" in caplog.text
    truncations.apply_pending(directory, "test-0")  # no record: nothing happens
    assert stored_payloads(directory) == [b"acknowledged"]


def test_when_the_partition_directory_refuses_the_record_another_root_takes_it(tmp_path, files):
    other = tmp_path / "data-log"
    other.mkdir()
    real_open = files.open

    def open_refused_in_partition(path, *, create=False, writable=True):
        if os.path.basename(path).startswith(RECORD_NAME):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_open(path, create=create, writable=writable)

    files.open = open_refused_in_partition
    log, directory = failed_partition(tmp_path, files, [str(other)])
    log.close()
    path = other / FALLBACK_DIRECTORY / "test-0"
    assert parse_record(path.read_bytes(), "test-0", str(path)) == 32
    PendingTruncations(RecordingFiles(), [str(other)]).apply_pending(directory, "test-0")
    assert stored_payloads(directory) == [b"acknowledged"]
    assert not path.exists()


def test_with_no_place_for_the_record_the_close_tries_again_then_names_the_command(
    tmp_path, files, caplog
):
    real_open = files.open
    refusing = [True]

    def open_records_refused(path, *, create=False, writable=True):
        if refusing[0] and (RECORD_NAME in path or FALLBACK_DIRECTORY in path):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_open(path, create=create, writable=writable)

    files.open = open_records_refused
    other = tmp_path / "data-log"
    other.mkdir()
    log, directory = failed_partition(tmp_path, files, [str(other)])
    assert "nor record the cut: a restart may serve records of offsets 32 to 59" in caplog.text
    refusing[0] = False  # the disk takes writes again before the broker stops
    log.truncation.retry()
    log.close()
    assert "recorded the cut back to offset 32" in caplog.text
    PendingTruncations(RecordingFiles(), [str(other)]).apply_pending(directory, "test-0")
    assert stored_payloads(directory) == [b"acknowledged"]


def test_a_cut_that_still_fails_at_start_stops_it_and_keeps_the_record(tmp_path, files):
    log, directory = failed_partition(tmp_path, files, [])
    log.close()
    still_failing = RecordingFiles()
    refuse_cut(still_failing)
    with pytest.raises(StoreError, match=r"must be cut back to offset 32 .*--end 32 --execute"):
        PendingTruncations(still_failing, []).apply_pending(directory, "test-0")
    assert os.path.exists(os.path.join(directory, RECORD_NAME))


def test_the_store_makes_the_cut_before_it_opens_the_partition(tmp_path, files, clock):
    log, directory = failed_partition(tmp_path, files, [])
    log.close()
    data = str(tmp_path / "data")
    manager = manager_for(broker_config(data, (topic_config("test", data),)), clock)
    manager.load()
    assert manager.get("test", 0).max_offset == 32
    assert not os.path.exists(os.path.join(directory, RECORD_NAME))


def test_a_new_partition_deletes_a_stale_record_of_its_name(tmp_path, clock, caplog):
    data = tmp_path / "data"
    stale = data / FALLBACK_DIRECTORY / "test-0"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(record_text("test-0", 5))
    manager = manager_for(broker_config(str(data), (topic_config("test", str(data)),)), clock)
    manager.load()
    assert "names partition test-0, which was not loaded" in caplog.text
    manager.get_or_create("test", 0)
    assert not stale.exists()


def test_cut_partition_files_leaves_a_shorter_partition_alone(tmp_path):
    directory = str(tmp_path / "test-0")
    log = open_partition(directory, executor=ManualExecutor())
    log.close()
    assert cut_partition_files(RecordingFiles(), directory, 100, durable=True) == 0
