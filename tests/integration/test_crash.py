"""Durability against real process crashes (kill -9) and damaged segment tails."""

from __future__ import annotations

import threading
import time

import pytest

from meta.client.net.connection import BrokerConnection
from meta.errors import MetaError
from meta.protocol.commands import Data, Get, Put
from meta.protocol.message import checksum, iter_messages, pack_message
from tests.integration.broker_process import BrokerProcess

LOAD_SECONDS_MAX = 60


def read_partition(broker: BrokerProcess, topic: str, partition: int = 0) -> dict[int, bytes]:
    """Every record of a partition, by offset, following get replies until 404."""
    records: dict[int, bytes] = {}
    offset = 0
    with broker.connect() as connection:
        for _ in range(100_000):
            reply = connection.request(Get(topic, "check", partition, offset, 1 << 20, 1))
            if not isinstance(reply, Data):
                assert reply.code == 404, reply
                return records
            for record in iter_messages(reply.data, base_offset=offset):
                records[record.offset] = record.payload
                offset = record.offset + record.size
    raise AssertionError("partition did not end")


def put_until_stopped(port: int, worker: int, acked: list, stop: threading.Event) -> None:
    deadline = time.monotonic() + LOAD_SECONDS_MAX
    try:
        with BrokerConnection("127.0.0.1", port, timeout_s=10) as connection:
            for sequence in range(1_000_000):
                if stop.is_set() or time.monotonic() > deadline:
                    return
                data = b"worker-%d-message-%d" % (worker, sequence)
                reply = connection.request(Put("test", 0, data, 0, sequence, checksum(data)))
                if reply.code == 200:
                    acked.append((int(reply.body.split(b" ")[2]), data))
    except (OSError, MetaError):
        return  # the broker was killed under us


def test_every_acknowledged_message_survives_kill_9_during_a_put_load(tmp_path):
    """Goal: a 200 means the message survives a crash (unflushThreshold=1).
    Method: four producers put synchronously and record every acknowledged (offset, payload);
    the broker is killed with SIGKILL mid-load, restarted, and the partition read back."""
    broker = BrokerProcess(tmp_path, system={"unflushThreshold": 1})
    broker.start()
    acked: list[tuple[int, bytes]] = []
    stop = threading.Event()
    workers = [
        threading.Thread(target=put_until_stopped, args=(broker.port, n, acked, stop))
        for n in range(4)
    ]
    try:
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + LOAD_SECONDS_MAX
        while len(acked) < 2000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(acked) >= 2000
        broker.kill()
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)
    broker.start()
    try:
        stored = read_partition(broker, "test")
    finally:
        broker.stop()
    missing = [(offset, data) for offset, data in acked if stored.get(offset) != data]
    assert missing == []


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda record: record[: len(record) // 2], id="torn-record"),
        pytest.param(lambda record: b"\xde\xad\xbe\xef" * 13, id="garbage"),
        pytest.param(lambda record: record[:-1] + bytes([record[-1] ^ 1]), id="bad-checksum"),
    ],
)
def test_a_damaged_tail_is_truncated_at_start_up_and_puts_continue(tmp_path, damage):
    """Goal: recovery cuts a torn or corrupt tail. Method: write 50 messages, stop the broker,
    damage the end of the segment, restart; the 50 records are served, the cut is logged, and
    the next put lands right after them."""
    broker = BrokerProcess(tmp_path)
    broker.start()
    with broker.connect() as connection:
        for index in range(50):
            data = b"record-%02d" % index
            assert connection.request(Put("test", 0, data, 0, index, checksum(data))).code == 200
    broker.stop()
    segment = tmp_path / "data" / "test-0" / "00000000000000000000.meta"
    valid_size = segment.stat().st_size
    with segment.open("ab") as file:
        file.write(damage(pack_message(999, 0, b"the record being written at the crash")))
    broker.start()
    try:
        stored = read_partition(broker, "test")
        assert sorted(stored.values()) == [b"record-%02d" % index for index in range(50)]
        assert "truncat" in broker.log().lower()
        with broker.connect() as connection:
            reply = connection.request(Put("test", 0, b"next", 0, 1, checksum(b"next")))
        assert int(reply.body.split(b" ")[2]) == valid_size
    finally:
        broker.stop()
    assert segment.stat().st_size == valid_size + 20 + len(b"next")
