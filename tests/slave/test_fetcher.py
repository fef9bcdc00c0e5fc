"""The slave's fetch-batch handling (``meta.slave.fetcher``), without threads or sockets.

``_process`` is called directly, as a fetch thread would, with a reactor whose
``callFromThread`` runs the call at once, so the hand-off and its wait are exercised.
"""

from __future__ import annotations

import pytest
from twisted.internet import defer

from meta.client.cluster import BrokerAddress, Partition
from meta.client.fetch import FetchRequest, FetchSettings
from meta.errors import InvalidRecordError
from meta.protocol.message import pack_message
from meta.slave.fetcher import ReplicationHalted, SlaveFetchManager, record_sizes

RECORDS = [pack_message(-5, 0, b"a"), pack_message(7, 1, b"\0\0\0\1kdata"), pack_message(9, 6, b"")]


class ImmediateReactor:
    def callFromThread(self, function, *arguments):  # noqa: N802 - Twisted's name
        function(*arguments)


class Slave:
    """A SlaveFetchManager whose append and halt record their calls."""

    def __init__(self, append_result=None) -> None:
        self.appends: list[tuple] = []
        self.halts: list[tuple] = []
        self.append_result = append_result
        settings = FetchSettings("g", 1.0, 500, 0, "error", 1)
        self.manager = SlaveFetchManager(None, settings, ImmediateReactor(), self.append, self.halt)
        self.request = FetchRequest("t", Partition(0, 2), BrokerAddress("h", 1), 100, max_size=4096)
        self.manager._requests = {self.request.key: self.request}

    def append(self, topic, partition, base, records, sizes):
        self.appends.append((topic, partition, base, records, sizes))
        if self.append_result is not None:
            return self.append_result
        return defer.succeed(len(records))

    def halt(self, key, reason):
        self.halts.append((key, reason))


def test_record_sizes_covers_the_complete_records_only():
    data = b"".join(RECORDS) + RECORDS[0][:7]
    assert record_sizes(data, 0) == ([len(record) for record in RECORDS], 9)


def test_record_sizes_refuses_a_bad_crc():
    broken = bytearray(RECORDS[0])
    broken[-1] ^= 1
    with pytest.raises(InvalidRecordError):
        record_sizes(bytes(broken), 0)


def test_a_batch_is_appended_verbatim_at_the_fetched_offset_and_the_offset_moves_on():
    slave = Slave()
    data = b"".join(RECORDS)
    slave.manager._process(slave.request, data + RECORDS[1][:25])
    assert slave.appends == [("t", 2, 100, data, [len(record) for record in RECORDS])]
    assert slave.request.offset == 100 + len(data)
    assert slave.request.msg_id == 9
    assert slave.request.delay_ms == 0
    assert slave.halts == []


def test_a_refused_append_stops_the_partition_with_the_reason():
    slave = Slave(defer.fail(ReplicationHalted("the local end 5 differs")))
    slave.manager._process(slave.request, b"".join(RECORDS))
    assert slave.request.offset == 100
    assert slave.halts == [(("t", "0-2"), "the local end 5 differs")]
    assert slave.request.key not in slave.manager._requests  # not fetched again


def test_a_failed_append_stops_the_partition_naming_the_error():
    slave = Slave(defer.fail(OSError("disk full")))
    slave.manager._process(slave.request, RECORDS[0])
    [(_key, reason)] = slave.halts
    assert "failed: OSError('disk full')" in reason


def test_a_bad_record_from_the_master_stops_the_partition_and_appends_nothing():
    slave = Slave()
    broken = bytearray(RECORDS[0])
    broken[-1] ^= 1
    slave.manager._process(slave.request, bytes(broken))
    assert slave.appends == []
    assert "bad record" in slave.halts[0][1]


def test_a_record_larger_than_the_fetch_size_grows_the_next_fetch():
    slave = Slave()
    big = pack_message(1, 0, b"x" * 10_000)
    slave.manager._process(slave.request, big[:4096])
    assert slave.appends == []
    assert slave.request.max_size >= len(big)
    assert slave.request.delay_ms == 0


def test_a_301_stops_the_partition_instead_of_jumping():
    slave = Slave()
    assert slave.manager._moved(slave.request, 5000) is False
    assert slave.request.offset == 100
    assert "answered 301 with 5000" in slave.halts[0][1]
