"""Executor-side read of one planned piece (``RangePartition``) into Arrow record batches.

``read_range`` connects to the partition's broker with the blocking client (no reactor, no
ZooKeeper; replies received in place), sends ``get`` from the range's ``anchor`` and decodes
each reply in bulk (``meta.spark.decoding.decode_message_set``: checksums verified, columns
built per reply, not per record). Records starting before ``start`` are skipped (see
``meta.spark.planning`` on anchors), records starting in ``[start, end)`` become rows, and
the first record starting at or after ``end`` ends the read.

A reply with no complete record (a message larger than the size asked) doubles the size, up
to ``FETCH_BYTES_MAX``. A 301 (the offset fell below the partition's first segment, deleted
by retention) fails the task when ``failOnDataLoss`` is true, else skips ahead. A 404 before
``end`` means the broker no longer has the planned data and fails the task.

Batch size: PySpark hands each yielded batch to the JVM as is, so a batch holds up to
``BATCH_ROWS_MAX`` rows, and is cut earlier once its values reach ``BATCH_VALUE_BYTES_MAX``
(large messages), keeping per-batch overhead small and memory bounded.

Invariants: rows leave in offset order; one Arrow batch holds at most ``BATCH_ROWS_MAX``
rows and at most ``BATCH_VALUE_BYTES_MAX`` plus one reply of value bytes; memory is bounded
by the batch being built plus one reply. Runs in a Spark Python worker, one call per task;
not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from meta.client.net.connection import BrokerConnection
from meta.errors import ClientError
from meta.protocol.commands import Data, Get, Result
from meta.spark.decoding import ColumnBuilder, MessageSet, decode_message_set
from meta.spark.options import FETCH_BYTES_MAX, ReadOptions
from meta.spark.planning import RangePartition

if TYPE_CHECKING:
    from pyspark.sql.datasource import InputPartition

# Measured (meta.bench.spark, 1 KB messages, CPU per message of the Spark JVM and Python
# workers): 8192 rows beat 2048 and 32768 for both count() and a Parquet write.
BATCH_ROWS_MAX = 8192
BATCH_VALUE_BYTES_MAX = 8 << 20


def read_partition(options: ReadOptions, partition: InputPartition) -> Iterator:
    """Read one planned piece on an executor (batch and streaming share it)."""
    if not isinstance(partition, RangePartition):
        return iter(())  # Spark's single empty partition when the plan is empty.
    return read_range(
        partition,
        options.request_group,
        options.fetch_bytes,
        options.broker_timeout_s,
        options.fail_on_data_loss,
    )


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
    builder = ColumnBuilder(piece.topic, piece.broker_id, piece.partition_id)
    # In place: each reply is read straight into a reused block (no copy, no fresh pages).
    with BrokerConnection(piece.host, piece.port, timeout_s, value_in_place=True) as broker:
        for decoded in _message_sets(broker, piece, group, fetch_bytes, fail_on_data_loss):
            first = 0
            while first < len(decoded):
                last = min(len(decoded), first + BATCH_ROWS_MAX - builder.rows)
                builder.add(decoded.slice(first, last))
                first = last
                if builder.rows >= BATCH_ROWS_MAX or builder.value_bytes >= BATCH_VALUE_BYTES_MAX:
                    yield builder.take_batch()
    if builder.rows:
        yield builder.take_batch()


def _message_sets(
    broker: BrokerConnection,
    piece: RangePartition,
    group: str,
    fetch_bytes: int,
    fail_on_data_loss: bool,
) -> Iterator[MessageSet]:
    """The records of the piece, one decoded reply at a time, in offset order."""
    offset, size = piece.anchor, fetch_bytes
    while offset < piece.end:
        command = Get(piece.topic, group, piece.partition_id, offset, size, broker.next_opaque())
        reply = broker.request(command)
        if isinstance(reply, Result):
            offset = _moved(piece, offset, reply, fail_on_data_loss)
            continue
        assert isinstance(reply, Data)
        decoded = decode_message_set(reply.data, offset, piece.end)
        if not len(decoded):
            if size >= FETCH_BYTES_MAX or not reply.data:
                raise ClientError(
                    f"{_where(piece, offset)}: no whole message in {size} bytes "
                    f"(a message larger than fetchBytes up to {FETCH_BYTES_MAX})"
                )
            size = min(size * 2, FETCH_BYTES_MAX)
            continue
        first, last = np.searchsorted(decoded.offsets, (piece.start, piece.end)).tolist()
        if last > first:
            yield decoded.slice(first, last)
        if last < len(decoded):
            return  # A record starting at or after the end: the read is complete.
        offset, size = offset + decoded.used, fetch_bytes


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
