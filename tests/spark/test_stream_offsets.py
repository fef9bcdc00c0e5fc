"""Streaming offsets and rate-limit cuts of the ``metaq`` source (pure: fake brokers)."""

from __future__ import annotations

import pytest

from meta.client.cluster import BrokerAddress, Partition
from meta.client.zk.spark import ServedPartition
from meta.errors import ClientError
from meta.protocol.commands import Data, Get, Offset, Result
from meta.protocol.message import pack_message
from meta.spark.options import OptionError, parse_stream_options
from meta.spark.stream_offsets import advanced, byte_cuts, from_document, to_document
from meta.spark.stream_planning import cut_at_message

A0, A1, B0 = ("a", Partition(1, 0)), ("a", Partition(2, 1)), ("b", Partition(1, 0))
ENTRY = ServedPartition("t", Partition(1, 0), BrokerAddress("127.0.0.1", 8123))
OPTIONS = parse_stream_options({"zk.connect": "h:1", "topic": "t", "fetchBytes": "64"})


def test_documents_list_topics_and_partitions_in_one_order():
    first = to_document({A1: 5, B0: 1, A0: 3})
    second = to_document({B0: 1, A0: 3, A1: 5})
    assert first == {"a": {"1-0": 3, "2-1": 5}, "b": {"1-0": 1}}
    assert list(first) == list(second) == ["a", "b"]
    assert list(first["a"]) == list(second["a"])


def test_a_document_reads_back():
    assert from_document(to_document({A0: 3, B0: 9})) == {A0: 3, B0: 9}


@pytest.mark.parametrize("document", [[], {"a": 1}, {"a": {"1-0": -1}}, {"a": {"x": 1}}])
def test_a_malformed_document_is_refused(document):
    with pytest.raises(ClientError):
        from_document(document)


def test_advanced_never_moves_back_and_keeps_vanished_partitions():
    assert advanced({A0: 10, A1: 7}, {A0: 4, B0: 2}) == {A0: 10, A1: 7, B0: 2}


def test_byte_cuts_share_the_budget_by_backlog():
    assert byte_cuts({A0: 0, A1: 0}, {A0: 300, A1: 100}, 200) == {A0: 150, A1: 50}


def test_byte_cuts_are_empty_when_everything_fits():
    assert byte_cuts({A0: 0, A1: 50}, {A0: 100, A1: 50}, 100) == {}


def test_every_partition_with_a_backlog_gets_a_byte():
    assert byte_cuts({A0: 0, A1: 0}, {A0: 10_000, A1: 2}, 100) == {A0: 99, A1: 1}


def test_ending_offsets_are_refused_for_a_stream():
    with pytest.raises(OptionError, match="endingOffsets is for batch reads only"):
        parse_stream_options({"zk.connect": "h:1", "topic": "t", "endingOffsets": "latest"})


def test_stream_options_parse_the_rate_limit_and_the_group():
    options = parse_stream_options(
        {"zk.connect": "h:1", "topic": "t", "maxBytesPerTrigger": "4096", "commitToGroup": "g"}
    )
    assert (options.max_bytes_per_trigger, options.commit_to_group) == (4096, "g")


class LogBroker:
    """Answers ``offset`` (one segment at ``segment_start``) and ``get`` from a byte log."""

    def __init__(self, sizes: list[int], segment_start: int = 0) -> None:
        self.log = b"".join(pack_message(n, 0, b"x" * size) for n, size in enumerate(sizes))
        self.segment_start = segment_start
        self.gets: list[Get] = []

    def next_opaque(self) -> int:
        return 1

    def request(self, command):
        if isinstance(command, Offset):
            start = self.segment_start if command.offset >= self.segment_start else 0
            return Result(200, b"%d" % start, command.opaque)
        self.gets.append(command)
        return Data(self.log[command.offset : command.offset + command.max_size], 1)


def test_a_cut_moves_back_to_the_last_message_start():
    broker = LogBroker([10, 10, 10, 10])  # Records of 30 bytes: starts 0, 30, 60, 90.
    assert cut_at_message(broker, ENTRY, 0, 75, OPTIONS) == 60


def test_a_cut_on_a_message_start_stays():
    assert cut_at_message(LogBroker([10, 10, 10]), ENTRY, 0, 60, OPTIONS) == 60


def test_a_cut_inside_the_first_message_takes_that_whole_message():
    broker = LogBroker([200, 10])  # 220 bytes: larger than fetchBytes, so the get grows.
    assert cut_at_message(broker, ENTRY, 0, 5, OPTIONS) == 220


def test_a_cut_walks_from_the_segment_holding_it():
    broker = LogBroker([10] * 10, segment_start=150)
    assert cut_at_message(broker, ENTRY, 0, 200, OPTIONS) == 180
    assert broker.gets[0].offset == 150
