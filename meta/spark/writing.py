"""Executor-side write of DataFrame rows to a topic through a producer.

Columns: ``value`` (binary or string, required), ``attribute`` (string, optional), ``key``
(string or binary, optional) and ``topic`` (string, optional; the ``topic`` option wins).
With a ``key`` column, a row with a key goes to the partition ``HashPartitionSelector``
picks (same key, same partition, so per-key order holds); a row with a null key, and every
row without a key column, goes round robin.

Each task opens its own ``MetaMessageSessionFactory`` (the producer finds the masters in
ZooKeeper), keeps at most ``maxInFlight`` puts in flight, checks every reply, and shuts the
factory down. A failed put fails the task with the broker's text. Delivery is at least
once: Spark retries a failed task, and a put already stored is not taken back.

Not thread-safe: one call per task.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from meta.client.cluster import Partition
from meta.client.factory import MetaClientConfig, MetaMessageSessionFactory
from meta.client.message import Message, SendResult
from meta.client.produce.selectors import (
    HashPartitionSelector,
    PartitionSelector,
    RoundRobinPartitionSelector,
)
from meta.errors import ClientError
from meta.spark.options import OptionError, WriteOptions

COLUMN_TYPES = {
    "value": (BinaryType, StringType),
    "attribute": (StringType,),
    "key": (StringType, BinaryType),
    "topic": (StringType,),
}


@dataclass(frozen=True)
class WriteResult(WriterCommitMessage):
    """What one task wrote."""

    messages: int


def check_write_schema(schema: StructType, options: WriteOptions) -> None:
    """Refuse a DataFrame the writer cannot send, before any task starts.

    Raises:
        OptionError: no ``value`` column, an unknown column, a column of the wrong type, or
            neither a ``topic`` option nor a ``topic`` column.
    """
    names = schema.fieldNames()
    if "value" not in names:
        raise OptionError(f"the DataFrame needs a value column (binary or string), has {names}")
    for field in schema.fields:
        allowed = COLUMN_TYPES.get(field.name)
        if allowed is None:
            raise OptionError(
                f"unknown column {field.name!r}: the metaq writer takes value, attribute, key "
                "and topic (select them first)"
            )
        if not isinstance(field.dataType, allowed):
            kinds = " or ".join(kind.typeName() for kind in allowed)
            raise OptionError(f"column {field.name} must be {kinds}, got {field.dataType}")
    if options.topic is None and "topic" not in names:
        raise OptionError("the metaq writer needs a topic option or a topic column")


class _KeySelector:
    """Hash by key when the message has one, else round robin (``keyed_selector``)."""

    def __init__(self) -> None:
        self._hash = HashPartitionSelector()
        self._round_robin = RoundRobinPartitionSelector()

    def get_partition(
        self, topic: str, partitions: Sequence[Partition], message: Message
    ) -> Partition:
        if message.key is None:
            return self._round_robin.get_partition(topic, partitions, message)
        return self._hash.get_partition(topic, partitions, message)


def keyed_selector() -> PartitionSelector:
    """The partition selector of rows with a ``key`` column: hash by key, else round robin."""
    return _KeySelector()


def client_config(options: WriteOptions) -> MetaClientConfig:
    """The client configuration of a write task (ZooKeeper from the options)."""
    zk = options.zk
    return MetaClientConfig(
        zk_connect=zk.connect,
        zk_root=zk.root,
        zk_session_timeout_ms=zk.session_timeout_ms,
        zk_connection_timeout_ms=zk.connection_timeout_ms,
    )


def write_rows(rows: Iterable, options: WriteOptions, keyed: bool) -> WriteResult:
    """Send every row; return how many were stored.

    Raises:
        ClientError: a put failed (the text is the broker's), timed out, or ZooKeeper or the
            broker could not be reached.
    """
    config = client_config(options)
    count = 0
    in_flight: deque[tuple[Message, Future[SendResult]]] = deque()
    with MetaMessageSessionFactory(config) as factory:
        producer = factory.create_producer(_KeySelector() if keyed else None)
        published: set[str] = set()
        for row in rows:
            message = row_message(row, options.topic)
            if message.topic not in published:
                producer.publish(message.topic)  # Loads the topic's masters from ZooKeeper.
                published.add(message.topic)
            in_flight.append(
                (message, producer.send_message_async(message, options.send_timeout_s))
            )
            if len(in_flight) >= options.in_flight_max:
                count += _check(*in_flight.popleft(), options.send_timeout_s)
        while in_flight:
            count += _check(*in_flight.popleft(), options.send_timeout_s)
    return WriteResult(count)


def row_message(row, topic_option: str | None) -> Message:
    """The message of one row (``topic_option`` wins over the row's ``topic``).

    Raises:
        ClientError: a null value, or no topic.
    """
    fields = row.asDict() if hasattr(row, "asDict") else dict(row)
    value = fields["value"]
    if value is None:
        raise ClientError("the metaq writer cannot send a null value")
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    key = fields.get("key")
    if isinstance(key, bytearray):
        key = bytes(key)
    topic = topic_option or fields.get("topic")
    if not topic:
        raise ClientError("a row has a null topic and the topic option is not set")
    return Message(topic, data, fields.get("attribute"), key)


def _check(message: Message, future: Future[SendResult], timeout_s: float) -> int:
    result = future.result(timeout_s * 2)  # The connection expires it after timeout_s.
    if not result.success:
        raise ClientError(f"put to topic {message.topic} failed: {result.error_message}")
    return 1
