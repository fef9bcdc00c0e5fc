"""PartitionLog: offsets, roll, slice and nearest-offset rules, counters, closing."""

from __future__ import annotations

import os

import pytest

from meta.errors import StoreError
from meta.protocol.message import iter_messages
from meta.store.partition import AFTER, BEFORE, DATA
from tests.store.conftest import ManualExecutor, collect, open_partition, record


def append_all(log, payloads):
    """Append each payload; return the offsets the acks carried."""
    offsets = []
    for payload in payloads:
        offsets.extend(collect(log.append(record(payload))))
    return offsets


def segment_names(directory):
    return sorted(name for name in os.listdir(directory) if name.endswith(".meta"))


def test_offsets_increase_by_header_plus_payload_length(tmp_path):
    log = open_partition(str(tmp_path / "test-0"))
    assert append_all(log, [b"a", b"bcd", b"", b"ef"]) == [0, 21, 44, 64]


def test_segment_bytes_equal_the_packed_records(tmp_path):
    log = open_partition(str(tmp_path / "test-0"))
    append_all(log, [b"one", b"two"])
    data = (tmp_path / "test-0" / "00000000000000000000.meta").read_bytes()
    assert data == record(b"one") + record(b"two")


def test_a_new_partition_has_one_empty_segment_at_zero(tmp_path):
    log = open_partition(str(tmp_path / "test-0"))
    assert segment_names(tmp_path / "test-0") == ["00000000000000000000.meta"]
    assert (log.min_offset, log.max_offset) == (0, 0)


def test_the_log_rolls_once_the_segment_reaches_the_maximum(tmp_path):
    log = open_partition(str(tmp_path / "test-0"), segment_bytes_max=50)
    append_all(log, [b"x" * 10, b"x" * 10, b"x" * 10])
    assert segment_names(tmp_path / "test-0") == [
        "00000000000000000000.meta",
        "00000000000000000060.meta",
    ]


def test_a_segment_exceeds_the_maximum_by_at_most_one_record(tmp_path):
    log = open_partition(str(tmp_path / "test-0"), segment_bytes_max=50)
    append_all(log, [b"x" * 10, b"x" * 10, b"x" * 100])
    assert [segment.written_size for segment in log.segments] == [60, 120, 0]


def test_the_next_segment_is_named_previous_start_plus_size(tmp_path):
    log = open_partition(str(tmp_path / "test-0"), segment_bytes_max=1)
    append_all(log, [b"a", b"bc", b"def"])
    assert segment_names(tmp_path / "test-0") == [
        "00000000000000000000.meta",
        "00000000000000000021.meta",
        "00000000000000000043.meta",
        "00000000000000000066.meta",
    ]


def test_appends_after_a_roll_go_to_the_new_segment(tmp_path):
    log = open_partition(str(tmp_path / "test-0"), segment_bytes_max=1)
    append_all(log, [b"a", b"bc"])
    data = (tmp_path / "test-0" / "00000000000000000021.meta").read_bytes()
    assert data == record(b"bc")


def open_trimmed_partition(tmp_path):
    """A partition whose first segment starts at 100, as after retention removed [0, 100)."""
    directory = tmp_path / "test-0"
    directory.mkdir()
    (directory / "00000000000000000100.meta").write_bytes(record(b"a"))
    return open_partition(str(directory))


def test_slice_below_the_first_segment_is_before_with_the_first_offset(tmp_path):
    log = open_trimmed_partition(tmp_path)
    result = log.slice(0, 100)
    assert (result.kind, result.offset) == (BEFORE, 100)


def test_slice_at_the_first_offset_of_a_trimmed_log_returns_data(tmp_path):
    log = open_trimmed_partition(tmp_path)
    assert log.read(log.slice(100, 100)) == record(b"a")


def test_slice_at_the_visible_end_is_after_with_the_end(tmp_path):
    log = open_partition(str(tmp_path / "test-0"))
    append_all(log, [b"a"])
    result = log.slice(21, 100)
    assert (result.kind, result.offset) == (AFTER, 21)


def test_slice_beyond_the_visible_end_is_after_with_the_end(tmp_path):
    log = open_partition(str(tmp_path / "test-0"))
    append_all(log, [b"a"])
    result = log.slice(2**63 - 1, 100)
    assert (result.kind, result.offset) == (AFTER, 21)


def test_slice_of_an_empty_partition_is_after_zero(tmp_path):
    log = open_partition(str(tmp_path / "test-0"))
    result = log.slice(0, 100)
    assert (result.kind, result.offset) == (AFTER, 0)


def test_slice_inside_the_data_returns_position_and_length(tmp_path):
    log = open_partition(str(tmp_path / "test-0"))
    append_all(log, [b"a", b"bc"])
    result = log.slice(21, 100)
    assert (result.kind, result.position, result.length) == (DATA, 21, 22)


def test_slice_length_is_capped_by_the_limit(tmp_path):
    log = open_partition(str(tmp_path / "test-0"))
    append_all(log, [b"a", b"bc"])
    assert log.slice(0, 30).length == 30


def test_read_returns_the_records_of_a_slice(tmp_path):
    log = open_partition(str(tmp_path / "test-0"))
    append_all(log, [b"a", b"bc"])
    assert log.read(log.slice(0, 1000)) == record(b"a") + record(b"bc")


def test_slice_never_crosses_into_the_next_segment(tmp_path):
    log = open_partition(str(tmp_path / "test-0"), segment_bytes_max=40)
    append_all(log, [b"a", b"b", b"c", b"d"])
    result = log.slice(21, 1000)
    assert (result.segment.start, result.position, result.length) == (0, 21, 21)


def test_slice_in_a_later_segment_uses_that_segment(tmp_path):
    log = open_partition(str(tmp_path / "test-0"), segment_bytes_max=40)
    append_all(log, [b"a", b"b", b"c", b"d"])
    result = log.slice(63, 1000)
    assert (result.segment.start, result.position, result.length) == (42, 21, 21)


def test_reading_slice_by_slice_returns_every_record_in_order(tmp_path):
    """Goal: a consumer walking the log with get-sized slices sees every record once.

    Method: append records across several segments, then follow slices from offset 0,
    advancing by the bytes of complete records, as a client does.
    """
    payloads = [bytes([65 + index]) * index for index in range(12)]
    log = open_partition(str(tmp_path / "test-0"), segment_bytes_max=60)
    append_all(log, payloads)
    seen, offset = [], 0
    while (result := log.slice(offset, 64)).kind == DATA:
        records = list(iter_messages(log.read(result), offset))
        seen.extend(message.payload for message in records)
        offset = records[-1].offset + records[-1].size
    assert seen == payloads


def test_nearest_offset_returns_the_start_of_the_containing_segment(tmp_path):
    log = open_partition(str(tmp_path / "test-0"), segment_bytes_max=40)
    append_all(log, [b"a", b"b", b"c", b"d", b"e"])
    assert [log.nearest_offset(offset) for offset in (0, 30, 42, 63, 84, 99)] == [
        0,
        0,
        42,
        42,
        84,
        84,
    ]


def test_nearest_offset_clamps_to_the_visible_end(tmp_path):
    log = open_partition(str(tmp_path / "test-0"))
    append_all(log, [b"a"])
    assert log.nearest_offset(1000) == 21


def test_nearest_offset_clamps_to_the_first_offset(tmp_path):
    log = open_trimmed_partition(tmp_path)
    assert log.nearest_offset(0) == 100


def test_message_count_counts_appends(tmp_path):
    log = open_partition(str(tmp_path / "test-0"), segment_bytes_max=30)
    append_all(log, [b"a", b"b", b"c"])
    assert log.message_count == 3


def test_a_deleted_segment_drops_out_of_the_message_count(tmp_path):
    """Spec 4.9: the count is per current segment. Three 21-byte records in 21-byte
    segments roll after each record; dropping the oldest two leaves one."""
    log = open_partition(str(tmp_path / "test-0"), segment_bytes_max=21)
    append_all(log, [b"a", b"b", b"c"])
    log.drop_oldest_segment().close()
    assert log.message_count == 2
    log.drop_oldest_segment().close()
    assert log.message_count == 1


def test_the_message_count_after_a_restart_counts_only_the_recovered_last_segment(tmp_path):
    """Spec 4.9: read-only segments loaded at start-up count 0; the last one counts the
    records its recovery kept."""
    directory = str(tmp_path / "test-0")
    log = open_partition(directory, segment_bytes_max=42)
    append_all(log, [b"a", b"b", b"c", b"d"])  # two full segments of two records
    log.close()
    reopened = open_partition(directory, segment_bytes_max=42)
    assert len(reopened.segments) == 3  # the last one (empty) was started by the roll
    assert reopened.message_count == 0
    append_all(reopened, [b"e"])
    assert reopened.message_count == 1


def test_byte_count_is_the_sum_of_written_sizes(tmp_path):
    log = open_partition(str(tmp_path / "test-0"), segment_bytes_max=30)
    append_all(log, [b"a", b"bb", b"ccc"])
    assert log.byte_count == 21 + 22 + 23


def test_a_closed_partition_refuses_appends(tmp_path):
    log = open_partition(str(tmp_path / "test-0"))
    log.close()
    (result,) = collect(log.append(record(b"late")))
    assert result.check(StoreError) and "closed" in str(result.value)


def test_a_transaction_batch_is_one_append(tmp_path):
    log = open_partition(str(tmp_path / "test-0"))
    offsets = collect(log.append(record(b"a") + record(b"b")))
    assert (offsets, log.message_count, log.max_offset) == ([0], 1, 42)


@pytest.mark.parametrize("limit", [1, 20, 21, 22])
def test_slice_length_is_never_more_than_the_limit(tmp_path, limit):
    log = open_partition(str(tmp_path / "test-0"))
    append_all(log, [b"a", b"b"])
    assert log.slice(0, limit).length == limit


def test_on_visible_is_called_when_max_offset_advances(tmp_path):
    log = open_partition(str(tmp_path / "test-0"))
    seen = []
    log.on_visible = lambda partition_log: seen.append(partition_log.max_offset)
    append_all(log, [b"a", b"b"])
    assert seen == [21, 42]


def test_on_visible_is_not_called_before_the_ack(tmp_path):
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), executor=executor)
    seen = []
    log.on_visible = lambda partition_log: seen.append(partition_log.max_offset)
    log.append(record(b"a"))
    before = list(seen)
    executor.run_all()
    assert (before, seen) == ([], [21])
