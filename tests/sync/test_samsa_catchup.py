"""The pure parts of a samsa master's catch-up: reading a slave's ``stats offsets`` and
telling whether an offset is a record boundary of the master's log."""

from __future__ import annotations

from dataclasses import dataclass

from meta.protocol.message import pack_message
from meta.store.read_slice import SliceResult
from meta.sync.samsa_catchup import is_record_boundary, parse_offsets


def test_a_stats_offsets_body_gives_every_partition_end():
    body = (
        b"STATS\r\nother part 1 min_offset 0 max_offset 99\r\n"
        b"test part 0 min_offset 1024 max_offset 2048\r\nEND\r\n"
    )
    assert parse_offsets(body) == {("other", 1): 99, ("test", 0): 2048}


def test_lines_that_are_not_partition_lines_are_skipped():
    assert parse_offsets(b"role gregor\r\nx part y min_offset 0 max_offset z\r\n") == {}


@dataclass
class Segment:
    data: bytes

    def read(self, position: int, length: int) -> bytes:
        return self.data[position : position + length]


class Log:
    """One segment starting at offset 1000, as ``PartitionLog`` shows it to the catch-up."""

    def __init__(self, records: list[bytes]) -> None:
        self.segment = Segment(b"".join(records))
        self.max_offset = 1000 + len(self.segment.data)

    def slice(self, offset: int, limit: int) -> SliceResult:
        if offset >= self.max_offset:
            return SliceResult("after", self.max_offset)
        return SliceResult("data", offset, self.segment, offset - 1000, 0)


def test_record_starts_and_the_end_are_boundaries_and_nothing_else():
    records = [pack_message(index, 0, b"x" * (index * 7)) for index in range(50)]
    log = Log(records)
    starts = {1000}
    for record in records:
        starts.add(max(starts) + len(record))
    for offset in range(1000, log.max_offset + 1):
        assert is_record_boundary(log, offset) == (offset in starts), offset
