"""Executor-side read of one ``RangePartition`` into Arrow record batches.

``read_range`` connects to the partition's broker with the blocking client (no reactor, no
ZooKeeper), sends ``get`` from the range's ``anchor`` and walks the records of each reply
(``meta.protocol.message.iter_messages``, checksums verified). Records starting before
``start`` are skipped (see ``meta.spark.planning`` on anchors), records starting in
``[start, end)`` become rows, and the first record starting at or after ``end`` ends the read.

A reply with no complete record (a message larger than the size asked) doubles the size, up
to ``FETCH_BYTES_MAX``. A 301 (the offset fell below the partition's first segment, deleted
by retention) fails the task when ``failOnDataLoss`` is true, else skips ahead. A 404 before
``end`` means the broker no longer has the planned data and fails the task.

Invariants: rows leave in offset order; one Arrow batch holds at most ``BATCH_ROWS_MAX``
rows; memory is bounded by one reply plus one batch. Runs in a Spark Python worker, one call
per task; not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from meta.client.connection import BrokerConnection
from meta.errors import ClientError
from meta.message_id import id_time_ms
from meta.protocol.commands import Data, Get, Result
from meta.protocol.message import Record, decode_payload, iter_messages
from meta.spark.options import FETCH_BYTES_MAX
from meta.spark.planning import RangePartition
from meta.spark.schema import ARROW_SCHEMA

BATCH_ROWS_MAX = 8192


class _Columns:
    """Column buffers of the batch being built."""

    def __init__(self, piece: RangePartition) -> None:
        self.piece = piece
        self.partition_text = f"{piece.broker_id}-{piece.partition_id}"
        self.reset()

    def reset(self) -> None:
        self.offsets: list[int] = []
        self.msg_ids: list[int] = []
        self.times_us: list[int] = []
        self.flags: list[int] = []
        self.attributes: list[str | None] = []
        self.values: list[bytes] = []

    def add(self, record: Record) -> None:
        attribute, value = decode_payload(record.flag, record.payload)
        self.offsets.append(record.offset)
        self.msg_ids.append(record.msg_id)
        self.times_us.append(id_time_ms(record.msg_id) * 1000)
        self.flags.append(record.flag)
        self.attributes.append(attribute)
        self.values.append(value)

    def take_batch(self) -> pa.RecordBatch:
        count = len(self.offsets)
        piece = self.piece
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([piece.topic] * count, pa.string()),
                pa.array([self.partition_text] * count, pa.string()),
                pa.array([piece.broker_id] * count, pa.int32()),
                pa.array([piece.partition_id] * count, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.msg_ids, pa.int64()),
                pa.array(self.times_us, pa.timestamp("us", tz="UTC")),
                pa.array(self.flags, pa.int32()),
                pa.array(self.attributes, pa.string()),
                pa.array(self.values, pa.binary()),
            ],
            schema=ARROW_SCHEMA,
        )
        self.reset()
        return batch


def read_range(
    piece: RangePartition,
    group: str,
    fetch_bytes: int,
    timeout_s: float,
    fail_on_data_loss: bool,
) -> Iterator[pa.RecordBatch]:
    """Yield the messages starting in ``[piece.start, piece.end)`` as Arrow batches.

    Raises:
        ClientError: the broker is unreachable, answers an error, lost data (see above) or
            holds a message larger than ``FETCH_BYTES_MAX``.
        InvalidRecordError: a record's checksum is wrong (for example, a starting offset
            that is not a message start).
    """
    columns = _Columns(piece)
    with BrokerConnection(piece.host, piece.port, timeout_s) as broker:
        for record in _records(broker, piece, group, fetch_bytes, fail_on_data_loss):
            columns.add(record)
            if len(columns.offsets) >= BATCH_ROWS_MAX:
                yield columns.take_batch()
    if columns.offsets:
        yield columns.take_batch()


def _records(
    broker: BrokerConnection,
    piece: RangePartition,
    group: str,
    fetch_bytes: int,
    fail_on_data_loss: bool,
) -> Iterator[Record]:
    """The records of the piece, in offset order (the loop of the module docstring)."""
    offset, size = piece.anchor, fetch_bytes
    while offset < piece.end:
        command = Get(piece.topic, group, piece.partition_id, offset, size, broker.next_opaque())
        reply = broker.request(command)
        if isinstance(reply, Result):
            offset = _moved(piece, offset, reply, fail_on_data_loss)
            continue
        assert isinstance(reply, Data)
        consumed = 0
        for record in iter_messages(reply.data, offset):
            if record.offset >= piece.end:
                return
            if record.offset >= piece.start:
                yield record
            consumed = record.offset + record.size - offset
        if consumed == 0:
            if size >= FETCH_BYTES_MAX or not reply.data:
                raise ClientError(
                    f"{_where(piece, offset)}: no whole message in {size} bytes "
                    f"(a message larger than fetchBytes up to {FETCH_BYTES_MAX})"
                )
            size = min(size * 2, FETCH_BYTES_MAX)
            continue
        offset, size = offset + consumed, fetch_bytes


def _moved(piece: RangePartition, offset: int, reply: Result, fail_on_data_loss: bool) -> int:
    """The offset to continue from after a 301; raise on anything else."""
    text = reply.body.decode("utf-8", "replace")
    if reply.code == 301 and int(text) > offset:
        moved = int(text)
        if fail_on_data_loss and moved > piece.start:
            raise ClientError(
                f"{_where(piece, offset)}: data up to offset {moved} is gone (deleted by "
                "retention); set failOnDataLoss=false to skip it"
            )
        return moved
    if reply.code == 404:
        raise ClientError(
            f"{_where(piece, offset)}: the broker has no message there although the read was "
            f"planned up to {piece.end} ({text})"
        )
    raise ClientError(f"{_where(piece, offset)}: broker answered {reply.code} {text}")


def _where(piece: RangePartition, offset: int) -> str:
    return (
        f"reading {piece.topic}/{piece.broker_id}-{piece.partition_id} at offset {offset} "
        f"from {piece.host}:{piece.port}"
    )
