"""``read_range`` in this process (no Spark) against one real broker (no ZooKeeper).

It must return exactly the records that start in ``[start, end)`` (compared with the
per-record decoder over the broker's bytes), cut into batches that respect the row and
value-byte limits, and grow its fetch size past a message larger than ``fetchBytes``.
"""

from __future__ import annotations

import random

import pytest

from meta.protocol.commands import Data, Get, Put
from meta.protocol.message import checksum, decode_payload, encode_payload, iter_messages
from meta.spark import reading
from meta.spark.planning import RangePartition
from meta.spark.schema import ARROW_SCHEMA
from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

TOPIC = "spark-reading"
SIZES = [0, 10, 1000, 3000, 70_000, 5, 5, 5, 200_000, 1]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """Yields ``(broker, stored)``: ``stored`` is the partition's bytes as the broker has them."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("reading"),
        topics={TOPIC: {"numPartitions": 1}},
        system={"maxTransferSize": 1 << 20},
    )
    process.start()
    try:
        rng = random.Random(7)
        with process.connect() as connection:
            for opaque, size in enumerate(SIZES * 6, start=1):
                attribute = rng.choice([None, "k=v", ""])
                payload, flag = encode_payload(rng.randbytes(size), attribute)
                reply = connection.request(
                    Put(TOPIC, 0, payload, flag, opaque, checksum=checksum(payload))
                )
                assert getattr(reply, "code", None) == 200, reply
            stored = b""
            while True:
                reply = connection.request(Get(TOPIC, "g", 0, len(stored), 1 << 20, 99))
                if not isinstance(reply, Data):
                    break
                complete = sum(record.size for record in iter_messages(reply.data))
                assert complete > 0
                stored += reply.data[:complete]
        yield process, stored
    finally:
        process.stop()


def expected_rows(stored: bytes, start: int, end: int) -> list[tuple]:
    rows = []
    for record in iter_messages(stored):
        if start <= record.offset < end:
            attribute, value = decode_payload(record.flag, record.payload)
            rows.append((record.offset, record.msg_id, record.flag, attribute, value))
    return rows


def read(process, start: int, end: int, anchor: int, fetch_bytes: int = 4096) -> list:
    piece = RangePartition(TOPIC, 0, 0, "127.0.0.1", process.port, start, end, anchor)
    return list(reading.read_range(piece, "g", fetch_bytes, 10.0, True))


def rows_of(batches) -> list[tuple]:
    rows = []
    for batch in batches:
        assert batch.schema.equals(ARROW_SCHEMA)
        columns = batch.to_pydict()
        rows += zip(
            columns["offset"],
            columns["msg_id"],
            columns["flag"],
            columns["attribute"],
            columns["value"],
            strict=True,
        )
    return rows


def test_a_whole_partition_reads_back_every_record(broker):
    process, stored = broker
    batches = read(process, 0, len(stored), 0)
    assert rows_of(batches) == expected_rows(stored, 0, len(stored))


def test_a_piece_reads_the_records_starting_in_its_range(broker):
    process, stored = broker
    offsets = [record.offset for record in iter_messages(stored)]
    start, end = offsets[7] + 3, offsets[40]  # start inside a record: it belongs to before.
    batches = read(process, start, end, anchor=0)
    assert rows_of(batches) == expected_rows(stored, start, end)
    assert rows_of(batches)[0][0] == offsets[8]


def test_batches_hold_at_most_the_row_limit(broker, monkeypatch):
    process, stored = broker
    monkeypatch.setattr(reading, "BATCH_ROWS_MAX", 7)
    batches = read(process, 0, len(stored), 0, fetch_bytes=300_000)
    assert rows_of(batches) == expected_rows(stored, 0, len(stored))
    assert [batch.num_rows for batch in batches[:-1]] == [7] * (len(batches) - 1)
    assert 1 <= batches[-1].num_rows <= 7


def test_batches_are_cut_once_their_values_reach_the_byte_limit(broker, monkeypatch):
    process, stored = broker
    limit, fetch_bytes = 100_000, 300_000
    monkeypatch.setattr(reading, "BATCH_VALUE_BYTES_MAX", limit)
    batches = read(process, 0, len(stored), 0, fetch_bytes=fetch_bytes)
    assert rows_of(batches) == expected_rows(stored, 0, len(stored))
    sizes = [sum(map(len, batch.column("value").to_pylist())) for batch in batches]
    assert len(batches) > 1
    assert all(limit <= size < limit + fetch_bytes for size in sizes[:-1])
    assert sizes[-1] < limit + fetch_bytes


def test_a_message_larger_than_fetch_bytes_grows_the_fetch(broker):
    process, stored = broker
    batches = read(process, 0, len(stored), 0, fetch_bytes=64)
    assert rows_of(batches) == expected_rows(stored, 0, len(stored))


def test_replies_received_in_place_equal_copied_ones_and_reuse_a_released_block(broker):
    """Goal: ``BrokerConnection(value_in_place=True)`` gives the same bytes as the copying
    receive, and reuses the block of a reply nobody references any more.

    Method: the same gets over both kinds of connection, from offset 0 (1 MiB replies).
    """
    from meta.client.net.connection import BrokerConnection

    process, stored = broker
    host, port = "127.0.0.1", process.port
    with (
        BrokerConnection(host, port) as copying,
        BrokerConnection(host, port, value_in_place=True) as in_place,
    ):
        first = in_place.request(Get(TOPIC, "g", 0, 0, 1 << 20, 1))
        assert isinstance(first, Data) and isinstance(first.data, bytearray)
        assert bytes(first.data) == copying.request(Get(TOPIC, "g", 0, 0, 1 << 20, 2)).data
        held = memoryview(first.data)  # A view keeps the block from being reused.
        second = in_place.request(Get(TOPIC, "g", 0, 0, 1 << 20, 3))
        assert second.data is not first.data and bytes(held) == bytes(second.data)
        kept = {id(first.data), id(second.data)}  # The decoder keeps both blocks.
        held.release()
        del first, second, held
        third = in_place.request(Get(TOPIC, "g", 0, 0, 1 << 20, 4))
        assert bytes(third.data) == stored[: len(third.data)]
        assert id(third.data) in kept
