"""PartitionLog.reserve / fill / cancel: offsets held for a transaction's batch (commit order).

A commit names its batch's offset in the journal before the batch is written; the partition
holds that range, keeps later records behind it, and writes everything in offset order once
the batch is given.
"""

from __future__ import annotations

import pytest

from meta.errors import PartitionFailedError, StoreError
from meta.store.reservation import Reservation
from tests.store.conftest import EIO, ManualExecutor, collect, open_partition, record

SEGMENT = "test-0/00000000000000000000.meta"
BATCH = record(b"tx-1", msg_id=7) + record(b"tx-2", msg_id=8)


class Acks:
    """Records ``(name, offset)`` or ``(name, error type)`` for each ack, in call order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def __call__(self, name: str):
        def ack(offset, error):
            self.events.append((name, offset if error is None else type(error).__name__))

        return ack


@pytest.fixture
def acks() -> Acks:
    return Acks()


def segment_bytes(tmp_path) -> bytes:
    return (tmp_path / "test-0" / "00000000000000000000.meta").read_bytes()


def test_a_reservation_gets_the_next_offset(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"))
    log.append(record(b"first"))
    reservation = log.reserve(len(BATCH), acks("tx"))
    assert (reservation.offset, reservation.length) == (25, len(BATCH))


def test_a_reservation_moves_the_next_offset_past_its_length(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"))
    log.reserve(len(BATCH), acks("tx"))
    assert log.next_offset == len(BATCH)


def test_records_staged_after_a_reservation_keep_their_offsets(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"))
    reservation = log.reserve(len(BATCH), acks("tx"))
    log.stage(record(b"later"), acks("later"))
    log.commit()
    log.fill(reservation, BATCH)
    assert acks.events == [("tx", 0), ("later", len(BATCH))]


def test_nothing_staged_after_an_unfilled_reservation_is_written(tmp_path, files, acks):
    log = open_partition(str(tmp_path / "test-0"), files=files)
    log.reserve(len(BATCH), acks("tx"))
    log.stage(record(b"later"), acks("later"))
    log.commit()
    assert (files.count("write"), segment_bytes(tmp_path), log.written_end) == (0, b"", 0)


def test_nothing_staged_after_an_unfilled_reservation_is_acknowledged(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"))
    log.reserve(len(BATCH), acks("tx"))
    log.stage(record(b"later"), acks("later"))
    log.commit()
    assert (acks.events, log.max_offset) == ([], 0)


def test_records_before_a_reservation_are_written_and_acknowledged(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"))
    log.stage(record(b"before"), acks("before"))
    log.reserve(len(BATCH), acks("tx"))
    log.commit()
    assert (acks.events, segment_bytes(tmp_path)) == ([("before", 0)], record(b"before"))


def test_fill_writes_everything_up_to_the_next_gap_in_offset_order_with_one_write(
    tmp_path, files, acks
):
    """Goal: once the batch is given, the reservation and everything staged behind it go to
    the segment in offset order, in a single write.

    Method: stage two records behind a reservation, commit (nothing is written), then fill.
    """
    log = open_partition(str(tmp_path / "test-0"), files=files)
    reservation = log.reserve(len(BATCH), acks("tx"))
    log.stage(record(b"a"), acks("a"))
    log.stage(record(b"b"), acks("b"))
    log.commit()
    log.fill(reservation, BATCH)
    assert segment_bytes(tmp_path) == BATCH + record(b"a") + record(b"b")
    assert files.count("write") == 1


def test_the_message_count_follows_what_is_written_around_reservations(tmp_path, acks):
    """Spec 4.9: a transaction batch counts 1, a put run's entry its records, and nothing
    counts before it is written (here: held behind an unfilled reservation)."""
    log = open_partition(str(tmp_path / "test-0"))
    log.stage(record(b"before"), acks("before"))
    reservation = log.reserve(len(BATCH), acks("tx"))
    log.stage(record(b"a") + record(b"b"), acks("run"), count=2)
    log.commit()
    assert log.message_count == 1
    log.fill(reservation, BATCH)
    assert log.message_count == 1 + 1 + 2


def test_fill_acknowledges_in_offset_order(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"))
    reservation = log.reserve(len(BATCH), acks("tx"))
    log.stage(record(b"a"), acks("a"))
    log.commit()
    log.fill(reservation, BATCH)
    assert [name for name, _ in acks.events] == ["tx", "a"]


def test_filling_a_later_reservation_first_writes_nothing(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"))
    first = log.reserve(len(BATCH), acks("first"))
    second = log.reserve(len(BATCH), acks("second"))
    log.fill(second, BATCH)
    assert (log.written_end, acks.events) == (0, [])
    log.fill(first, BATCH)
    assert acks.events == [("first", 0), ("second", len(BATCH))]


def test_group_commit_acknowledges_a_filled_batch_only_after_its_fsync(tmp_path, files, acks):
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor, threshold=0)
    reservation = log.reserve(len(BATCH), acks("tx"))
    log.fill(reservation, BATCH)
    assert acks.events == []
    executor.run_all()
    assert acks.events == [("tx", 0)] and files.events[-1] == ("fsync", SEGMENT)


def test_threshold_mode_does_not_acknowledge_a_reservation_before_fill(tmp_path, acks):
    """Goal: in threshold mode (acks without fsync) a reservation behind a written record
    is still not acknowledged, nor visible, before its batch is written.

    Method: stage a record and a reservation in one batch and commit: the record is written
    and acknowledged; the reservation must wait for ``fill``.
    """
    log = open_partition(str(tmp_path / "test-0"), threshold=1000)
    log.stage(record(b"before"), acks("before"))
    log.reserve(len(BATCH), acks("tx"))
    log.commit()
    assert acks.events == [("before", 0)]


def test_threshold_mode_never_shows_readers_past_the_written_end(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"), threshold=1000)
    log.stage(record(b"before"), acks("before"))
    log.reserve(len(BATCH), acks("tx"))
    log.commit()
    assert log.max_offset <= log.written_end


def test_threshold_mode_interval_flush_does_not_release_a_reservation(tmp_path, acks):
    """Goal: a background flush completing while a reservation waits releases nothing past
    it.

    Method: write one record, reserve, stage one more behind the reservation, then run the
    interval flush (``request_flush``) and look at the acks.
    """
    log = open_partition(str(tmp_path / "test-0"), threshold=1000)
    log.append(record(b"before"))
    log.reserve(len(BATCH), acks("tx"))
    log.stage(record(b"after"), acks("after"))
    log.commit()
    log.request_flush()
    assert (acks.events, log.max_offset) == ([], 26)


def test_threshold_mode_flushes_only_when_a_record_due_for_a_flush_is_written(
    tmp_path, files, acks
):
    """Goal: while commits keep a reservation staged behind every write (transactions waiting
    for their journal sync), threshold mode still flushes once per N appends, not per commit.

    Method: threshold 3; eleven reservations, each filled once the next one is staged, the
    flusher run after each fill. Appends 3, 6 and 9 are due for a flush: three fsyncs of the
    segment, and every filled batch acknowledged.
    """
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor, threshold=3)
    waiting = log.reserve(len(BATCH), acks("tx-1"))
    for number in range(2, 12):
        staged = log.reserve(len(BATCH), acks(f"tx-{number}"))
        log.fill(waiting, BATCH)
        executor.run_all()
        waiting = staged
    fsyncs = [event for event in files.events if event == ("fsync", SEGMENT)]
    assert (len(fsyncs), [name for name, _offset in acks.events]) == (
        3,
        [f"tx-{number}" for number in range(1, 11)],
    )


def test_threshold_mode_flushes_a_due_record_once_the_reservation_before_it_is_filled(
    tmp_path, files, acks
):
    """Goal: a record due for a flush but staged behind an unfilled reservation gets its
    flush when a later commit writes it, and is acknowledged only after that flush."""
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor, threshold=2)
    reservation = log.reserve(len(BATCH), acks("tx"))
    log.stage(record(b"due"), acks("due"))  # the second append: due for a flush
    log.commit()
    assert executor.queue == []
    log.fill(reservation, BATCH)
    assert (acks.events, len(executor.queue)) == ([("tx", 0)], 1)
    executor.run_all()
    assert acks.events == [("tx", 0), ("due", len(BATCH))]
    assert files.events[-1] == ("fsync", SEGMENT)


def test_cancel_fails_the_partition(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"))
    reservation = log.reserve(len(BATCH), acks("tx"))
    log.cancel(reservation, StoreError("journal fsync failed"))
    assert isinstance(log.failed, PartitionFailedError) and not log.accepts_appends


def test_cancel_fails_the_reservation_and_every_append_waiting_behind_it(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"))
    reservation = log.reserve(len(BATCH), acks("tx"))
    log.stage(record(b"later"), acks("later"))
    log.commit()
    log.cancel(reservation, StoreError("journal fsync failed"))
    assert acks.events == [("tx", "PartitionFailedError"), ("later", "PartitionFailedError")]


def test_cancel_writes_nothing(tmp_path, files, acks):
    log = open_partition(str(tmp_path / "test-0"), files=files)
    reservation = log.reserve(len(BATCH), acks("tx"))
    log.stage(record(b"later"), acks("later"))
    log.cancel(reservation, StoreError("journal fsync failed"))
    assert files.count("write") == 0


def test_cancel_of_a_filled_reservation_leaves_the_partition_running(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"))
    reservation = log.reserve(len(BATCH), acks("tx"))
    log.fill(reservation, BATCH)
    log.cancel(reservation, StoreError("too late"))
    assert log.failed is None and acks.events == [("tx", 0)]


def test_reserve_on_a_failed_partition_acks_the_error_and_returns_none(tmp_path, files, acks):
    log = open_partition(str(tmp_path / "test-0"), files=files)
    files.fsync_error = EIO
    collect(log.append(record(b"lost")))
    reservation = log.reserve(len(BATCH), acks("tx"))
    assert (reservation, acks.events) == (None, [("tx", "PartitionFailedError")])


def test_reserve_on_a_closed_partition_acks_the_error_and_returns_none(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"))
    log.stop_appends()
    reservation = log.reserve(len(BATCH), acks("tx"))
    assert (reservation, acks.events) == (None, [("tx", "StoreError")])


def test_a_reservation_does_not_move_the_next_offset_when_refused(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"))
    log.stop_appends()
    log.reserve(len(BATCH), acks("tx"))
    assert log.next_offset == 0


def test_a_reservation_that_fills_the_segment_rolls_after_fill(tmp_path, acks):
    log = open_partition(str(tmp_path / "test-0"), segment_bytes_max=len(BATCH))
    reservation = log.reserve(len(BATCH), acks("tx"))
    log.stage(record(b"later"), acks("later"))
    log.fill(reservation, BATCH)
    assert [segment.start for segment in log.segments] == [0, len(BATCH) + len(record(b"later"))]


def test_a_reservation_is_a_plain_holder_of_offset_length_and_data():
    reservation = Reservation(10, 42)
    assert (reservation.offset, reservation.length, reservation.data) == (10, 42, None)
