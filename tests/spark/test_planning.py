"""Splitting a partition's byte range into pieces (pure: a fake broker answers ``offset``)."""

from __future__ import annotations

from meta.client.cluster import BrokerAddress, Partition
from meta.client.zk.spark import ServedPartition
from meta.protocol.commands import Offset, Result
from meta.spark.options import parse_read_options
from meta.spark.planning import split_range

ENTRY = ServedPartition("t", Partition(1, 0), BrokerAddress("127.0.0.1", 8123))


class SegmentsBroker:
    """Answers ``offset`` with the start of the segment holding it."""

    def __init__(self, segment_starts: list[int]) -> None:
        self.segment_starts = segment_starts

    def next_opaque(self) -> int:
        return 1

    def request(self, command: Offset) -> Result:
        start = max(s for s in self.segment_starts if s <= command.offset)
        return Result(200, b"%d" % start, command.opaque)


def pieces(segment_starts, start, end, size):
    options = parse_read_options({"zk.connect": "h:1", "topic": "t", "maxBytesPerPartition": size})
    broker = SegmentsBroker(segment_starts)
    return [(p.start, p.end, p.anchor) for p in split_range(broker, ENTRY, start, end, options)]


def test_pieces_cover_the_range_without_gaps():
    found = pieces([0], 0, 1000, "300")
    assert found == [(0, 300, 0), (300, 600, 0), (600, 900, 0), (900, 1000, 0)]


def test_cuts_move_back_to_segment_starts_when_that_is_free():
    found = pieces([0, 250, 520, 800], 0, 1000, "300")
    assert found == [(0, 250, 0), (250, 520, 250), (520, 800, 520), (800, 1000, 800)]


def test_anchor_never_precedes_the_range_start():
    assert pieces([0], 100, 700, "300") == [(100, 400, 100), (400, 700, 100)]


def test_a_small_range_is_one_piece():
    assert pieces([0], 0, 50, "300") == [(0, 50, 0)]


def test_cuts_move_forward_to_a_near_segment_start_instead_of_re_reading_a_segment():
    # Segments a little bigger than the piece size (a segment rolls after the record that
    # crosses its size): cutting at 300 would make the next piece re-read 0..300.
    found = pieces([0, 310, 620, 930], 0, 1000, "300")
    assert found == [(0, 310, 0), (310, 620, 310), (620, 930, 620), (930, 1000, 930)]


def test_a_far_segment_start_does_not_move_the_cut():
    found = pieces([0, 400], 0, 1000, "300")
    assert found == [(0, 300, 0), (300, 400, 0), (400, 900, 400), (900, 1000, 400)]
