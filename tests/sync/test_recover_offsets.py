"""Consumer offset recovery (``meta.sync.recover_offsets``): its rules, pure and on files.

Goal: each committed entry is placed by the rules of sync spec §1.10 as corrected by §1.11
(exact id first, "last id before" only for positive ids, otherwise kept with a warning,
unmatched positive ids to the partition's first offset) and Java's first-record bug is gone.
Method: the pure rule on lists of records, then real segment files written in ``tmp_path``
in the broker's layout (20-digit start names, the record format of ``meta.protocol.message``).
"""

from __future__ import annotations

from pathlib import Path

from meta.client.zk.offset_book import CommittedEntry
from meta.protocol.message import pack_message
from meta.sync.recover_offsets import (
    EXACT,
    KEPT,
    LAST_BEFORE,
    UNMATCHED,
    PartitionData,
    partition_data,
    recover_partition,
    scan_records,
)


def entry(msg_id: int, offset: int = 0, group: str = "g") -> CommittedEntry:
    return CommittedEntry(group, "t", 0, msg_id, offset, f"{msg_id}-{offset}")


def records_of(ids: list[int], size: int = 30, start: int = 0) -> list[tuple[int, int, int]]:
    return [(msg_id, start + i * size, start + (i + 1) * size) for i, msg_id in enumerate(ids)]


DATA = PartitionData(0, 150)


def one(msg_id: int, records: list, offset: int = 0, data: PartitionData = DATA):
    (recovered,) = recover_partition([entry(msg_id, offset)], records, data)
    return recovered


def test_an_exact_id_moves_to_the_end_of_its_record_whatever_its_sign():
    records = records_of([-900, -5, 7, 3, 11])
    assert (one(-5, records).msg_id, one(-5, records).offset, one(-5, records).rule) == (
        -5,
        60,
        EXACT,
    )
    assert (one(3, records).offset, one(3, records).rule) == (120, EXACT)


def test_a_positive_id_not_in_the_partition_takes_the_last_record_with_an_id_at_or_below_it():
    """Records in log order 10, 20, 30; id 25 was consumed on the old master: the last
    record at or below it is 20, so the consumer resumes after 20."""
    recovered = one(25, records_of([10, 20, 30]))
    assert (recovered.msg_id, recovered.offset, recovered.rule) == (20, 60, LAST_BEFORE)


def test_last_before_means_last_in_log_order_not_the_largest_id():
    recovered = one(25, records_of([10, 20, 12, 30]))
    assert (recovered.msg_id, recovered.offset) == (12, 90)


def test_a_positive_id_older_than_every_record_restarts_at_the_first_offset():
    data = PartitionData(4096, 4096 + 90)
    recovered = one(5, records_of([10, 20, 30], start=4096), data=data)
    assert (recovered.msg_id, recovered.offset, recovered.rule) == (-1, 4096, UNMATCHED)
    assert recovered.text == "-1-4096"


def test_a_negative_id_not_in_the_partition_is_kept_with_a_warning():
    recovered = one(-77, records_of([-1000, -500]), offset=60)
    assert (recovered.msg_id, recovered.offset, recovered.rule) == (-77, 60, KEPT)
    assert not recovered.changed
    assert "not a wall-clock id" in recovered.warning


def test_an_entry_without_an_id_is_kept_and_warned_only_outside_the_partition():
    inside = one(-1, records_of([1, 2]), offset=30)
    outside = one(-1, records_of([1, 2]), offset=900)
    assert (inside.rule, inside.warning, inside.changed) == (KEPT, None, False)
    assert outside.rule == KEPT
    assert "outside the partition [0, 150]" in outside.warning
    assert one(0, records_of([1, 2]), offset=30).rule == KEPT


def test_many_groups_are_decided_in_one_pass_in_the_order_given():
    records = records_of([100, 200, 300, 400])
    entries = [entry(350, group="a"), entry(150, group="b"), entry(50, group="c")]
    got = [(r.entry.group, r.text) for r in recover_partition(entries, records, DATA)]
    assert got == [("a", "300-90"), ("b", "100-30"), ("c", "-1-0")]


def write_segments(directory: Path, segments: list[list[tuple[int, bytes]]]) -> list[int]:
    """Write segment files of ``(msg_id, payload)`` records; return each record's offset."""
    directory.mkdir(parents=True)
    start, offsets = 0, []
    for records in segments:
        data = b""
        for msg_id, payload in records:
            offsets.append(start + len(data))
            data += pack_message(msg_id, 0, payload)
        (directory / f"{start:020d}.meta").write_bytes(data)
        start += len(data)
    return offsets


def test_the_first_record_of_a_segment_stays_where_it_is(tmp_path):
    """Java's bug: an entry already at a segment's first record was moved one record too
    early by the older segments. Here it stays at the end of that record."""
    directory = tmp_path / "t-0"
    offsets = write_segments(directory, [[(10, b"a"), (20, b"b")], [(30, b"c"), (40, b"d")]])
    end_of_30 = offsets[3]
    recovered = recover_partition(
        [entry(30, end_of_30)], scan_records(str(directory)), partition_data(str(directory))
    )
    assert (recovered[0].text, recovered[0].rule, recovered[0].changed) == (
        f"30-{end_of_30}",
        EXACT,
        False,
    )


def test_scan_reads_every_segment_in_order_and_stops_at_a_torn_record(tmp_path):
    directory = tmp_path / "t-0"
    write_segments(directory, [[(1, b"x" * 10), (2, b"y")], [(3, b"z")]])
    last = sorted(directory.iterdir())[-1]
    last.write_bytes(last.read_bytes() + pack_message(4, 0, b"torn")[:-2])
    scanned = list(scan_records(str(directory)))
    assert [msg_id for msg_id, _offset, _end in scanned] == [1, 2, 3]
    assert [offset for _id, offset, _end in scanned] == [0, 30, 51]
    assert partition_data(str(directory)) == PartitionData(0, 72)


def test_a_missing_partition_directory_has_no_records(tmp_path):
    assert list(scan_records(str(tmp_path / "nothing-0"))) == []
    assert partition_data(str(tmp_path / "nothing-0")) == PartitionData(0, 0)
