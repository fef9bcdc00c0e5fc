"""``PartitionLog.stage`` with ``count`` > 1: many records as one staged entry (put runs).

Goal: a batch behaves as its records staged one by one would, except that one ack answers
them all. Method: a real partition on disk with a recording file layer and a manual flusher.
"""

from __future__ import annotations

from meta.errors import PartitionFailedError
from meta.protocol.message import iter_messages
from tests.store.conftest import EIO, ManualExecutor, open_partition, record


def batch_of(count: int, size: int = 10) -> bytes:
    return b"".join(record(b"%0*d" % (size, i), msg_id=i) for i in range(count))


def stage_logged(log, data: bytes, count: int, acks: list) -> None:
    log.stage(data, lambda offset, error: acks.append((offset, error)), count)


def test_one_ack_with_the_first_offset_answers_the_whole_batch(tmp_path):
    log = open_partition(str(tmp_path / "p"), threshold=1000)
    acks: list = []
    log.stage(record(b"first"), lambda offset, error: acks.append((offset, error)))
    stage_logged(log, batch_of(5), 5, acks)
    log.commit()
    assert acks == [(0, None), (25, None)]
    assert log.max_offset == 25 + 5 * 30
    assert log.message_count == 6
    stored = log.read(log.slice(0, 1 << 20))
    assert [r.msg_id for r in iter_messages(stored)] == [1, 0, 1, 2, 3, 4]


def test_a_batch_crossing_the_threshold_waits_for_the_fsync_like_its_last_record(tmp_path):
    """unflushThreshold=4: the 4th record must be durable before its ack; in a batch of 6 that
    makes the whole batch wait; the count starts again after it."""
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "p"), threshold=4, executor=executor)
    acks: list = []
    stage_logged(log, batch_of(3), 3, acks)
    log.commit()
    assert acks == [(0, None)]  # 3 < 4: no fsync needed
    stage_logged(log, batch_of(6), 6, acks)
    log.commit()
    assert len(acks) == 1
    executor.run_all()
    assert acks == [(0, None), (90, None)]
    stage_logged(log, batch_of(3), 3, acks)
    log.commit()
    assert acks[-1] == (270, None)  # 3 more since that fsync: below the threshold again


def test_threshold_one_syncs_a_batch_before_its_ack(tmp_path, files):
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "p"), threshold=1, executor=executor, files=files)
    acks: list = []
    stage_logged(log, batch_of(2), 2, acks)
    log.commit()
    assert acks == []
    executor.run_all()
    assert acks == [(0, None)]
    assert [kind for kind, _ in files.events if kind in ("write", "fsync")] == ["write", "fsync"]


def test_a_failed_partition_refuses_a_batch_at_once(tmp_path, files):
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "p"), threshold=0, executor=executor, files=files)
    acks: list = []
    files.fsync_error = EIO
    stage_logged(log, batch_of(2), 2, acks)
    log.commit()
    executor.run_all()
    assert isinstance(acks[0][1], PartitionFailedError)
    assert not log.accepts_appends
    stage_logged(log, batch_of(2), 2, acks)
    assert acks[1][0] is None
    assert isinstance(acks[1][1], PartitionFailedError)


def test_room_bytes_counts_down_to_the_roll(tmp_path):
    log = open_partition(str(tmp_path / "p"), threshold=1000, segment_bytes_max=100)
    assert log.room_bytes == 100
    stage_logged(log, batch_of(2), 2, [])
    assert log.room_bytes == 40
    stage_logged(log, batch_of(2), 2, [])  # reaches the maximum: written and rolled
    assert log.room_bytes == 100
    assert log.nearest_offset(120) == 120
