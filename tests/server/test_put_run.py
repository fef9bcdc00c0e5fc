"""The put-run fast path (``meta.server.put_run``) against the one-put-at-a-time path.

Goal: the fast path is an optimisation only. Method: two brokers with the same config, the same
id clock and the same random seed, one with ``BrokerProtocol.put_runs`` off; the same
pipeline goes into both and the reply bytes, the segment files and the counters must be
identical, in every flush mode, for mixed pipelines and for every split of the input into two
reads. In-memory transports, a ``task.Clock`` and a manual flush executor (STYLE 21).
"""

from __future__ import annotations

import os
import random

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

import meta.server.handlers
from meta.config import ZkConfig
from meta.message_id import IdWorker
from meta.protocol.codec import decode_all, encode
from meta.protocol.commands import Get, Offset, Put, Result, Stats, Transaction, Version
from meta.protocol.message import checksum, iter_messages
from meta.server.broker import Broker
from meta.server.protocol import BrokerProtocol
from meta.store.manager import StoreManager
from meta.store.partition import PartitionLog
from tests.server.memory_broker import closing_broker
from tests.store.conftest import EIO, ManualExecutor, RecordingFiles, broker_config, topic_config

CLOCK_MS = 1_900_000_000_000


class Side:
    """One broker with one connection; ``feed`` returns the bytes written back."""

    def __init__(self, directory: str, threshold: int, put_runs: bool, segment_bytes: int) -> None:
        os.makedirs(directory)
        self.files = RecordingFiles()
        self.executor = ManualExecutor()
        clock = Clock()
        topics = (
            topic_config(
                "test", directory, num_partitions=4, unflush_threshold=threshold, stat=True
            ),
            topic_config("other", directory, num_partitions=2, unflush_threshold=threshold),
        )
        config = broker_config(
            directory,
            topics=topics,
            zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False),
            segment_bytes_max=segment_bytes,
            message_bytes_max=4096,
        )
        store = StoreManager(config, clock, files=self.files, executor=self.executor)
        self.broker = closing_broker(Broker(config, clock, store=store), clock, self.executor)
        self.broker.ids = IdWorker(0, clock_ms=lambda: CLOCK_MS)
        self.broker.start(listen=False)
        self.directory = directory
        self.protocol = BrokerProtocol(self.broker)
        self.protocol.put_runs = put_runs
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)

    def feed(self, *reads: bytes) -> bytes:
        for data in reads:
            self.protocol.dataReceived(data)
        self.executor.run_all()
        out = self.transport.value()
        self.transport.clear()
        return out

    def segments(self) -> dict[str, bytes]:
        found = {}
        for root, _dirs, names in os.walk(self.directory):
            for name in names:
                if name.endswith(".meta"):
                    path = os.path.join(root, name)
                    with open(path, "rb") as file:
                        found[os.path.relpath(path, self.directory)] = file.read()
        return found

    def counters(self) -> dict:
        counters = self.broker.counters
        return {name: getattr(counters, name) for name in ("cmd_put", "put_failed", "cmd_get")}


def pair(tmp_path, threshold: int, segment_bytes: int = 1024 * 1024) -> tuple[Side, Side]:
    fast = Side(str(tmp_path / "fast"), threshold, True, segment_bytes)
    slow = Side(str(tmp_path / "slow"), threshold, False, segment_bytes)
    return fast, slow


def put(topic: str, partition: int, data: bytes, opaque: int, crc: int | None = None) -> bytes:
    return encode(Put(topic, partition, data, 0, opaque, crc))


def mixed_pipeline() -> bytes:
    """Puts to several partitions and topics mixed with every kind of special case."""
    body = b"hello world"
    parts = [
        put("test", 0, body, 1),
        put("test", 1, body, 2, checksum(body)),  # right checksum
        put("test", 0, body, 3, -1),  # -1: not checked
        put("test", 2, body, 4, 12345),  # wrong checksum: 500
        put("test", 1, b"", 5),  # empty body
        put("nosuch", 0, body, 6),  # illegal topic: 500
        put("test", 9, body, 7),  # no such partition: 500
        b"put test 0 11 0 008\r\n" + body,  # non-canonical opaque: general path
        b"put test -1 11 0 9\r\n" + body,  # random partition
        b"put test 0 5000 0 10\r\n" + b"x" * 5000,  # over maxMessageSize: 500
        encode(Get("test", "g", 0, 0, 1 << 20, 11)),
        encode(Get("test", "g", 3, 0, 1 << 20, 12)),  # nothing there yet
        put("other", 1, body * 3, 13),  # a partition created by this put
        put("other", 1, body, 14),
        put("test", 3, body, 15, 2**31 - 1),  # wrong 10-digit checksum: 500
        encode(Stats("", 16)),
        encode(Stats("realtime", 16)),
        encode(Stats("offsets", 16)),
        encode(Stats("topics", 16)),
        encode(Version(17)),
        encode(Offset("test", "g", 0, 0, 18)),
        b"put test 1 11 -7 19\r\n" + body,  # negative flag
        b"put test 1 11 0 -20\r\n" + body,  # negative opaque
        put("test", 2, body, 0),
    ]
    return b"".join(parts)


@pytest.mark.parametrize("threshold", [0, 1, 1000])
def test_mixed_pipelines_get_byte_identical_replies_and_segments(tmp_path, threshold):
    """Method: the mixed pipeline three times (the 2nd and 3rd see data from before), as one
    read; with a small segment size so that rolls happen inside runs."""
    random.seed(7)
    fast, slow = pair(tmp_path, threshold, segment_bytes=200)
    stream = mixed_pipeline()
    fast_out, slow_out = [], []
    for _ in range(3):
        random.seed(len(fast_out))
        fast_out.append(fast.feed(stream))
        random.seed(len(slow_out))
        slow_out.append(slow.feed(stream))
    assert fast_out == slow_out
    codes = [frame.code for frame in decode_all(fast_out[0]) if isinstance(frame, Result)]
    assert codes.count(500) == 5  # the fast path did not swallow a failure
    assert fast.segments() == slow.segments()
    assert len(fast.segments()) > 4  # rolls happened
    assert fast.counters() == slow.counters()


def tx_put(key: str, topic: str, partition: int, data: bytes, opaque: int, crc=None) -> bytes:
    return encode(Put(topic, partition, data, 0, opaque, crc, key))


def tx(key: str, type_: str, opaque: int) -> bytes:
    return encode(Transaction(key, "s1", type_, opaque))


def transaction_pipeline() -> bytes:
    """Local and XA transactions whose puts take the tx put runs, with every special case."""
    body = b"in a transaction"
    local, other, xid = "TX:s1:1", "TX:s1:2", "XID:1:0a:0b:q1"
    parts = [
        tx(local, "BEGIN", 1),
        tx_put(local, "test", 0, body, 2),
        tx_put(local, "test", 1, body, 3, checksum(body)),  # right checksum
        tx_put(local, "test", 0, body, 4, 999),  # wrong checksum: 500
        tx_put(local, "test", 0, b"", 5),  # empty body
        tx_put(local, "nosuch", 0, body, 6),  # illegal topic: 500
        tx_put(local, "test", 9, body, 7),  # no such partition: 500
        tx_put(local, "other", 1, body, 8),  # a partition created by this put
        tx_put(local, "test", -1, body, 9),  # partition -1: 500, general path
        tx_put("TX:s1:01", "test", 0, body, 10),  # the same transaction, spelled otherwise
        tx_put(other, "test", 0, body, 11),  # not begun: 500
        put("test", 0, body, 12),  # a plain put between two runs
        tx_put(local, "test", 2, body, 13),
        tx(xid, "BEGIN", 14),
        tx_put(xid, "test", 3, body, 15),
        tx_put(xid, "test", 3, body * 2, 16),
        tx_put(local, "test", 3, body, 17),  # another transaction's key ends the run
        tx(local, "COMMIT_ONE_PHASE", 18),
        tx_put(local, "test", 0, body, 19),  # after the commit: 500
        tx(xid, "END", 20),
        tx(xid, "PREPARE", 21),
        tx_put(xid, "test", 3, body, 22),  # prepared: 500
        tx(xid, "COMMIT_TWO_PHASE", 23),
        encode(Get("test", "g", 3, 0, 1 << 20, 24)),
    ]
    return b"".join(parts)


@pytest.mark.parametrize("threshold", [0, 1000])
def test_transaction_runs_get_byte_identical_replies_and_segments(tmp_path, threshold):
    """Goal: the tx put runs (``handle_tx_put_run``) are an optimisation only. Method: the
    transaction pipeline in one read, then split at every position into two reads; replies,
    segments and counters equal the one-put-at-a-time broker's."""
    fast, slow = pair(tmp_path, threshold)
    stream = transaction_pipeline()
    first = fast.feed(stream)
    assert first == slow.feed(stream)
    codes = [frame.code for frame in decode_all(first) if isinstance(frame, Result)]
    assert codes.count(500) == 7 and codes.count(200) > 10
    assert fast.segments() == slow.segments()
    assert fast.counters() == slow.counters()
    for k in range(1, len(stream), 37):
        reads = (stream[:k], stream[k:])
        assert fast.feed(*reads) == slow.feed(*reads), k
    assert fast.segments() == slow.segments()
    assert fast.counters() == slow.counters()


def test_the_puts_of_a_transaction_take_the_run_path(tmp_path, monkeypatch):
    """Goal: the tx put run is taken. Method: the one-put handler fails the test if called."""

    def not_expected(*_arguments):
        raise AssertionError("a transactional put took the one-put path")

    monkeypatch.setitem(
        meta.server.handlers.HANDLERS, meta.server.handlers.TransactionalPut, not_expected
    )
    fast, _slow = pair(tmp_path, 1000)
    key = "TX:s1:7"
    stream = tx(key, "BEGIN", 0) + b"".join(
        tx_put(key, "test", i % 2, b"m%d" % i, i + 1) for i in range(10)
    )
    replies = decode_all(fast.feed(stream + tx(key, "COMMIT_ONE_PHASE", 11)))
    assert [(reply.code, reply.opaque) for reply in replies] == [(200, i) for i in range(12)]


def test_every_split_of_a_pipeline_into_two_reads_gives_the_same_replies(tmp_path):
    """Method: both brokers get the same two reads each round, split at position k, for every
    k (partial headers, partial bodies, a split CR LF); a put whose body is parked by the
    general decoder finishes on the general path."""
    fast, slow = pair(tmp_path, 1000)
    body = b"0123456789"
    stream = b"".join(
        [
            put("test", 0, body, 1),
            put("test", 1, body, 2, checksum(body)),
            put("test", 0, body, 3, 99),
            encode(Get("test", "g", 0, 0, 1 << 20, 4)),
            put("test", 0, body, 5),
            b"put test 1 10 0 6\r\n" + body,
        ]
    )
    for split in range(len(stream) + 1):
        random.seed(split)
        got = fast.feed(stream[:split], stream[split:])
        random.seed(split)
        assert got == slow.feed(stream[:split], stream[split:]), f"split at {split}"
    assert fast.segments() == slow.segments()
    assert fast.counters() == slow.counters()


def test_the_pipeline_fed_one_byte_at_a_time_gives_the_same_replies(tmp_path):
    fast, slow = pair(tmp_path, 0)
    stream = mixed_pipeline()
    random.seed(1)
    got = fast.feed(*(stream[i : i + 1] for i in range(len(stream))))
    random.seed(1)
    assert got == slow.feed(*(stream[i : i + 1] for i in range(len(stream))))
    assert fast.segments() == slow.segments()


def test_a_read_of_plain_puts_is_staged_as_one_batch_per_partition(tmp_path, monkeypatch):
    """Goal: the fast path is taken. Method: 300 puts to two partitions in one read; the
    store sees one ``stage`` of 150 records per partition."""
    calls = []
    original_stage = PartitionLog.stage

    def stage(self, record, ack, count=1):
        calls.append((self.name, count))
        return original_stage(self, record, ack, count)

    monkeypatch.setattr(PartitionLog, "stage", stage)
    fast, _slow = pair(tmp_path, 1000)
    fast.feed(put("test", 0, b"x", 0) + put("test", 1, b"x", 0))  # create both partitions
    calls.clear()
    stream = b"".join(put("test", i % 2, b"m%d" % i, i) for i in range(300))
    replies = decode_all(fast.feed(stream))
    assert sorted(calls) == [("test-0", 150), ("test-1", 150)]
    assert [reply.code for reply in replies] == [200] * 300
    assert sorted(reply.opaque for reply in replies) == list(range(300))
    stored = b"".join(content for name, content in sorted(fast.segments().items()))
    assert sum(1 for _ in iter_messages(stored)) >= 300


def test_a_failed_fsync_fails_every_put_of_the_run_as_the_slow_path_does(tmp_path):
    fast, slow = pair(tmp_path, 0)
    first = put("test", 0, b"a", 1) + put("test", 1, b"b", 2)
    assert fast.feed(first) == slow.feed(first)
    fast.files.fsync_error = slow.files.fsync_error = EIO
    stream = b"".join(put("test", i % 2, b"c", i) for i in range(10))
    got = fast.feed(stream)
    assert got == slow.feed(stream)
    assert {frame.code for frame in decode_all(got)} == {500}
    later = put("test", 0, b"d", 20) + encode(Get("test", "g", 0, 0, 1024, 21))
    assert fast.feed(later) == slow.feed(later)


@pytest.mark.parametrize("threshold", [0, 1])
def test_a_failed_fsync_fails_a_single_put_as_the_slow_path_does(tmp_path, threshold):
    """A read of one put takes ``handle_single_put``; its failed ack gives the same 500."""
    fast, slow = pair(tmp_path, threshold)
    first = put("test", 0, b"a", 1)
    assert fast.feed(first) == slow.feed(first)
    fast.files.fsync_error = slow.files.fsync_error = EIO
    for opaque in (2, 3):  # the failing put, then one to the failed partition
        single = put("test", 0, b"b", opaque)
        got = fast.feed(single)
        assert got == slow.feed(single)
        assert [(frame.code, frame.opaque) for frame in decode_all(got)] == [(500, opaque)]


def test_a_slave_answers_plain_puts_403(tmp_path):
    fast, _slow = pair(tmp_path, 1000)
    fast.broker.slave_id = 0
    fast.broker.refuses_puts = True
    replies = decode_all(fast.feed(put("test", 0, b"x", 1) + put("test", 0, b"y", 2)))
    assert [(reply.code, reply.opaque) for reply in replies] == [(403, 1), (403, 2)]


def test_the_unanswered_count_follows_the_run_and_its_acks(tmp_path):
    """Goal: backpressure still sees every put of a run. Method: group commit with the fsync
    held back: the run's puts are unanswered until it runs; a closed connection's late acks
    only settle the count."""
    fast, _slow = pair(tmp_path, 0)
    fast.feed(put("test", 0, b"x", 0))
    stream = b"".join(put("test", 0, b"x", i) for i in range(50))
    fast.protocol.dataReceived(stream)
    assert fast.protocol.inflight == 50
    fast.executor.run_all()
    assert fast.protocol.inflight == 0
    assert len(decode_all(fast.transport.value())) == 50
    fast.protocol.dataReceived(stream)
    fast.protocol.connectionLost(None)
    fast.transport.clear()
    fast.executor.run_all()
    assert fast.protocol.inflight == 0
    assert fast.transport.value() == b""


def test_puts_refused_at_once_by_a_failed_partition_are_not_counted_in_flight(tmp_path):
    """Goal: a put its partition answers at once (stopped on a failed fsync) is a ready
    reply: it never counts among the connection's requests in flight, or 16,384 refusals
    would stop the connection being read. Method: runs and single puts to the failed
    partition; the count stays 0 and every put is answered 500."""
    fast, _slow = pair(tmp_path, 0)
    fast.feed(put("test", 0, b"a", 1))
    fast.files.fsync_error = EIO
    fast.feed(put("test", 0, b"b", 2))  # the failing put: the partition stops
    stream = b"".join(put("test", 0, b"c", i) for i in range(100))
    fast.protocol.dataReceived(stream)
    assert fast.protocol.inflight == 0
    fast.protocol.dataReceived(put("test", 0, b"d", 100))
    assert fast.protocol.inflight == 0
    replies = decode_all(fast.feed())
    assert [(reply.code, reply.opaque) for reply in replies] == [(500, i) for i in range(101)]


def test_a_batch_whose_write_fails_inside_its_stage_is_not_counted_in_flight(tmp_path):
    """Goal: the same when the failure comes inside the stage (the batch fills its segment,
    so the stage writes at once, and the write fails). Method: a segment of 3 records and a
    write error; a run of 5 puts, all answered 500 with none left in flight."""
    record_bytes = 20 + 1
    fast, _slow = pair(tmp_path, 0, segment_bytes=3 * record_bytes)
    fast.files.write_error = EIO
    fast.protocol.dataReceived(b"".join(put("test", 0, b"x", i) for i in range(5)))
    assert fast.protocol.inflight == 0
    replies = decode_all(fast.feed())
    assert sorted((reply.code, reply.opaque) for reply in replies) == [(500, i) for i in range(5)]


@pytest.mark.parametrize("segment_records", [1, 3])
def test_a_segment_that_a_record_fills_exactly_rolls_where_single_puts_roll_it(
    tmp_path, segment_records
):
    fast, slow = pair(tmp_path, 1000, segment_bytes=segment_records * 30)
    stream = b"".join(put("test", 0, b"%010d" % i, i) for i in range(10))
    assert fast.feed(stream) == slow.feed(stream)
    assert fast.segments() == slow.segments()
    assert len(fast.segments()) == 10 // segment_records + 1
