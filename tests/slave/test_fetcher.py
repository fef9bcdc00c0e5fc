"""The slave's fetch-batch handling (``meta.slave.fetcher``), without threads or sockets.

``_process`` is called directly, as a fetch thread would, with a reactor whose
``callFromThread`` runs the call at once, so the hand-off and its wait are exercised.
"""

from __future__ import annotations

import itertools
from concurrent.futures import Future

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import defer

from meta.client.cluster import BrokerAddress, Partition
from meta.client.fetch.manager import FetchRequest, FetchSettings
from meta.errors import InvalidRecordError
from meta.protocol.commands import Get
from meta.protocol.message import HEADER_SIZE, pack_message
from meta.slave.fetcher import (
    REPLAY_FETCH_BYTES_MAX,
    UNCONFIRMED_TRIES_MAX,
    ReplicationHalted,
    SlaveFetchManager,
    first_reaching,
)
from meta.slave.record_check import check_records, record_ends

RECORDS = [pack_message(-5, 0, b"a"), pack_message(7, 1, b"\0\0\0\1kdata"), pack_message(9, 6, b"")]


class ImmediateReactor:
    def callFromThread(self, function, *arguments):  # noqa: N802 - Twisted's name
        function(*arguments)


class Slave:
    """A SlaveFetchManager whose append and halt record their calls."""

    def __init__(self, append_result=None, layout=None, start_at=None, pool=None) -> None:
        self.appends: list[tuple] = []
        self.counts: list[list[int]] = []
        self.halts: list[tuple] = []
        self.asked: list[int] = []
        self.master_segment_starts: set[int] = set()
        self.append_result = append_result
        settings = FetchSettings("g", 1.0, 500, 0, "error", 1)
        self.request = FetchRequest("t", Partition(0, 2), BrokerAddress("h", 1), 100, max_size=4096)
        layouts = {} if layout is None else {self.request.key: layout}
        self.manager = SlaveFetchManager(
            pool, settings, ImmediateReactor(), self.append, self.halt, start_at, layouts
        )
        self.manager._requests = {self.request.key: self.request}
        self.manager.ask_offset = self.ask_offset

    def ask_offset(self, request, offset):
        """The master's ``offset`` answer: ``offset`` itself when a segment starts there."""
        self.asked.append(offset)
        return offset if offset in self.master_segment_starts else 0

    def append(self, topic, partition, base, records, entries, counts):
        assert len(counts) == len(entries) and all(count > 0 for count in counts)
        self.appends.append((topic, partition, base, records, entries))
        self.counts.append(counts)
        if self.append_result is not None:
            return self.append_result
        return defer.succeed((0, 1 << 30))

    def halt(self, key, reason):
        self.halts.append((key, reason))


class Connection:
    """Records each request and returns a future the test completes (or not)."""

    def __init__(self) -> None:
        self.sent: list[tuple[Get, Future]] = []
        self.waits = 0

    def request(self, command, timeout_s):
        future: Future = Future()
        self.sent.append((command, future))
        return future

    def wait_sent(self, timeout_s):
        self.waits += 1


class Pool:
    def __init__(self) -> None:
        self.connection = Connection()

    def get(self, address):
        return self.connection


def running_slave(**arguments) -> tuple[Slave, Connection]:
    """A Slave whose manager counts as started (so it prefetches) on a fake pool."""
    pool = Pool()
    slave = Slave(pool=pool, **arguments)
    slave.manager._running = True
    return slave, pool.connection


def test_the_next_get_is_sent_before_the_batch_is_checked_and_the_next_fetch_takes_it():
    """The get for the batch's end leaves while this batch is checked and handed off; the
    next fetch waits for that reply instead of sending the same get again."""
    slave, connection = running_slave()
    data = b"".join(RECORDS) + RECORDS[1][:25]
    slave.manager.process_batch(slave.request, data)
    [(get, future)] = connection.sent
    assert (get.offset, get.max_size) == (100 + len(b"".join(RECORDS)), 4096)
    assert (get.offset, get.max_size) == (slave.request.next_offset, slave.request.max_size)
    assert connection.waits == 1  # the writer thread sends it before the CRCs are checked
    assert slave.manager.send(slave.request, slave.manager._get_command(slave.request)) is future
    assert len(connection.sent) == 1 and not future.cancelled()


def test_a_prefetched_get_that_no_longer_matches_is_cancelled_and_sent_anew():
    slave, connection = running_slave()
    slave.manager.process_batch(slave.request, b"".join(RECORDS))
    [(_get, stale)] = connection.sent
    slave.request.max_size *= 2  # e.g. grown meanwhile
    fresh = slave.manager.send(slave.request, slave.manager._get_command(slave.request))
    assert stale.cancelled() and fresh is connection.sent[1][1]


def test_a_bad_crc_in_a_fetched_chunk_stops_the_partition_and_drops_the_prefetched_get():
    """The prefetch does not let a corrupt batch through: nothing of it is appended, the
    partition stops with the reason, and the get sent ahead is cancelled."""
    slave, connection = running_slave()
    broken = bytearray(b"".join(RECORDS))
    broken[len(RECORDS[0]) + HEADER_SIZE] ^= 1
    slave.manager.process_batch(slave.request, broken)
    assert slave.appends == []
    assert "checksum mismatch" in slave.halts[0][1]
    [(_get, future)] = connection.sent
    assert future.cancelled()
    assert slave.manager._prefetched == {}
    assert slave.request.offset == 100


def test_stop_cancels_a_get_sent_ahead():
    slave, connection = running_slave()
    slave.manager.process_batch(slave.request, b"".join(RECORDS))
    slave.manager.stop()
    assert connection.sent[0][1].cancelled()


def test_an_in_place_reply_is_handed_over_as_a_view_of_that_bytearray():
    slave = Slave()
    data = bytearray(b"".join(RECORDS) + RECORDS[1][:25])
    slave.manager.process_batch(slave.request, data)
    records = slave.appends[0][3]
    assert isinstance(records, memoryview) and records.obj is data
    assert records == b"".join(RECORDS)


def test_record_ends_covers_the_complete_records_only():
    data = b"".join(RECORDS) + RECORDS[0][:7]
    assert record_ends(data, 0) == list(itertools.accumulate(len(record) for record in RECORDS))
    check_records(data, record_ends(data, 0), 0)


def test_record_ends_refuses_a_negative_length():
    broken = bytearray(RECORDS[0])
    broken[0:4] = (-1).to_bytes(4, "big", signed=True)
    with pytest.raises(InvalidRecordError, match="negative"):
        record_ends(bytes(broken), 0)


def test_check_records_refuses_a_bad_crc_naming_its_offset():
    broken = bytearray(b"".join(RECORDS))
    broken[len(RECORDS[0]) + HEADER_SIZE] ^= 1  # the second record's payload
    ends = record_ends(broken, 1000)
    with pytest.raises(
        InvalidRecordError, match=f"checksum mismatch at offset {1000 + len(RECORDS[0])}"
    ):
        check_records(broken, ends, 1000)


def test_a_batch_is_appended_verbatim_at_the_fetched_offset_and_the_offset_moves_on():
    slave = Slave()
    data = b"".join(RECORDS)
    slave.manager.process_batch(slave.request, data + RECORDS[1][:25])
    assert slave.appends == [("t", 2, 100, data, [len(record) for record in RECORDS])]
    assert slave.request.offset == 100 + len(data)
    assert slave.request.msg_id == 9
    assert slave.request.delay_ms == 0
    assert slave.halts == []


def test_a_refused_append_stops_the_partition_with_the_reason():
    slave = Slave(defer.fail(ReplicationHalted("the local end 5 differs")))
    slave.manager.process_batch(slave.request, b"".join(RECORDS))
    assert slave.halts == [(("t", "0-2"), "the local end 5 differs")]
    assert slave.request.key not in slave.manager._requests  # not fetched again


def test_a_failed_append_stops_the_partition_naming_the_error():
    slave = Slave(defer.fail(OSError("disk full")))
    slave.manager.process_batch(slave.request, RECORDS[0])
    [(_key, reason)] = slave.halts
    assert "failed: OSError('disk full')" in reason


def test_at_most_two_batches_wait_for_the_reactor_then_the_fetch_thread_waits(monkeypatch):
    """The reactor writes a batch while the next one is fetched, but no more than
    APPENDS_IN_FLIGHT_MAX batches of a partition are handed off unwritten (bounded memory);
    one that stays unwritten for APPEND_WAIT_S stops the partition."""
    monkeypatch.setattr("meta.slave.fetcher.APPEND_WAIT_S", 0.05)
    slave = Slave(defer.Deferred())  # never written
    for _ in range(2):
        slave.manager.process_batch(slave.request, RECORDS[0])
    assert len(slave.appends) == 2 and slave.halts == []
    assert slave.request.offset == 100 + 2 * len(RECORDS[0])
    slave.manager.process_batch(slave.request, RECORDS[0])
    assert len(slave.appends) == 2
    assert "not written within" in slave.halts[0][1]


def test_stop_waits_until_the_handed_off_batches_are_written():
    pending = defer.Deferred()
    slave = Slave(pending)
    slave.manager.process_batch(slave.request, RECORDS[0])
    pending.callback((0, 1 << 30))
    slave.manager.stop()
    assert slave.manager._in_flight == {}


def test_a_bad_record_from_the_master_stops_the_partition_and_appends_nothing():
    slave = Slave()
    broken = bytearray(RECORDS[0])
    broken[-1] ^= 1
    slave.manager.process_batch(slave.request, bytes(broken))
    assert slave.appends == []
    assert "bad record" in slave.halts[0][1]


def test_a_record_larger_than_the_fetch_size_grows_the_next_fetch():
    slave = Slave()
    big = pack_message(1, 0, b"x" * 10_000)
    slave.manager.process_batch(slave.request, big[:4096])
    assert slave.appends == []
    assert slave.request.max_size >= len(big)
    assert slave.request.delay_ms == 0


def test_a_301_for_a_partition_with_local_data_stops_it_instead_of_jumping():
    slave = Slave(start_at=lambda topic, partition, offset: None)
    assert slave.manager.handle_moved(slave.request, 5000) is False
    assert slave.request.offset == 100
    assert "answered 301 with 5000" in slave.halts[0][1]


def test_a_301_for_a_partition_without_local_data_starts_it_at_the_masters_offset():
    """zk spec 6.1 step 6.3: the local partition's first segment starts where the master's
    data starts, so the offsets stay the master's."""
    started = []

    def start_at(topic, partition, offset):
        started.append((topic, partition, offset))
        return (offset, 1000)

    slave = Slave(start_at=start_at)
    slave.request.offset = 0
    assert slave.manager.handle_moved(slave.request, 5000) is True
    assert started == [("t", 2, 5000)]
    assert slave.request.offset == 5000
    assert slave.manager._layouts[slave.request.key] == (5000, 1000)
    assert slave.halts == []


def test_a_301_that_cannot_create_the_partition_stops_it_naming_why():
    def start_at(topic, partition, offset):
        raise ReplicationHalted("not accepted here")

    slave = Slave(start_at=start_at)
    assert slave.manager.handle_moved(slave.request, 5000) is False
    assert "not accepted here" in slave.halts[0][1]


SIZES = [len(record) for record in RECORDS]
ENDS = list(itertools.accumulate(SIZES))


def test_first_reaching_finds_the_record_that_fills_the_segment():
    assert first_reaching(100, ENDS, (0, 100 + SIZES[0] + 1)) == 1
    assert first_reaching(100, ENDS, (0, 100 + SIZES[0])) == 0
    assert first_reaching(100, ENDS, (0, 100 + sum(SIZES) + 1)) is None


@given(
    st.lists(st.integers(HEADER_SIZE, 5000), max_size=30),
    st.integers(0, 200),
    st.integers(1, 100_000),
)
def test_first_reaching_is_the_first_record_whose_end_reaches_the_roll_size(sizes, base, size):
    """The bisect over the record ends equals the record-by-record definition."""
    end, expected = base, None
    for index, record_size in enumerate(sizes):
        end += record_size
        if end >= size:
            expected = index
            break
    assert first_reaching(base, list(itertools.accumulate(sizes)), (0, size)) == expected


def test_record_ends_refuses_a_negative_length_in_the_last_header():
    """A negative length right after complete records is refused, not taken as a cut."""
    broken = (-7).to_bytes(4, "big", signed=True) + bytes(HEADER_SIZE - 4)
    with pytest.raises(InvalidRecordError, match="negative"):
        record_ends(b"".join(RECORDS) + broken, 0)


def test_a_batch_below_the_segment_size_is_one_write_without_asking():
    """One stage (one write, one ack) per fetch: no record fills the segment, so the store
    does not roll inside it, as the master did not."""
    slave = Slave(layout=(0, 100 + sum(SIZES) + 1))
    slave.manager.process_batch(slave.request, b"".join(RECORDS))
    assert slave.appends[0][4] == [sum(SIZES)]
    assert slave.counts == [[len(SIZES)]]
    assert slave.asked == []
    assert slave.request.offset == 100 + sum(SIZES)


def test_a_batch_that_ends_where_the_master_rolled_keeps_the_rest_in_one_write():
    """The master wrote records 1 and 2 in one append past the size, then rolled: the copy
    stages them as one entry, so the local store rolls after both, as the master did."""
    end = 100 + sum(SIZES)
    slave = Slave(layout=(0, 100 + SIZES[0] + 1))
    slave.master_segment_starts = {end}
    slave.manager.process_batch(slave.request, b"".join(RECORDS))
    assert slave.asked == [end]
    assert slave.appends[0][4] == [SIZES[0], SIZES[1] + SIZES[2]]
    assert slave.counts == [[1, 2]]
    assert slave.request.offset == end
    assert slave.request.msg_id == 9


def test_records_past_the_size_wait_while_the_masters_segment_goes_on():
    """No master segment starts at the batch's end: only the records before the one that
    fills the local segment are appended; the rest is fetched again."""
    slave = Slave(layout=(0, 100 + SIZES[0] + 1))
    slave.manager.process_batch(slave.request, b"".join(RECORDS))
    assert slave.appends[0][4] == [SIZES[0]]
    assert slave.counts == [[1]]
    assert slave.request.offset == 100 + SIZES[0]
    assert slave.request.msg_id == -5


def test_a_cut_reply_past_the_size_grows_the_fetch_then_gives_up_with_a_warning(caplog):
    slave = Slave(layout=(0, 101))
    data = b"".join(RECORDS) + RECORDS[0][:5]  # cut: a partial record follows
    slave.manager.process_batch(slave.request, data)
    assert slave.appends == []
    assert slave.request.max_size == 8192
    for _ in range(UNCONFIRMED_TRIES_MAX):
        slave.manager.process_batch(slave.request, data)
    assert slave.appends[0][4] == [sum(SIZES)]
    assert "appending" in caplog.text


def full_reply(size: int) -> bytes:
    """``size`` bytes of 1 KiB-payload records, the last one cut (as a get of ``size``)."""
    record = pack_message(1, 0, b"r" * 1024)
    return (record * (size // len(record) + 1))[:size]


def test_full_replies_grow_the_fetch_to_the_replay_bound_and_short_ones_shrink_it():
    """A backlog (every reply as long as asked) doubles the fetch size up to
    REPLAY_FETCH_BYTES_MAX and no further; replies under half the size (caught up) halve it
    back to the subscription's size."""
    slave = Slave()
    sizes = []
    for _ in range(12):
        slave.manager.process_batch(slave.request, full_reply(slave.request.max_size))
        sizes.append(slave.request.max_size)
    assert sizes[:3] == [8192, 16384, 32768]
    assert max(sizes) == sizes[-1] == REPLAY_FETCH_BYTES_MAX
    for _ in range(12):
        slave.manager.process_batch(slave.request, b"".join(RECORDS))
    assert slave.request.max_size == slave.request.initial_max_size == 4096
    assert slave.halts == []
    appended = b"".join(bytes(append[3]) for append in slave.appends)
    assert slave.request.offset == 100 + len(appended)


def test_a_cut_reply_is_handed_over_as_a_view_of_its_complete_records():
    """No copy of the reply: the records are a memoryview of it, ending at the last
    complete record."""
    slave = Slave()
    data = b"".join(RECORDS) + RECORDS[1][:25]
    slave.manager.process_batch(slave.request, data)
    records = slave.appends[0][3]
    assert isinstance(records, memoryview)
    assert records.obj is data
    assert records == b"".join(RECORDS)
