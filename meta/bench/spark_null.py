"""The "null source": the ceiling of PySpark's Python Data Source API on this machine.

``NullDataSource`` (format ``metaq_null``) is a Python data source with the ``metaq``
source's schema that reads nothing: each of its ``partitions`` yields ``rows`` rows as
prebuilt Arrow batches (``meta.spark.decoding.ColumnBuilder`` batches of
``meta.spark.reading.BATCH_ROWS_MAX`` rows with ``messageBytes`` values, built once per
Python worker and yielded again and again). No broker, no decoding, no checksum: what Spark
does with the batches is all that is measured, so ``meta.bench.spark`` reports every Spark
rate of the real source as a fraction of this one's, measured in the same run.

Options (strings, as Spark passes them): ``rows`` (total rows), ``partitions`` (how many
Spark partitions share them, as the real plan's pieces do), ``messageBytes``.
Thread-affinity: as any Python data source, created and called in Spark's Python workers.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from meta.spark.schema import SPARK_SCHEMA

NULL_SOURCE_NAME = "metaq_null"


@dataclass(frozen=True)
class NullPartition(InputPartition):
    """``rows`` rows of ``message_bytes`` values, numbered from ``first``."""

    first: int
    rows: int
    message_bytes: int


class NullDataSource(DataSource):
    """``spark.read.format("metaq_null")``: prebuilt batches, exactly the ``metaq`` schema."""

    @classmethod
    def name(cls) -> str:
        return NULL_SOURCE_NAME

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return NullReader(
            int(self.options["rows"]),
            int(self.options.get("partitions", "1")),
            int(self.options.get("messageBytes", "1024")),
        )


class NullReader(DataSourceReader):
    """Splits ``rows`` evenly over ``partitions``; ``read`` yields prebuilt batches."""

    def __init__(self, rows: int, partitions: int, message_bytes: int) -> None:
        self.rows = rows
        self.partition_count = max(1, partitions)
        self.message_bytes = message_bytes

    def partitions(self) -> list[InputPartition]:
        share, extra = divmod(self.rows, self.partition_count)
        pieces, first = [], 0
        for number in range(self.partition_count):
            rows = share + (1 if number < extra else 0)
            pieces.append(NullPartition(first, rows, self.message_bytes))
            first += rows
        return pieces

    def read(self, partition: InputPartition) -> Iterator:
        assert isinstance(partition, NullPartition)
        return null_batches(partition.rows, partition.message_bytes)


def null_batches(rows: int, message_bytes: int) -> Iterator:
    """``rows`` rows as slices of one prebuilt batch."""
    from meta.spark.reading import BATCH_ROWS_MAX

    batch = prebuilt_batch(message_bytes)
    while rows > 0:
        size = min(rows, BATCH_ROWS_MAX)
        yield batch if size == batch.num_rows else batch.slice(0, size)
        rows -= size


@functools.cache
def prebuilt_batch(message_bytes: int):
    """One full batch as the real reader builds it (``ColumnBuilder``), built once."""
    import numpy as np

    from meta.protocol.message import HEADER_SIZE
    from meta.spark.decoding import ColumnBuilder, MessageSet
    from meta.spark.reading import BATCH_ROWS_MAX

    rows = BATCH_ROWS_MAX
    stride = HEADER_SIZE + message_bytes
    record = bytes(HEADER_SIZE) + (bytes(range(256)) * (message_bytes // 256 + 1))[:message_bytes]
    decoded = MessageSet(
        np.arange(rows, dtype=np.int64) * stride,
        np.arange(rows, dtype=np.int64) << 20,
        np.zeros(rows, dtype=np.int32),
        None,
        np.arange(rows, dtype=np.int64) * stride + HEADER_SIZE,
        np.full(rows, message_bytes, dtype=np.int64),
        memoryview(record * rows),
        stride,
        rows * stride,
    )
    builder = ColumnBuilder("bench-spark", 1, 0)
    builder.add(decoded)
    return builder.take_batch()
