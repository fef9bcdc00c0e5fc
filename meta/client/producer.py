"""``MessageProducer``: sends messages to the brokers of a topic (zk spec §2.1-§2.3, §2.7).

A producer is created by ``MetaMessageSessionFactory.create_producer``. It publishes topics
through the factory's ``ZkClusterView`` (or, in direct mode, sends everything to the one
configured broker with partition -1, letting the broker choose), picks a partition with its
``PartitionSelector`` over the topic's current snapshot, and sends a 7-token ``put`` with the
payload checksum on the factory's shared ``PipelinedConnection`` to that partition's master.

Outcomes follow Java's ``SimpleMessageProducer`` (spec §2.3): 200 is a success carrying the
partition, offset and message id of the reply (also set on the message); 403 is
``SendResult(False, None, -1, "403")``; any other code is a failure with the reply text. No
retry. A timeout raises ``OperationTimeoutError``; a connection failure a ``ClientError``.

Invariants: a message is checked (type, topic, size against ``max_message_bytes``) before a
partition is chosen, so a refused message never reaches a broker. Only masters are written
to: the snapshot holds ``topics-pub`` ``B-m`` partitions and ``ids/B/master`` URIs only.

Thread-safety: a producer may be shared by threads; ``send_message_async`` futures are
completed on the connection's reader thread (see ``meta.client.pipeline``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import TYPE_CHECKING

from meta.client.cluster import RANDOM_PARTITION, BrokerAddress, Partition, validate_topic
from meta.client.message import Message, SendResult, check_message
from meta.client.selectors import PartitionSelector
from meta.errors import (
    ClientClosedError,
    ClientError,
    MessageTooLargeError,
    NoBrokerError,
    OperationTimeoutError,
)
from meta.protocol.commands import Data, Put, Result
from meta.protocol.message import checksum

if TYPE_CHECKING:
    from meta.client.factory import ConnectionPool
    from meta.client.zk_cluster import TopicSnapshot, ZkClusterView

DEFAULT_TIMEOUT_S = 3.0
"""Java's ``DEFAULT_OP_TIMEOUT`` (3000 ms)."""
VALID_TOPICS_CACHED_MAX = 1024
"""How many accepted topic names a producer remembers, to skip re-checking them per message."""


class MessageProducer:
    """Sends messages; created by ``MetaMessageSessionFactory.create_producer``.

    Args:
        pool: the factory's connection pool.
        selector: chooses a partition per message.
        max_message_bytes: largest encoded payload accepted.
        view: the factory's ZooKeeper view; None in direct mode.
        direct_broker: the broker of direct mode (``server_url``); None with ZooKeeper.
        on_shutdown: called once by ``shutdown`` (the factory forgets the producer).
    """

    def __init__(
        self,
        pool: ConnectionPool,
        selector: PartitionSelector,
        max_message_bytes: int,
        view: ZkClusterView | None = None,
        direct_broker: BrokerAddress | None = None,
        on_shutdown: Callable[[MessageProducer], None] | None = None,
    ) -> None:
        assert (view is None) != (direct_broker is None)
        self._pool = pool
        self._selector = selector
        self._max_message_bytes = max_message_bytes
        self._view = view
        self._direct_broker = direct_broker
        self._on_shutdown = on_shutdown
        self._lock = threading.Lock()
        self._topics: set[str] = set()
        self._valid_topics: set[str] = set()  # names validate_topic accepted (bounded)
        self._shut_down = False

    @property
    def published_topics(self) -> frozenset[str]:
        """The topics this producer has published."""
        with self._lock:
            return frozenset(self._topics)

    def publish(self, topic: str) -> None:
        """Publish ``topic``: watch its brokers and connect to them (spec §2.1).

        Publishing the same topic twice is a no-op. In direct mode only the name is checked.

        Raises:
            ClientError: blank topic, closed producer, or ZooKeeper unreadable.
            InvalidTopicError: the name is not allowed (DECISIONS 9).
        """
        if not isinstance(topic, str) or not topic.strip():
            raise ClientError("topic must not be blank")
        validate_topic(topic)
        with self._lock:
            self._check_open()
            if topic in self._topics:
                return
            if self._view is not None:
                self._view.publish(topic)
            self._topics.add(topic)
        brokers = self._brokers_of(topic)
        for address in brokers:
            self._pool.connect_quietly(address)

    def send_message(self, message: Message, timeout_s: float = DEFAULT_TIMEOUT_S) -> SendResult:
        """Send one message and wait for the broker's answer (spec §2.3).

        Args:
            message: the message; on success its ``id``, ``partition`` and ``offset`` are set.
            timeout_s: how long to wait for the reply.

        Returns:
            The ``SendResult``: success, or a failure with the broker's text.

        Raises:
            ClientError: invalid message (blank topic, data not bytes), closed producer,
                no partition or no broker for the topic, or a connection failure.
            MessageTooLargeError: the payload is over ``max_message_bytes`` (nothing sent).
            OperationTimeoutError: no reply within ``timeout_s``.
        """
        future = self.send_message_async(message, timeout_s)
        try:
            return future.result(timeout_s)
        except FutureTimeoutError:
            # The connection also expires the request on its own; cancelling frees it now.
            if future.cancel():
                raise OperationTimeoutError(
                    f"no reply to the put of topic {message.topic} within {timeout_s} s"
                ) from None
            return future.result()  # Completed at this very moment.

    def send_message_async(
        self, message: Message, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> Future[SendResult]:
        """Send one message without waiting; many may be in flight on one connection.

        An invalid or oversized message, or a closed producer, raises here. Everything
        after the checks (no partition, no broker, connection failure, timeout) fails the
        future with the same errors ``send_message`` raises.

        Args:
            message: the message; on success its ``id``, ``partition`` and ``offset`` are set
                before the future completes.
            timeout_s: the future fails with ``OperationTimeoutError`` after this time.

        Returns:
            A future of the ``SendResult``, completed on the connection's reader thread.

        Raises:
            ClientError, MessageTooLargeError, InvalidTopicError: see ``send_message``.
        """
        payload, flag = self._checked_payload(message)
        try:
            partition, address = self._route(message)
            connection = self._pool.get(address)
            put = Put(message.topic, partition.partition, payload, flag, 0, checksum(payload))
            convert = _SendResultConverter(message, partition.broker_id)
            return connection.request(put, timeout_s, convert)
        except ClientError as error:
            failed: Future[SendResult] = Future()
            failed.set_exception(error)
            return failed

    def shutdown(self) -> None:
        """Unpublish every topic (closing connections nobody else uses). Idempotent."""
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
            topics, self._topics = self._topics, set()
            if self._view is not None:
                for topic in topics:
                    self._view.unpublish(topic)
        if self._on_shutdown is not None:
            self._on_shutdown(self)

    def _check_open(self) -> None:
        if self._shut_down:
            raise ClientClosedError("the producer was shut down")

    def _checked_payload(self, message: Message) -> tuple[bytes, int]:
        """Check the message and the producer; return the put body and flag."""
        self._check_open()
        if not isinstance(message, Message):
            raise ClientError(f"expected a Message, got {type(message).__name__}")
        check_message(message)
        if message.topic not in self._valid_topics:
            validate_topic(message.topic)
            if len(self._valid_topics) < VALID_TOPICS_CACHED_MAX:
                self._valid_topics.add(message.topic)
        payload, flag = message.payload_and_flag()
        if len(payload) > self._max_message_bytes:
            raise MessageTooLargeError(
                f"message payload of {len(payload)} bytes for topic {message.topic} is larger "
                f"than max_message_bytes {self._max_message_bytes}"
            )
        return payload, flag

    def _route(self, message: Message) -> tuple[Partition, BrokerAddress]:
        """Choose the partition and its master broker (spec §2.2).

        Raises:
            NoPartitionError: the topic has no partition (not published, or no broker).
            NoBrokerError: the chosen partition's broker has no master URI right now.
        """
        if self._direct_broker is not None:
            return RANDOM_PARTITION, self._direct_broker
        snapshot = self._snapshot(message.topic)
        partition = self._selector.get_partition(message.topic, snapshot.partitions, message)
        address = snapshot.brokers.get(partition.broker_id)
        if address is None:
            raise NoBrokerError(
                f"There is no aviable server right now for topic {message.topic} and "
                f"partition {partition}"
            )
        return partition, address

    def _snapshot(self, topic: str) -> TopicSnapshot:
        assert self._view is not None
        return self._view.snapshot(topic)

    def _brokers_of(self, topic: str) -> list[BrokerAddress]:
        if self._direct_broker is not None:
            return [self._direct_broker]
        return list(self._snapshot(topic).brokers.values())


class _SendResultConverter:
    """Turns a put reply into a ``SendResult`` (runs on the connection's reader thread)."""

    __slots__ = ("message", "broker_id")

    def __init__(self, message: Message, broker_id: int) -> None:
        self.message = message
        self.broker_id = broker_id

    def __call__(self, reply: Result | Data) -> SendResult:
        if not isinstance(reply, Result):
            raise ClientError(f"unexpected value frame in reply to a put of {self.message.topic}")
        if reply.code == 200:
            return self._success(reply.body)
        if reply.code == 403:
            return SendResult.failure("403")
        return SendResult.failure(reply.body.decode("utf-8", "replace"))

    def _success(self, body: bytes) -> SendResult:
        fields = body.split()
        try:
            msg_id, partition_number, offset = (int(field) for field in fields)
        except ValueError:
            raise ClientError(f"malformed put reply {body!r} for {self.message.topic}") from None
        partition = Partition(self.broker_id, partition_number)
        message = self.message
        message.id = msg_id
        message.partition = partition
        message.offset = offset
        return SendResult(True, partition, offset, None, msg_id)
