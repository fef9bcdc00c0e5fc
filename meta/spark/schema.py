"""The row schema of the ``metaq`` source, as Spark and as Arrow types.

One row per message: ``topic``, ``partition`` (``B-P``), ``broker_id``, ``partition_id``,
``offset`` (the byte offset of the message start), ``msg_id``, ``timestamp`` (the
wall-clock milliseconds in the id, docs/compatibility.md; ids from Java brokers carry a monotonic
clock instead, so their timestamps are not calendar times), ``flag``, ``attribute`` (null
when the message has none) and ``value``. Only ``attribute`` is nullable.

``ARROW_SCHEMA`` must equal what PySpark derives from ``SPARK_SCHEMA`` (UTC timestamps),
because PySpark refuses Arrow batches whose schema differs; a test pins this.
Thread-safe: immutable values.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SPARK_SCHEMA = StructType(
    [
        StructField("topic", StringType(), nullable=False),
        StructField("partition", StringType(), nullable=False),
        StructField("broker_id", IntegerType(), nullable=False),
        StructField("partition_id", IntegerType(), nullable=False),
        StructField("offset", LongType(), nullable=False),
        StructField("msg_id", LongType(), nullable=False),
        StructField("timestamp", TimestampType(), nullable=False),
        StructField("flag", IntegerType(), nullable=False),
        StructField("attribute", StringType(), nullable=True),
        StructField("value", BinaryType(), nullable=False),
    ]
)

ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.string(), nullable=False),
        pa.field("broker_id", pa.int32(), nullable=False),
        pa.field("partition_id", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("msg_id", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("flag", pa.int32(), nullable=False),
        pa.field("attribute", pa.string(), nullable=True),
        pa.field("value", pa.binary(), nullable=False),
    ]
)
assert ARROW_SCHEMA.names == SPARK_SCHEMA.fieldNames()
