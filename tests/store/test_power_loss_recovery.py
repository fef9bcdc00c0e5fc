"""Start-up recovery after a power loss that left a hole in the unsynced end of a partition.

Goal: the store cuts what a power loss left of data never fsynced (a hole followed by valid
records beyond the partition's recovery point) without an operator, loses nothing that was
fsynced (every put acknowledged in group commit), and still fences corruption of fsynced data
(a flipped bit below the point) with the records after it kept.

Method: a ``StoreManager`` over ``PowerLossFiles`` in group commit, its flushes run by hand
(``ManualExecutor``): puts whose flush ran are acknowledged; the recovery points are written
by the store's timer (``recoveryPointIntervalInSeconds``, 60 s of the test clock); more puts
are written but their flush never runs; the process "crashes" (descriptors closed, nothing
flushed), the power goes, and the disk is left holding the unsynced end of the segment with a
zeroed page in it (``power_loss_with_holes``). A new store then loads the directory.
"""

from __future__ import annotations

import logging
import os

from twisted.internet.task import Clock

from meta.protocol.message import iter_messages
from meta.store.manager import StoreManager
from tests.store.conftest import (
    ManualExecutor,
    PowerLossFiles,
    broker_config,
    closing_store,
    collect,
    record,
    topic_config,
)

RECORD = len(record(b"%-10d" % 0))  # every payload here is 10 bytes: a 30-byte record
INTERVAL_S = 60  # the default recoveryPointIntervalInSeconds


def payload(index: int) -> bytes:
    return b"%-10d" % index


def open_store(root, files, executor, clock, segment_bytes_max=1024 * 1024) -> StoreManager:
    config = broker_config(
        str(root), topics=(topic_config("test", str(root)),), segment_bytes_max=segment_bytes_max
    )
    store = StoreManager(config, clock, files=files, executor=executor)
    store.load()
    store.start()
    return store


def crash(store: StoreManager) -> None:
    """Stop as a killed process would: close the descriptors, flush and write nothing."""
    for log in store.partitions():
        for segment in log.segments:
            segment.close()


def put(log, indexes) -> list[list]:
    return [collect(log.append(record(payload(index)))) for index in indexes]


def readable(log) -> list[bytes]:
    """Every payload a consumer reads from 0 until the first fence or the end."""
    found = log.read(log.slice(0, 1 << 20))
    return [message.payload for message in iter_messages(found, 0)]


def synced_then_unsynced(tmp_path, synced: int, unsynced: int, **options):
    """A store whose partition test-0 has ``synced`` puts acknowledged (fsynced) and the
    recovery points written, then ``unsynced`` puts written whose flush never ran."""
    files, executor, clock = PowerLossFiles(), ManualExecutor(), Clock()
    store = open_store(tmp_path, files, executor, clock, **options)
    log = store.get_or_create("test", 0)
    acked = put(log, range(synced))
    executor.run_all()
    assert [box[0] for box in acked] == [index * RECORD for index in range(synced)]
    clock.advance(INTERVAL_S)
    waiting = put(log, range(synced, synced + unsynced))
    assert all(box == [] for box in waiting)  # written, never acknowledged
    crash(store)
    return files, log


def reopen(tmp_path, files, **options) -> StoreManager:
    executor = ManualExecutor()
    store = closing_store(open_store(tmp_path, files, executor, Clock(), **options), executor)
    return store


def test_a_hole_in_the_unsynced_end_is_cut_with_everything_after_it(tmp_path, caplog):
    files, log = synced_then_unsynced(tmp_path, synced=10, unsynced=10)
    path = log.segments[-1].path
    hole = 13 * RECORD  # a page of the unsynced end never written; records 14-19 were
    files.power_loss_with_holes({path: (hole, hole + 16)})
    with caplog.at_level(logging.ERROR, logger="meta.store"):
        after = reopen(tmp_path, files).get("test", 0)
    assert after.max_offset == hole
    assert os.path.getsize(path) == hole
    assert readable(after) == [payload(index) for index in range(13)]  # every ack kept
    assert after.health.ranges == []  # nothing fenced: no consumer waits for an operator
    assert after.health.recovery_cut_bytes == 20 * RECORD - hole
    assert f"cut {20 * RECORD - hole} bytes at position {hole} (offset {hole})" in caplog.text
    assert "6 valid records among them" in caplog.text


def test_a_flipped_bit_below_the_recovery_point_is_still_fenced(tmp_path):
    files, log = synced_then_unsynced(tmp_path, synced=10, unsynced=10)
    path = log.segments[-1].path
    hole = 13 * RECORD
    files.power_loss_with_holes({path: (hole, hole + 16)})
    with open(path, "r+b") as handle:  # and bit rot in a synced, acknowledged record
        handle.seek(5 * RECORD + 25)
        byte = handle.read(1)
        handle.seek(5 * RECORD + 25)
        handle.write(bytes([byte[0] ^ 0x04]))
    after = reopen(tmp_path, files).get("test", 0)
    assert [(known.start, known.end) for known in after.health.ranges] == [(5 * RECORD, 6 * RECORD)]
    assert after.max_offset == hole
    assert readable(after) == [payload(index) for index in range(5)]
    rest = after.read(after.slice(6 * RECORD, 1 << 20))
    assert [m.payload for m in iter_messages(rest, 6 * RECORD)] == [
        payload(index) for index in range(6, 13)
    ]


def test_segments_rolled_after_the_recovery_point_are_recovered_too(tmp_path):
    """The points were written before two rolls: the hole is in a segment that is not the
    last; the cut starts there and the later segment file goes with it."""
    size = 5 * RECORD
    files, log = synced_then_unsynced(tmp_path, synced=10, unsynced=10, segment_bytes_max=size)
    directory = os.path.dirname(log.segments[0].path)
    names = sorted(os.listdir(directory))
    assert names == [f"{start * RECORD:020d}.meta" for start in (0, 5, 10, 15, 20)]
    hole_segment = os.path.join(directory, names[2])
    last_full = os.path.join(directory, names[3])
    hole = (2 * RECORD, 2 * RECORD + 16)
    files.power_loss_with_holes({hole_segment: hole}, reached=(last_full,))
    after = reopen(tmp_path, files, segment_bytes_max=size).get("test", 0)
    assert after.max_offset == 12 * RECORD
    assert sorted(os.listdir(directory)) == names[:3]
    assert after.health.ranges == []
    assert after.health.recovery_cut_bytes == 8 * RECORD
    messages = []
    for start in (0, 5 * RECORD, 10 * RECORD):
        messages += iter_messages(after.read(after.slice(start, 1 << 20)), start)
    assert [m.payload for m in messages] == [payload(index) for index in range(12)]


def test_without_recovery_points_a_hole_is_fenced_as_before_and_said_once(tmp_path, caplog):
    """A data path without the file (a first start after an upgrade): the rule without a
    recovery point, and one WARNING for the data path, not one per partition."""
    files, executor, clock = PowerLossFiles(), ManualExecutor(), Clock()
    store = open_store(tmp_path, files, executor, clock)
    logs = [store.get_or_create("test", partition) for partition in (0, 1)]
    for log in logs:
        put(log, range(4))
    executor.run_all()
    for log in logs:
        put(log, range(4, 8))
    crash(store)
    for name in os.listdir(tmp_path):
        if not os.path.isdir(tmp_path / name):
            os.remove(tmp_path / name)  # no recovery point file: as before this version
    hole = (5 * RECORD, 5 * RECORD + 16)
    files.power_loss_with_holes({log.segments[-1].path: hole for log in logs})
    with caplog.at_level(logging.WARNING, logger="meta.store"):
        store = reopen(tmp_path, files)
    for partition in (0, 1):
        after = store.get("test", partition)
        assert after.max_offset == 8 * RECORD
        assert [(known.start, known.end) for known in after.health.ranges] == [
            (5 * RECORD, 6 * RECORD)
        ]
    assert caplog.text.count("has no recovery point") == 1
