"""The gregor slave's sync runs (``sync_run.handle_sync_run``) against ``handle_sync``.

Goal: a run of syncs handled at once stores the same records at the same offsets and gives
the same replies as each sync handled alone, including the syncs the batch hands back (a
wrong checksum, a refused partition, a full queue). Method: two in-memory gregor slaves
(``tests.sync.test_gregor.Slave``), one with ``BrokerProtocol.put_runs`` off, fed the same
bytes; and the decoder's ``next_sync_run`` against ``next_command`` field by field.
"""

from __future__ import annotations

from errno import EIO

import pytest

import meta.server.protocol
import meta.sync.gregor
from meta.protocol.codec import NEED_DATA, Decoder, encode
from meta.protocol.commands import Sync
from meta.protocol.message import iter_messages
from tests.sync.test_gregor import Slave, replies


def syncs() -> list[Sync]:
    found = [
        Sync("test", index % 2, b"body %d" % index, index % 3, 2**62 + index, index, -1)
        for index in range(40)
    ]
    found[7] = Sync("test", 1, b"seven", 0, 7, 7, None)  # Java's 7-token form
    found[11] = Sync("test", 1, b"eleven", 0, 11, 11, 5)  # a wrong checksum
    found[13] = Sync("test", 9, b"thirteen", 0, 13, 13, -1)  # no such partition
    found[17] = Sync("test", 0, b"x", 1, -(2**63), 17, 215750275)  # the right checksum
    return found


def run(slave: Slave, reads: list[bytes]) -> tuple[list, dict]:
    protocol, transport = slave.connect()
    for data in reads:
        protocol.dataReceived(data)
    slave.executor.run_all()
    answered = sorted((r.opaque, r.code, r.body) for r in replies(transport))
    stored = {}
    for partition in (0, 1):
        partition_log = slave.broker.store.get("test", partition)
        records = iter_messages(partition_log.read(partition_log.slice(0, 1 << 20)))
        stored[partition] = [(r.offset, r.msg_id, r.flag, r.payload) for r in records]
    return answered, stored


def cut_anywhere() -> list[bytes]:
    """Several reads, frames cut anywhere: runs of syncs."""
    data = b"".join(encode(sync) for sync in syncs())
    return [data[start : start + 700] for start in range(0, len(data), 700)]


def one_per_read() -> list[bytes]:
    """One sync per read (a master replicating a synchronous producer's puts)."""
    return [encode(sync) for sync in syncs()]


@pytest.mark.parametrize("reads", [cut_anywhere, one_per_read])
@pytest.mark.parametrize("queue_max", [10_000, 12])
def test_a_run_of_syncs_stores_and_answers_as_one_sync_at_a_time(
    tmp_path, monkeypatch, queue_max, reads
):
    monkeypatch.setattr(meta.sync.gregor, "SYNCS_WAITING_MAX", queue_max)
    batched = Slave(str(tmp_path / "batched"))
    alone = Slave(str(tmp_path / "alone"))
    one_by_one = run_alone(alone, reads())
    assert run(batched, reads()) == one_by_one
    answered, stored = one_by_one
    assert {code for _opaque, code, _body in answered} >= {200, 500}
    assert len(stored[0]) + len(stored[1]) == (38 if queue_max > 40 else 2 * queue_max)
    assert batched.broker.sync.waiting("test", 0) == batched.broker.sync.waiting("test", 1) == 0


def run_alone(slave: Slave, reads: list[bytes]) -> tuple[list, dict]:
    connect = slave.connect

    def connect_alone():
        protocol, transport = connect()
        protocol.put_runs = False
        return protocol, transport

    slave.connect = connect_alone  # type: ignore[method-assign]
    return run(slave, reads)


def test_next_sync_run_gives_the_fields_of_next_command():
    data = b"".join(encode(sync) for sync in syncs())
    general = Decoder()
    general.receive_data(data)
    expected = []
    while (frame := general.next_command()) is not NEED_DATA:
        expected.append(frame)
    fast = Decoder()
    fast.receive_data(data)
    taken = fast.next_sync_run(1000)
    assert len(taken) == len(expected)
    for fields, sync in zip(taken, expected, strict=True):
        topic, partition, flag, checksum, opaque, body, msg_id = fields
        rebuilt = Sync(
            topic.decode(), int(partition), bytes(body), flag, msg_id, int(opaque), checksum
        )
        assert rebuilt == sync


OTHER_SYNC_HEADERS = [
    b"sync test 00 1 0 5 -1 1\r\n",  # a partition not written canonically
    b"sync test 0 1 0 9223372036854775808 -1 1\r\n",  # an id beyond a long
    b"sync test 0 1 0 5 4294967296 1\r\n",  # a checksum beyond an int
    b"sync test 0 1 0 5 -1 1 extra\r\n",
]
"""Sync headers the run and single paths leave to ``next_command``."""


@pytest.mark.parametrize("header", OTHER_SYNC_HEADERS)
def test_next_sync_run_leaves_other_headers_to_next_command(header):
    decoder = Decoder()
    decoder.receive_data(header + b"x")
    assert decoder.next_sync_run(10) == []


def test_a_read_of_one_whole_sync_is_taken_without_the_decoder(tmp_path, monkeypatch):
    """Goal: the ``one_per_read`` comparison above runs the decoder-free single path.
    Method: the same comparison with the decoder's run path made to fail on the fast side
    (all but the sync whose checksum is beyond what a run takes: ``next_command`` decides
    that one). The compiled build calls its module's functions directly, so the patch, and
    this check, bite in the pure build (``tests/test_compiled.py`` runs both)."""
    beyond_a_run = 11
    reads = [data for index, data in enumerate(one_per_read()) if index != beyond_a_run]
    one_by_one = run_alone(Slave(str(tmp_path / "alone")), reads)

    def refused(*_arguments):
        raise AssertionError("a read of one whole sync went through the decoder's run")

    monkeypatch.setattr(meta.server.protocol, "handle_sync_run", refused)
    assert run(Slave(str(tmp_path / "fast")), reads) == one_by_one
    assert len(one_by_one[0]) == len(syncs()) - 1


def test_one_sync_gives_next_sync_runs_fields_for_one_whole_frame_only():
    for sync in syncs():
        data = encode(sync)
        decoder = Decoder()
        decoder.receive_data(data)
        expected = decoder.next_sync_run(1)
        fields = Decoder().one_sync(data)
        if not expected:  # a checksum beyond what the run takes: next_command decides
            assert fields is None
            continue
        assert fields is not None
        assert fields[:5] + (bytes(fields[5]), fields[6]) == expected[0][:5] + (
            bytes(expected[0][5]),
            expected[0][6],
        )
        assert Decoder().one_sync(data[:-1]) is None  # the body is not all there
        assert Decoder().one_sync(data + data) is None  # more than one frame
        holding = Decoder()
        holding.receive_data(b"sy")
        assert holding.one_sync(data) is None  # the decoder holds the start of a frame
        assert holding.buffered_bytes == 2


@pytest.mark.parametrize("header", OTHER_SYNC_HEADERS)
def test_one_sync_leaves_other_headers_to_next_command(header):
    assert Decoder().one_sync(header + b"x") is None


def test_syncs_refused_at_once_by_a_stopped_partition_are_not_counted_in_flight(tmp_path):
    """Goal: a sync its partition answers at once (stopped on a failed fsync) holds no place
    among the connection's requests in flight, or 16,384 refusals would stop the master's
    connection being read. Method: a failed fsync stops partition 0; then runs of syncs and
    single syncs to it: the count stays 0 and every one is answered 500."""
    slave = Slave(str(tmp_path / "slave"))
    protocol, transport = slave.connect()
    protocol.dataReceived(encode(Sync("test", 0, b"a", 0, 2**62, 1, -1)))
    slave.executor.run_all()
    slave.files.fsync_error = EIO
    protocol.dataReceived(encode(Sync("test", 0, b"b", 0, 2**62 + 1, 2, -1)))
    slave.executor.run_all()  # the fsync fails: partition 0 stops
    transport.clear()
    protocol.dataReceived(
        b"".join(encode(Sync("test", 0, b"c", 0, 2**62 + i, i, -1)) for i in range(3, 103))
    )
    assert protocol.inflight == 0
    protocol.dataReceived(encode(Sync("test", 0, b"d", 0, 2**62 + 103, 103, -1)))
    assert protocol.inflight == 0
    slave.executor.run_all()
    answered = sorted((reply.opaque, reply.code) for reply in replies(transport))
    assert answered == [(opaque, 500) for opaque in range(3, 104)]
