"""``MessageProducer``: sends messages to the brokers of a topic.

A producer is created by ``MetaMessageSessionFactory.create_producer``. It publishes topics
through the factory's ``ZkClusterView`` (or, in direct mode, sends everything to the one
configured broker with partition -1, letting the broker choose), picks a partition with its
``PartitionSelector`` over the topic's current snapshot, and sends a 7-token ``put`` with the
payload checksum on the factory's shared ``PipelinedConnection`` to that partition's master.

Outcomes follow Java's ``SimpleMessageProducer``: 200 is a success carrying the
partition, offset and message id of the reply (also set on the message); 403 is
``SendResult(False, None, -1, "403")``; any other code is a failure with the reply text. No
retry. A timeout raises ``OperationTimeoutError``; a connection failure a ``ClientError``.

Invariants: a message is checked (type, topic, size against ``max_message_bytes``) before a
partition is chosen, so a refused message never reaches a broker. Only masters are written
to: the snapshot holds ``topics-pub`` ``B-m`` partitions and ``ids/B/master`` URIs only.

Transactions (``meta.client.transact.transaction``): ``begin_transaction`` binds a local transaction
to the calling thread; while one is bound (or, on an XA producer, while the thread's XA
resource has an associated xid) ``send_message`` sends the 8-token transactional put to the
transaction's one broker, whose reply is ``200 "<msgId> <partition> -1"``.
``send_message_async`` refuses to run inside a transaction. Direct mode has no transactions:
a transactional put needs an explicit partition, and direct mode sends partition -1.

The future-based path is the throughput path, so its per-message work is kept small: a
message of the common shape (no attribute, no key, a topic already checked) is checked by
types alone, the last connection used is remembered, and the reply is turned into a
``SendResult`` from the code and body the reader decoded in bulk
(``meta.client.produce.put_result``).

Thread-safety: a producer may be shared by threads; ``send_message_async`` futures are
completed in batches on the connection's reader thread (see ``meta.client.net.pipeline``), each
message's ``id``, ``partition`` and ``offset`` set before its future completes. Transactions
are per thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import TYPE_CHECKING, Any, Self

from meta.client.cluster import RANDOM_PARTITION, BrokerAddress, Partition, validate_topic
from meta.client.message import Message, SendResult, as_message, check_message
from meta.client.produce import unroutable
from meta.client.produce.put_result import SendResultConverter
from meta.client.produce.selectors import PartitionSelector
from meta.client.transact.transaction import (
    DEFAULT_TRANSACTION_REQUEST_TIMEOUT_S,
    LocalTransaction,
    ThreadTransactions,
    check_transaction_timeout,
    new_session_id,
)
from meta.errors import (
    ClientClosedError,
    ClientError,
    MessageTooLargeError,
    NoPartitionError,
    OperationTimeoutError,
    TransactionError,
)
from meta.protocol.commands import Put
from meta.protocol.message import checksum

if TYPE_CHECKING:
    from meta.client.factory import ConnectionPool
    from meta.client.net.pipeline import PipelinedConnection
    from meta.client.zk.cluster_view import TopicSnapshot, ZkClusterView

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
        self._transactions = ThreadTransactions()
        self._session_id: str | None = None  # made on first use: local_host() may be slow
        self._transaction_request_timeout_s = DEFAULT_TRANSACTION_REQUEST_TIMEOUT_S
        self._last_connection: tuple[BrokerAddress | None, Any] = (None, None)
        # topic -> the brokers of its last snapshot that had partitions (one per topic).
        self._served: dict[str, Mapping[int, BrokerAddress]] = {}

    @property
    def session_id(self) -> str:
        """This producer's session id ``<localHost>-<startupMillis>-<seq>``."""
        with self._lock:
            if self._session_id is None:
                self._session_id = new_session_id()
            return self._session_id

    @property
    def transaction_request_timeout_s(self) -> float:
        """The bound on every transaction command (default 5 s)."""
        return self._transaction_request_timeout_s

    def set_transaction_request_timeout(self, seconds: float) -> None:
        """Bound every later transaction command of this producer by ``seconds``.

        Raises:
            ClientError: ``seconds`` is not positive.
        """
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
            raise ClientError(f"the transaction request timeout must be positive: {seconds!r}")
        self._transaction_request_timeout_s = float(seconds)

    @property
    def published_topics(self) -> frozenset[str]:
        """The topics this producer has published."""
        with self._lock:
            return frozenset(self._topics)

    def publish(self, topic: str) -> None:
        """Publish ``topic``: watch its brokers and connect to them.

        Publishing the same topic twice is a no-op. In direct mode only the name is checked.

        Raises:
            ClientError: blank topic, closed producer, or ZooKeeper unreadable.
            InvalidTopicError: the name is not allowed (compatibility.md).
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

    def begin_transaction(self, timeout: int = 0) -> LocalTransaction:
        """Bind a new local transaction to the calling thread; no network call.

        The first ``send_message`` of this thread then begins it on the broker it selects.
        The result is a context manager: commit on normal exit, rollback on an exception.

        Args:
            timeout: seconds the broker gives the transaction (sent with ``BEGIN``); 0: none.

        Returns:
            The thread's ``LocalTransaction``.

        Raises:
            TransactionError: a transaction is in progress on this thread ("transaction in
                progress"), or the producer is in direct mode.
            ClientError: a closed producer or a bad ``timeout``.
        """
        check_transaction_timeout(timeout)
        self._check_open()
        if self._direct_broker is not None:
            raise TransactionError(
                "transactions need ZooKeeper: a transactional put needs an explicit partition "
                f"and direct mode ({self._direct_broker.uri}) sends partition -1"
            )
        slots = self._transactions
        if slots.local is not None:
            raise TransactionError(f"transaction in progress: {slots.local.key or 'not begun'}")
        if slots.active() is not None:
            raise TransactionError("transaction in progress: an XA transaction is associated")
        slots.local = LocalTransaction(
            self._pool, slots, self.session_id, timeout, self._request_timeout
        )
        return slots.local

    def current_transaction(self) -> LocalTransaction | None:
        """The local transaction bound to the calling thread, if any."""
        return self._transactions.local

    def commit(self) -> None:
        """Commit the calling thread's local transaction and unbind it.

        With no message sent, nothing was begun on a broker: it is only unbound.

        Raises:
            TransactionError: no transaction on this thread, the broker refused (its text),
                or no reply came in time ("the transaction state is unknown").
        """
        self._thread_transaction("commit").commit()

    def rollback(self) -> None:
        """Roll back the calling thread's local transaction and unbind it.

        Raises:
            TransactionError: no transaction on this thread, or the rollback failed.
        """
        self._thread_transaction("rollback").rollback()

    def _thread_transaction(self, what: str) -> LocalTransaction:
        transaction = self._transactions.local
        if transaction is None:
            raise TransactionError(f"{what}: no transaction is started on this thread")
        return transaction

    def _request_timeout(self) -> float:
        return self._transaction_request_timeout_s

    def send_message(self, message: Message, timeout_s: float = DEFAULT_TIMEOUT_S) -> SendResult:
        """Send one message and wait for the broker's answer.

        Inside a transaction of this thread the put carries the transaction key and goes to
        the transaction's broker (the first one begins the transaction there).

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
            TransactionError: the transaction could not be begun on the broker.
        """
        branch = self._transactions.active()
        if branch is not None:
            future = self._send_in_transaction(message, branch, timeout_s)
        else:
            future = self._send(message, timeout_s)
        try:
            return future.result(timeout_s)
        except FutureTimeoutError:
            # The connection also expires the request on its own; cancelling frees it now.
            if future.cancel():
                raise OperationTimeoutError(
                    f"no reply to the put of topic {message.topic} within {timeout_s} s"
                ) from None
            return future.result()  # Completed at this very moment.

    def send(
        self,
        topic_or_message: str | Message,
        data: bytes | None = None,
        *,
        attribute: str | None = None,
        key: str | bytes | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> SendResult:
        """Send one message and wait until a broker stored it; raise if none did.

        ``send("topic", b"data")`` or ``send(Message(...))``. Unlike ``send_message`` (Java's
        shape, which returns a failed ``SendResult``), a refused or failed put raises.

        Returns:
            The successful ``SendResult`` (partition, offset, msg_id).

        Raises:
            SendFailedError: the broker refused or failed the put (its text).
            ClientError, MessageTooLargeError, OperationTimeoutError, TransactionError:
                as ``send_message``; ``NoPartitionError`` subclasses say why no partition.
        """
        message = as_message(topic_or_message, data, attribute, key)
        return self.send_message(message, timeout_s).raise_for_status()

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
            A ``concurrent.futures.Future`` of the ``SendResult`` (``wait`` and
            ``as_completed`` work), completed on the connection's reader thread.

        Raises:
            ClientError, MessageTooLargeError, InvalidTopicError: see ``send_message``.
            TransactionError: the calling thread is in a transaction (use ``send_message``).
        """
        if self._transactions.active() is not None:
            raise TransactionError(
                "send_message_async cannot take part in a transaction; use send_message"
            )
        return self._send(message, timeout_s)

    def _send(self, message: Message, timeout_s: float) -> Future[SendResult]:
        """The non-transactional put: checks raise, later failures fail the future."""
        payload, flag = self._checked_payload(message)
        try:
            partition, address = self._route(message)
            connection = self._connection(address)
            put = Put(message.topic, partition.partition, payload, flag, 0, checksum(payload))
            convert = SendResultConverter(message, partition.broker_id)
            return connection.request(put, timeout_s, convert)
        except ClientError as error:
            failed: Future[SendResult] = Future()
            failed.set_exception(error)
            return failed

    def _send_in_transaction(
        self, message: Message, branch: Any, timeout_s: float
    ) -> Future[SendResult]:
        """Send a transactional put for ``branch`` (a ``LocalTransaction`` or ``XAResource``).

        Selection and BEGIN errors raise here (a transaction needs them synchronously).
        """
        payload, flag = self._checked_payload(message)
        pinned: BrokerAddress | None = branch.address
        if pinned is None:
            partition, address = self._route(message)
        else:
            partition, address = self._route_to(message, pinned)
        connection = self._pool.get(address)
        tx_key = branch.transaction_key(connection, address)
        put = Put(message.topic, partition.partition, payload, flag, 0, checksum(payload), tx_key)
        convert = SendResultConverter(message, partition.broker_id)
        return connection.request(put, timeout_s, convert)

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def _check_open(self) -> None:
        if self._shut_down:
            raise ClientClosedError("the producer was shut down")

    def _checked_payload(self, message: Message) -> tuple[bytes, int]:
        """Check the message and the producer; return the put body and flag."""
        self._check_open()
        if (  # The common case, every check settled by types and the topic cache.
            type(message) is Message
            and message.attribute is None
            and message.key is None
            and type(message.data) is bytes
            and message.topic in self._valid_topics
        ):
            if len(message.data) > self._max_message_bytes:
                self._refuse_size(message, len(message.data))
            return message.data, 0
        if not isinstance(message, Message):
            raise ClientError(f"expected a Message, got {type(message).__name__}")
        check_message(message)
        if message.topic not in self._valid_topics:
            validate_topic(message.topic)
            if len(self._valid_topics) < VALID_TOPICS_CACHED_MAX:
                self._valid_topics.add(message.topic)
        payload, flag = message.payload_and_flag()
        if len(payload) > self._max_message_bytes:
            self._refuse_size(message, len(payload))
        return payload, flag

    def _refuse_size(self, message: Message, size: int) -> None:
        raise MessageTooLargeError(
            f"message payload of {size} bytes for topic {message.topic} is larger "
            f"than max_message_bytes {self._max_message_bytes}"
        )

    def _connection(self, address: BrokerAddress) -> PipelinedConnection:
        """The pool's open connection to ``address``; the last one is remembered.

        The pool closes a connection nobody uses any more, so a remembered one that is still
        open is still the pool's.
        """
        last_address, last_connection = self._last_connection
        if last_address is address and not last_connection.closed:
            return last_connection
        connection = self._pool.get(address)
        self._last_connection = (address, connection)  # One tuple: atomic for other threads.
        return connection

    def _route(self, message: Message) -> tuple[Partition, BrokerAddress]:
        """Choose the partition and its master broker.

        Raises:
            TopicNotPublishedError: ``publish(topic)`` was never called.
            TopicNotServedError: no broker serves the topic (nothing in ZooKeeper).
            BrokersUnavailableError: the topic's brokers are down or not registered yet.
        """
        if self._direct_broker is not None:
            return RANDOM_PARTITION, self._direct_broker
        topic = message.topic
        snapshot = self._snapshot(topic)
        if not snapshot.partitions:
            raise self._unroutable(topic)
        self._served[topic] = snapshot.brokers  # The brokers seen, for a later error's text.
        partition = self._selector.get_partition(topic, snapshot.partitions, message)
        address = snapshot.brokers.get(partition.broker_id)
        if address is None:
            raise unroutable.no_master(topic, partition, snapshot.brokers)
        return partition, address

    def _unroutable(self, topic: str) -> NoPartitionError:
        """Why ``topic`` has no partition: not published, not served, or brokers down."""
        if topic not in self._topics:
            return unroutable.not_published(topic)
        assert self._view is not None
        return unroutable.no_partition(
            topic, self._view.publish_path(topic), self._served.get(topic, {})
        )

    def _route_to(self, message: Message, pinned: BrokerAddress) -> tuple[Partition, BrokerAddress]:
        """Choose, with the selector, among the partitions of the ``pinned`` broker only.

        Raises:
            NoPartitionError: that broker has no partition of the message's topic now.
        """
        snapshot = self._snapshot(message.topic)
        partitions = [
            partition
            for partition in snapshot.partitions
            if (address := snapshot.brokers.get(partition.broker_id)) is not None
            and address.uri == pinned.uri
        ]
        if not partitions:
            raise NoPartitionError(
                f"There is no partitions in `{pinned.uri}` to send message with topic "
                f"`{message.topic}` in a transaction"
            )
        return self._selector.get_partition(message.topic, partitions, message), pinned

    def _snapshot(self, topic: str) -> TopicSnapshot:
        assert self._view is not None
        return self._view.snapshot(topic)

    def _brokers_of(self, topic: str) -> list[BrokerAddress]:
        if self._direct_broker is not None:
            return [self._direct_broker]
        return list(self._snapshot(topic).brokers.values())
