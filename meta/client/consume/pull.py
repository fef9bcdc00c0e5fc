"""Pull-style reads of one partition and the topic browser.

``get`` is Java's ``MessageConsumer.get``: it resolves the partition's broker through the
factory's **producer** view (masters of ``topics-pub`` only, the topic is published once per
factory and stays published, as Java's consumer publishes it through its producer), sends one
``get`` and returns a ``MessageIterator`` over the reply, or None on a 404, 403 or 301 (the
Java quirk: the offset of a 301 is lost). ``fetch`` is the Pythonic variant: it decodes the
whole reply and reports a 301's offset in ``FetchResult.moved_to``. ``offset_of`` sends the
``offset`` command (the start of the segment holding an offset, clamped to the partition).
``TopicBrowser`` reads every message of every producer partition from offset 0 up to the end
each partition had when the browser reached it, so it always terminates.

These are module functions taking a ``MetaMessageSessionFactory``; they use the factory's
view, connection pool and direct-mode broker.

Thread-safety: every function may be called from any thread; a ``MessageIterator`` and a
``TopicBrowser`` iteration belong to one thread.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from meta.client.cluster import Partition, validate_topic
from meta.client.message import Message
from meta.errors import ClientError, NoBrokerError
from meta.protocol.commands import LONG_MAX, Data, Get, Offset, Result
from meta.protocol.message import iter_messages

if TYPE_CHECKING:
    from meta.client.factory import MetaMessageSessionFactory
    from meta.client.net.pipeline import PipelinedConnection

BROWSER_GROUP = "Just_for_Browser"
"""The group Java's ``TopicBrowser`` (and these pull calls by default) name in requests."""
MAX_SIZE_LIMIT = 64 << 20
"""The browser doubles ``max_size`` for a message larger than it, up to this."""

_published: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
_published_lock = threading.Lock()


class MessageIterator:
    """The complete records of one get reply (Java's ``MessageIterator``).

    Iterating yields ``Message`` objects; a record whose checksum is wrong raises
    ``InvalidRecordError``. A trailing partial record is not yielded.

    Args:
        topic: the topic read.
        partition: the partition read.
        base_offset: the offset the get asked for.
        data: the reply body.
    """

    def __init__(self, topic: str, partition: Partition, base_offset: int, data: bytes) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = base_offset
        self.data = data
        self._records = iter_messages(data, base_offset)
        self._next: Message | None = None
        self._next_end = 0
        self._offset = 0

    @property
    def offset(self) -> int:
        """Bytes consumed from the reply so far (the caller adds it to its offset)."""
        return self._offset

    def has_next(self) -> bool:
        """True if a complete record remains (raises ``InvalidRecordError`` if it is bad)."""
        if self._next is None:
            record = next(self._records, None)
            if record is None:
                return False
            self._next = Message.from_record(self.topic, record, self.partition)
            self._next_end = record.offset + record.size - self.base_offset
        return True

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        if not self.has_next():
            raise StopIteration
        message, self._next = self._next, None
        self._offset = self._next_end
        return message


@dataclass(frozen=True)
class FetchResult:
    """The outcome of ``fetch``.

    Attributes:
        messages: the complete messages of the reply, in offset order.
        next_offset: where the next fetch reads: past the messages, the 301 offset, or the
            asked offset when nothing was read.
        moved_to: the broker's offset from a 301 (offset out of range), else None.
        truncated: the reply held bytes but no complete record (a message larger than
            ``max_size``).
    """

    messages: list[Message] = field(default_factory=list)
    next_offset: int = 0
    moved_to: int | None = None
    truncated: bool = False


def get(
    factory: MetaMessageSessionFactory,
    topic: str,
    partition: Partition,
    offset: int,
    max_size: int = 1 << 20,
    timeout_s: float = 10.0,
    group: str = BROWSER_GROUP,
) -> MessageIterator | None:
    """Read one partition from ``offset`` (Java's ``MessageConsumer.get``).

    Args:
        factory: the session factory (its producer view locates the master).
        topic: the topic.
        partition: the partition (its broker id picks the master).
        offset: the byte offset to read from.
        max_size: the most bytes asked for.
        timeout_s: bound on the request.
        group: the group named in the request (broker statistics only).

    Returns:
        The messages, or None on a 404, 403 or 301 (as in Java, the 301 offset is dropped).

    Raises:
        NoBrokerError: no master publishes that partition's broker.
        ClientError: another reply code, a connection failure or a timeout.
    """
    reply = _get_reply(factory, topic, partition, offset, max_size, timeout_s, group)
    if isinstance(reply, Data):
        return MessageIterator(topic, partition, offset, reply.data)
    return None


def fetch(
    factory: MetaMessageSessionFactory,
    topic: str,
    partition: Partition,
    offset: int,
    max_size: int = 1 << 20,
    timeout_s: float = 10.0,
    group: str = BROWSER_GROUP,
) -> FetchResult:
    """Like ``get``, but decode the reply and report a 301's offset.

    Returns:
        A ``FetchResult``; a 404 or 403 gives no messages and ``next_offset == offset``.

    Raises:
        InvalidRecordError: a record of the reply is corrupt.
        NoBrokerError: no master publishes that partition's broker.
        ClientError: another reply code, a connection failure or a timeout.
    """
    reply = _get_reply(factory, topic, partition, offset, max_size, timeout_s, group)
    if isinstance(reply, Result):
        if reply.code == 301:
            moved = int(reply.body)
            return FetchResult([], moved, moved)
        return FetchResult([], offset)
    iterator = MessageIterator(topic, partition, offset, reply.data)
    messages = list(iterator)
    truncated = not messages and len(reply.data) > 0
    return FetchResult(messages, offset + iterator.offset, None, truncated)


def offset_of(
    factory: MetaMessageSessionFactory,
    topic: str,
    partition: Partition,
    offset: int,
    timeout_s: float = 10.0,
    group: str = BROWSER_GROUP,
) -> int:
    """Send the ``offset`` command: the start of the segment holding ``offset``, clamped.

    ``offset_of(..., 0)`` is the partition's first offset, ``offset_of(..., LONG_MAX)`` its end.

    Raises:
        NoBrokerError: no master publishes that partition's broker.
        ClientError: the broker did not answer 200, or the request failed.
    """
    connection = _connection(factory, topic, partition)
    command = Offset(topic, group, partition.partition, offset, 0)
    reply = connection.request(command, timeout_s).result()
    if not isinstance(reply, Result) or reply.code != 200:
        raise ClientError(f"offset request for {topic}/{partition} failed: {_describe(reply)}")
    return int(reply.body)


def _get_reply(
    factory: MetaMessageSessionFactory,
    topic: str,
    partition: Partition,
    offset: int,
    max_size: int,
    timeout_s: float,
    group: str,
) -> Data | Result:
    """Send one get; return the Data or a 301/403/404 Result; raise on anything else."""
    if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size <= 0:
        raise ClientError(f"max_size must be a positive int, got {max_size!r}")
    if offset < 0:
        raise ClientError(f"offset must not be negative, got {offset}")
    connection = _connection(factory, topic, partition)
    command = Get(topic, group, partition.partition, offset, max_size, 0)
    reply = connection.request(command, timeout_s).result()
    if isinstance(reply, Data) or (isinstance(reply, Result) and reply.code in (301, 403, 404)):
        return reply
    raise ClientError(f"get of {topic}/{partition}@{offset} failed: {_describe(reply)}")


def _describe(reply: Any) -> str:
    if isinstance(reply, Result):
        return f"{reply.code} {reply.body.decode('utf-8', 'replace')}"
    return type(reply).__name__


def _connection(
    factory: MetaMessageSessionFactory, topic: str, partition: Partition
) -> PipelinedConnection:
    """The pooled connection to the master of ``partition``'s broker (or the direct broker)."""
    validate_topic(topic)
    direct = factory.direct_broker
    if direct is not None:
        return factory.pool.get(direct)
    view = factory.cluster_view
    assert view is not None, "a factory without a direct broker has a ZooKeeper view"
    with _published_lock:
        topics = _published.setdefault(factory, set())
        if topic not in topics:
            view.publish(topic)
            topics.add(topic)
    address = view.snapshot(topic).brokers.get(partition.broker_id)
    if address is None:
        raise NoBrokerError(f"no master publishes topic {topic} for broker {partition.broker_id}")
    return factory.pool.get(address)


class TopicBrowser:
    """Iterate every message of ``topic`` (Java's ``TopicBrowser``).

    Each iteration reads the producer partitions (numeric order) once, then each partition
    from offset 0 up to the end it has when reached, following 301s. A message larger than
    ``max_size`` doubles the size asked for (up to ``MAX_SIZE_LIMIT``).

    Args:
        factory: the session factory.
        topic: the topic.
        max_size: bytes asked for per get.
        timeout_s: bound on each request.
    """

    def __init__(
        self,
        factory: MetaMessageSessionFactory,
        topic: str,
        max_size: int = 1 << 20,
        timeout_s: float = 5.0,
    ) -> None:
        validate_topic(topic)
        self.factory = factory
        self.topic = topic
        self.max_size = max_size
        self.timeout_s = timeout_s

    def partitions(self) -> list[Partition]:
        """The topic's producer partitions, in numeric order."""
        return self.factory.get_partitions_for_topic(self.topic)

    def __iter__(self) -> Iterator[Message]:
        for partition in self.partitions():
            yield from self.browse(partition)

    def browse(self, partition: Partition) -> Iterator[Message]:
        """Yield the messages of one partition from offset 0 to its current end."""
        end = offset_of(self.factory, self.topic, partition, LONG_MAX, self.timeout_s)
        offset, max_size = 0, self.max_size
        while offset < end:
            result = fetch(self.factory, self.topic, partition, offset, max_size, self.timeout_s)
            if result.moved_to is not None:
                if result.moved_to <= offset:
                    return  # Never go backwards: the loop must end.
                offset = result.moved_to
                continue
            if result.truncated and max_size < MAX_SIZE_LIMIT:
                max_size = min(max_size * 2, MAX_SIZE_LIMIT)
                continue
            if not result.messages:
                return  # 404/403 or a message too large even for MAX_SIZE_LIMIT.
            yield from (message for message in result.messages if message.offset < end)
            offset = result.next_offset
