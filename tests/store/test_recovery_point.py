"""The recovery point file of a data path and the store's side of it (meta.store.recovery_point).

Goal: the file's bytes are the documented ones (docs/formats.md §3.6); a point never runs
ahead of what is fsynced; a write that fails is logged, tried again, never raises and leaves
the older point; a cut of a stopped partition lowers its point before the cut; a clean stop
writes every partition's end; a partition deleted while the broker was stopped loses its entry.

Method: ``StoreManager`` over a test clock and the recording file layer; flushes run by hand
(``ManualExecutor``) so that written and fsynced differ; the file is read back with
``read_points``.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil

import pytest
from twisted.internet.task import Clock

from meta.protocol.crc import crc32
from meta.store.manager import StoreManager
from meta.store.pending_truncation import cut_partition_files
from meta.store.recovery_point import (
    FILE_NAME,
    decode_points,
    encode_points,
    lower_point,
    read_points,
)
from tests.store.conftest import (
    ManualExecutor,
    RecordingFiles,
    broker_config,
    close_store,
    closing_store,
    collect,
    record,
    topic_config,
)

INTERVAL_S = 60
RECORD = len(record(b"x"))


def open_store(root, files, executor, clock=None) -> StoreManager:
    config = broker_config(str(root), topics=(topic_config("test", str(root)),))
    store = StoreManager(config, clock or Clock(), files=files, executor=executor)
    store.load()
    store.start()
    return store


def points(root) -> dict[str, int] | None:
    return read_points(RecordingFiles(), str(root))


def test_the_file_is_the_documented_bytes():
    """The worked example of docs/formats.md §3.6, byte for byte."""
    data = encode_points({"orders-1": 0, "orders-0": 225310})
    assert data == b"metaq-recovery-point 1\n2\norders-0 225310\norders-1 0\n1907592298\n"
    assert decode_points(data) == {"orders-0": 225310, "orders-1": 0}
    assert encode_points({}) == b"metaq-recovery-point 1\n0\n952201439\n"


def test_a_name_with_spaces_splits_at_the_last_one():
    assert decode_points(encode_points({"a b-0": 7})) == {"a b-0": 7}


def test_a_directory_name_that_is_not_utf8_keeps_its_bytes():
    name = os.fsdecode(b"caf\xe9-0")  # as os.listdir gives a Latin-1 name
    data = encode_points({name: 7})
    assert b"caf\xe9-0 7\n" in data
    assert decode_points(data) == {name: 7}


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda data: data.replace(b"225310", b"225311"), "checksum"),
        (lambda data: data[:-1], "cut short"),
        (lambda data: data.replace(b"point 1\n", b"point 2\n"), "checksum"),
    ],
)
def test_a_damaged_file_is_refused_naming_why(damage, reason):
    with pytest.raises(ValueError, match=reason):
        decode_points(damage(encode_points({"orders-0": 225310})))


def test_a_count_that_does_not_match_is_refused():
    body = b"metaq-recovery-point 1\n2\norders-0 5\n"
    with pytest.raises(ValueError, match="count"):
        decode_points(body + b"%d\n" % crc32(body))


def test_a_damaged_file_is_logged_and_its_partitions_have_no_point(tmp_path, caplog):
    (tmp_path / FILE_NAME).write_bytes(b"metaq-recovery-point 1\n1\ntest-0 5\n12\n")
    with caplog.at_level(logging.ERROR, logger="meta.store"):
        assert points(tmp_path) is None
    assert f"ignoring the recovery point file {tmp_path / FILE_NAME}: checksum" in caplog.text


def test_the_point_is_the_fsynced_end_never_the_written_one(tmp_path):
    executor, clock = ManualExecutor(), Clock()
    store = closing_store(open_store(tmp_path, RecordingFiles(), executor, clock), executor)
    log = store.get_or_create("test", 0)
    collect(log.append(record(b"a")))
    executor.run_all()
    collect(log.append(record(b"b")))  # written; its fsync has not run
    clock.advance(INTERVAL_S)
    assert (log.written_end, points(tmp_path)) == (2 * RECORD, {"test-0": RECORD})
    executor.run_all()
    clock.advance(INTERVAL_S)
    assert points(tmp_path) == {"test-0": 2 * RECORD}


def test_a_failed_write_is_logged_retried_and_leaves_the_older_point(tmp_path, caplog):
    files, executor, clock = RecordingFiles(), ManualExecutor(), Clock()
    store = closing_store(open_store(tmp_path, files, executor, clock), executor)
    log = store.get_or_create("test", 0)
    collect(log.append(record(b"a")))
    executor.run_all()
    clock.advance(INTERVAL_S)
    assert points(tmp_path) == {"test-0": RECORD}
    collect(log.append(record(b"b")))
    executor.run_all()
    files.fsync_error = errno.EIO
    files.fsync_error_only = os.path.join(os.path.basename(tmp_path), FILE_NAME)
    with caplog.at_level(logging.ERROR, logger="meta.store"):
        clock.advance(INTERVAL_S)  # raises nothing: the timer goes on
        clock.advance(INTERVAL_S)
    assert files.count("fsync_failed") == 2  # tried at each interval
    assert points(tmp_path) == {"test-0": RECORD}  # the older, lower point
    assert caplog.text.count(f"cannot write the recovery points of {tmp_path}") == 1
    assert "Input/output error" in caplog.text
    files.fsync_error = None
    clock.advance(INTERVAL_S)
    assert points(tmp_path) == {"test-0": 2 * RECORD}
    assert log.failed is None  # the partition never noticed


def test_a_clean_stop_writes_every_partitions_end(tmp_path):
    files, executor = RecordingFiles(), ManualExecutor()
    store = open_store(tmp_path, files, executor)
    for partition in (0, 1):
        collect(store.get_or_create("test", partition).append(record(b"a")))
    close_store(store, executor)
    assert points(tmp_path) == {"test-0": RECORD, "test-1": RECORD}


def test_start_up_writes_the_loaded_points_capped_at_what_recovery_left(tmp_path, caplog):
    """An entry past the partition's end (its files cut while the broker was stopped) is
    lowered to the end: the bytes written there later are not fsynced."""
    executor = ManualExecutor()
    store = open_store(tmp_path, RecordingFiles(), executor)
    collect(store.get_or_create("test", 0).append(record(b"a")))
    close_store(store, executor)
    (tmp_path / FILE_NAME).write_bytes(encode_points({"test-0": 10 * RECORD}))
    with caplog.at_level(logging.WARNING, logger="meta.store"):
        closing_store(open_store(tmp_path, RecordingFiles(), executor), executor)
    assert points(tmp_path) == {"test-0": RECORD}
    assert f"ends at offset {RECORD}, before its recovery point {10 * RECORD}" in caplog.text


def test_a_partition_deleted_while_stopped_loses_its_entry(tmp_path):
    executor = ManualExecutor()
    store = open_store(tmp_path, RecordingFiles(), executor)
    for partition in (0, 1):
        collect(store.get_or_create("test", partition).append(record(b"a")))
    close_store(store, executor)
    shutil.rmtree(tmp_path / "test-1")
    store = closing_store(open_store(tmp_path, RecordingFiles(), executor), executor)
    assert points(tmp_path) == {"test-0": RECORD}
    log = store.get_or_create("test", 1)  # created afresh: no old entry applies
    collect(log.append(record(b"b")))
    executor.run_all()
    store.recovery_points.write()
    assert points(tmp_path) == {"test-0": RECORD, "test-1": RECORD}


def test_a_cut_of_a_stopped_partition_lowers_its_point_before_the_cut(tmp_path):
    executor = ManualExecutor()
    store = open_store(tmp_path, RecordingFiles(), executor)
    log = store.get_or_create("test", 0)
    for payload in (b"a", b"b", b"c"):
        collect(log.append(record(payload)))
    close_store(store, executor)
    assert points(tmp_path) == {"test-0": 3 * RECORD}
    files = RecordingFiles()
    cut = cut_partition_files(files, str(tmp_path / "test-0"), RECORD, durable=True)
    assert (cut, points(tmp_path)) == (2 * RECORD, {"test-0": RECORD})
    point_durable = files.events.index(("fsync_directory", os.path.basename(tmp_path)))
    segment_cut = files.events.index(("truncate", "test-0/00000000000000000000.meta"))
    assert point_durable < segment_cut  # the lower point is on disk before the cut


def test_lowering_leaves_a_lower_point_and_other_partitions_alone(tmp_path):
    (tmp_path / FILE_NAME).write_bytes(encode_points({"test-0": 40, "test-1": 90}))
    lower_point(RecordingFiles(), str(tmp_path / "test-0"), 50)
    lower_point(RecordingFiles(), str(tmp_path / "test-1"), 60)
    assert points(tmp_path) == {"test-0": 40, "test-1": 60}


def test_a_store_never_started_writes_no_file(tmp_path):
    config = broker_config(str(tmp_path), topics=(topic_config("test", str(tmp_path)),))
    executor = ManualExecutor()
    store = StoreManager(config, Clock(), files=RecordingFiles(), executor=executor)
    store.load()
    close_store(store, executor)
    assert not (tmp_path / FILE_NAME).exists()


def test_recovery_scans_from_the_points_segment_on_and_no_earlier(tmp_path):
    """An older segment before the point's is not scanned (its garbage is the scrubber's to
    find); in the point's segment a bad record below the point is fenced; past the point a
    hole followed by a valid record is cut, and the later segment file goes with it."""
    directory = tmp_path / "test-0"
    directory.mkdir()
    flipped = bytearray(record(b"a"))
    flipped[-1] ^= 0x01
    middle = bytes(flipped) + record(b"b") + record(b"c") + record(b"d")
    torn = bytes(RECORD) + record(b"e")  # a page never written, then one that was
    files_in = {0: b"\xff" * 40, 40: middle, 40 + len(middle): record(b"f") + torn}
    last_start = 40 + len(middle) + len(files_in[40 + len(middle)])
    files_in[last_start] = record(b"g")
    for start, data in files_in.items():
        (directory / f"{start:020d}.meta").write_bytes(data)
    (tmp_path / FILE_NAME).write_bytes(encode_points({"test-0": 40 + 2 * RECORD}))
    executor = ManualExecutor()
    log = closing_store(open_store(tmp_path, RecordingFiles(), executor), executor).get("test", 0)
    assert [(known.start, known.end) for known in log.health.ranges] == [(40, 40 + RECORD)]
    hole = 40 + len(middle) + RECORD
    assert log.max_offset == hole
    assert [segment.start for segment in log.segments] == [0, 40, 40 + len(middle)]
    assert not (directory / f"{last_start:020d}.meta").exists()
    assert log.health.recovery_cut_bytes == len(torn) + RECORD
