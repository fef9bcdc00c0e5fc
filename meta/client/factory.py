"""``MetaClientConfig`` and ``MetaMessageSessionFactory``: the entry point of the client library.

A session factory owns what its producers share: one ``KazooClient``
(through ``meta.client.zk.cluster_view``; ``meta.client.zk``, the only client package that
imports kazoo, is imported here only when ZooKeeper is configured), one ``ZkClusterView``
and one ``ConnectionPool`` (``meta.client.net.pool``, re-exported here) of pipelined broker
connections (``meta.client.net.pipeline``). The pool maps broker URIs to connections: each
user (a topic of the ZooKeeper view, or direct mode) declares the brokers it needs; a
connection is opened when first needed and closed when no user references its URI any more.
With ``server_url`` set (direct mode) no ZooKeeper is used at all: every message goes to
that broker with partition -1, and consumers read the partitions their config names.
The factory's ``SubscribeRegistry`` refuses a topic subscribed twice by one group.

Invariants:

* The config names exactly one of ``zk_connect`` and ``server_url``.
* The pool references, per published topic, exactly the brokers of that topic's current
  snapshot (the view's ``on_change`` keeps it so); in direct mode, the one broker.
* After ``shutdown()`` no thread or socket of the factory is left: producers are shut down,
  connections closed (their reader threads joined) and the kazoo client stopped and closed.

Thread-safety: the factory, its ``ConnectionPool`` and its producers are thread-safe;
``shutdown`` is idempotent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from meta.client.cluster import BrokerAddress, Partition
from meta.client.consume.consumer import SubscribeRegistry
from meta.client.net.pool import RECONNECT_DELAY_S, ConnectionPool
from meta.client.produce.producer import MessageProducer
from meta.client.produce.selectors import PartitionSelector, RoundRobinPartitionSelector
from meta.errors import ClientClosedError, ClientError

if TYPE_CHECKING:
    from meta.client.consume.consumer import ConsumerConfig, MessageConsumer
    from meta.client.consume.pull import MessageIterator, TopicBrowser
    from meta.client.produce.async_producer import AsyncMessageProducer
    from meta.client.produce.ordered import OrderedMessageProducer
    from meta.client.produce.xa import XAMessageProducer
    from meta.client.zk.cluster_view import TopicSnapshot, ZkClusterView
    from meta.client.zk.group import ZkConsumerGroup

log = logging.getLogger("meta.client")

__all__ = ["RECONNECT_DELAY_S", "ConnectionPool", "MetaClientConfig", "MetaMessageSessionFactory"]

DIRECT_USER = "<direct>"
"""The pool user that holds the direct-mode broker (not a valid topic name, so no clash)."""


@dataclass(frozen=True)
class MetaClientConfig:
    """Client settings (Java's ``MetaClientConfig`` and ``ZKConfig``).

    Attributes:
        zk_connect: ZooKeeper connect string ``host:port[,host:port...]``.
        zk_root: the MetaQ root in ZooKeeper.
        zk_session_timeout_ms: ZooKeeper session timeout.
        zk_connection_timeout_ms: how long the factory waits for ZooKeeper when created.
        zk_operation_timeout_ms: how long a later call waits for each ZooKeeper read it
            makes (a producer's first ``publish`` of a topic, ``get_partitions_for_topic``);
            past it the call raises ``ClientError`` naming ZooKeeper. Sends never wait for
            ZooKeeper: they use the brokers last read.
        server_url: ``meta://host:port`` of one broker (direct mode, no ZooKeeper).
        max_message_bytes: largest encoded payload a producer sends; the default fits a
            default broker's ``maxTransferSize`` (1 MiB) minus the 20-byte record header, so
            every message sent can also be consumed.
        connect_timeout_s: bound on connecting to a broker (and on a blocked write).

    Raises:
        ClientError: both or neither of ``zk_connect`` and ``server_url``, or a bad value.
    """

    zk_connect: str | None = None
    zk_root: str = "/meta"
    zk_session_timeout_ms: int = 30000
    zk_connection_timeout_ms: int = 30000
    zk_operation_timeout_ms: int = 10000
    server_url: str | None = None
    max_message_bytes: int = 1048576 - 20
    connect_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if (self.zk_connect is None) == (self.server_url is None):
            raise ClientError(
                "MetaClientConfig needs exactly one of zk_connect (ZooKeeper discovery) and "
                f"server_url (direct mode); got zk_connect={self.zk_connect!r}, "
                f"server_url={self.server_url!r}"
            )
        if self.zk_connect is not None and not self.zk_connect.strip():
            raise ClientError("MetaClientConfig.zk_connect must not be blank")
        if self.server_url is not None:
            BrokerAddress.parse_uri(self.server_url)  # raises ClientError naming the URL
        if not isinstance(self.zk_root, str) or not self.zk_root.strip("/ "):
            raise ClientError(f"MetaClientConfig.zk_root must name a path, got {self.zk_root!r}")
        for name in (
            "zk_session_timeout_ms",
            "zk_connection_timeout_ms",
            "zk_operation_timeout_ms",
            "max_message_bytes",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ClientError(f"MetaClientConfig.{name} must be a positive int, got {value!r}")
        if not self.connect_timeout_s > 0:
            raise ClientError(
                f"MetaClientConfig.connect_timeout_s must be positive, got {self.connect_timeout_s}"
            )


class MetaMessageSessionFactory:
    """Creates producers and consumers sharing one ZooKeeper client and one connection pool.

    Args:
        config: the client settings.

    Raises:
        ClientError: ZooKeeper is unreachable within ``zk_connection_timeout_ms`` (the text
            names the connect string).
    """

    def __init__(self, config: MetaClientConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._producers: list[MessageProducer] = []
        self._consumers: list[MessageConsumer] = []
        self._extras: list[OrderedMessageProducer | AsyncMessageProducer] = []
        self._closed = False
        self._pool = ConnectionPool(config.connect_timeout_s)
        self._subscriptions = SubscribeRegistry()
        self._zk_client: Any = None
        self._view: ZkClusterView | None = None
        self._direct_broker: BrokerAddress | None = None
        if config.server_url is not None:
            self._direct_broker = BrokerAddress.parse_uri(config.server_url)
            self._pool.set_brokers(DIRECT_USER, [self._direct_broker])
        else:
            self._start_zookeeper(config)

    @property
    def pool(self) -> ConnectionPool:
        """The connection pool every producer and consumer of this factory shares."""
        return self._pool

    @property
    def cluster_view(self) -> ZkClusterView | None:
        """The ZooKeeper view of brokers and partitions; None in direct mode."""
        return self._view

    @property
    def direct_broker(self) -> BrokerAddress | None:
        """Direct mode: the ``server_url`` broker; None with ZooKeeper."""
        return self._direct_broker

    def _start_zookeeper(self, config: MetaClientConfig) -> None:
        # Imported here so that direct-mode users never import kazoo.
        from meta.client.zk import cluster_view as zk_cluster

        self._zk_client = zk_cluster.connect_zookeeper(
            config.zk_connect, config.zk_session_timeout_ms, config.zk_connection_timeout_ms
        )
        self._view = zk_cluster.ZkClusterView(
            self._zk_client,
            config.zk_root,
            on_change=self._snapshot_changed,
            operation_timeout_s=config.zk_operation_timeout_ms / 1000,
            connect=config.zk_connect,
        )

    def _snapshot_changed(self, topic: str, snapshot: TopicSnapshot) -> None:
        """``ZkClusterView.on_change``: bookkeeping only (kazoo's thread must not connect)."""
        self._pool.set_brokers(topic, snapshot.brokers.values())

    def create_producer(
        self, partition_selector: PartitionSelector | None = None
    ) -> MessageProducer:
        """Return a new producer; its selector defaults to a fresh round robin.

        Raises:
            ClientClosedError: the factory was shut down.
        """
        producer = MessageProducer(
            self._pool,
            partition_selector if partition_selector is not None else RoundRobinPartitionSelector(),
            self.config.max_message_bytes,
            view=self._view,
            direct_broker=self._direct_broker,
            on_shutdown=self._producer_shut_down,
        )
        return self._track_producer(producer)

    def _track_producer(self, producer: MessageProducer) -> MessageProducer:
        """Shut ``producer`` down with the factory; refuse it if the factory is shut down."""
        with self._lock:
            if self._closed:
                raise ClientClosedError("the session factory was shut down")
            self._producers.append(producer)
        return producer

    def create_xa_producer(
        self, selector: PartitionSelector | None = None, unique_qualifier_prefix: str | None = None
    ) -> XAMessageProducer:
        """An XA producer (``meta.client.produce.xa``); qualifier ``<prefix>-<host>``.

        Raises:
            ClientError: direct mode, a closed factory, or a prefix that is not allowed.
        """
        from meta.client.produce.xa import XAMessageProducer

        if self._view is None:
            raise ClientError("create_xa_producer needs ZooKeeper; direct mode is not supported")
        producer = XAMessageProducer(
            self._pool,
            selector if selector is not None else RoundRobinPartitionSelector(),
            self.config.max_message_bytes,
            self._view,
            self._producer_shut_down,
            unique_qualifier_prefix,
        )
        self._track_producer(producer)
        return producer

    def create_ordered_producer(
        self,
        partitions_info: Mapping[str, str],
        partition_selector: PartitionSelector | None = None,
        local_path: str = "~/.meta_localmessage",
        recover_interval_ms: int = 300_000,
    ) -> OrderedMessageProducer:
        """Return a producer that keeps each key's order, storing locally while it cannot send.

        Args:
            partitions_info: Java's ``topic.num.<topic>`` -> ``"<brokerId>:<count>;..."``;
                partitions are chosen over this configured list.
            partition_selector: chooses among the configured partitions; a
                ``HashPartitionSelector`` (by ``Message.key``) when None.
            local_path: the backlog directory (``<local_path>/<topic>@<B-P>``).
            recover_interval_ms: the pause between re-send attempts of a live partition.

        Raises:
            ClientError: direct mode, a closed factory or a malformed ``partitions_info``.
        """
        from meta.client.produce import ordered
        from meta.client.produce.selectors import HashPartitionSelector

        if self._view is None:
            raise ClientError("create_ordered_producer needs ZooKeeper (live partitions)")
        configured = ordered.parse_partitions_info(partitions_info)
        steering = ordered.SteeringSelector(RoundRobinPartitionSelector())
        view = self._view
        producer = ordered.OrderedMessageProducer(
            self.create_producer(steering),
            steering,
            partition_selector if partition_selector is not None else HashPartitionSelector(),
            configured,
            lambda topic: view.snapshot(topic).partitions,
            ordered.LocalMessageStorage(local_path, ordered.BACKLOG_MESSAGES_MAX),
            self.config.max_message_bytes,
            recover_interval_ms,
        )
        return self._track(producer)

    def create_async_producer(
        self,
        window: int = 20000,
        partition_selector: PartitionSelector | None = None,
        local_path: str = "~/.meta_async_storage",
        recover_interval_ms: int = 300_000,
    ) -> AsyncMessageProducer:
        """Return a one-way producer with a window of ``window`` permits.

        Args:
            window: permits; a message costs ``max(1, len(data) // 4096)``.
            partition_selector: as ``create_producer``.
            local_path: where refused or failed messages wait (``<local_path>/<topic>@-1--1``).
            recover_interval_ms: the pause between re-send rounds.

        Raises:
            ClientError: a closed factory or a bad window.
        """
        from meta.client.produce import async_producer, ordered

        producer = async_producer.AsyncMessageProducer(
            self.create_producer(partition_selector),
            ordered.LocalMessageStorage(local_path, ordered.BACKLOG_MESSAGES_MAX),
            window,
            self.config.max_message_bytes,
            recover_interval_ms,
        )
        return self._track(producer)

    def _track(self, producer: Any) -> Any:
        with self._lock:
            closed = self._closed
            if not closed:
                self._extras.append(producer)
        if closed:
            producer.shutdown()
            raise ClientClosedError("the session factory was shut down")
        return producer

    def _producer_shut_down(self, producer: MessageProducer) -> None:
        with self._lock:
            if producer in self._producers:
                self._producers.remove(producer)

    def create_consumer(
        self, config: ConsumerConfig, *, group_class: type[ZkConsumerGroup] | None = None
    ) -> MessageConsumer:
        """Return a new consumer of ``config.group``; it joins at ``complete_subscribe``.

        In direct mode (``server_url``) the consumer reads the partitions named in
        ``config.partition`` from that broker, without ZooKeeper (``meta.client.consume.direct``).

        Args:
            config: the consumer settings.
            group_class: the ``ZkConsumerGroup`` (sub)class that keeps the group's offsets;
                None: offsets in ZooKeeper. The broadcast consumer keeps them in a file.

        Raises:
            ClientClosedError: the factory was shut down.
            ClientError: direct mode without ``config.partition``.
        """
        from meta.client.consume.consumer import MessageConsumer

        consumer = MessageConsumer(
            config,
            self._pool,
            self._zk_client,
            self.config.zk_root,
            self._consumer_shut_down,
            pull=self.get,
            registry=self._subscriptions,
            direct_broker=self._direct_broker,
            group_class=group_class,
        )
        with self._lock:
            if self._closed:
                raise ClientClosedError("the session factory was shut down")
            self._consumers.append(consumer)
        return consumer

    def _consumer_shut_down(self, consumer: MessageConsumer) -> None:
        with self._lock:
            if consumer in self._consumers:
                self._consumers.remove(consumer)

    def create_broadcast_consumer(
        self, config: ConsumerConfig, offsets_path: str | None = None
    ) -> MessageConsumer:
        """A consumer that gets every message: a per-host group, offsets in a local file."""
        from meta.client.consume.broadcast import create_broadcast_consumer

        return create_broadcast_consumer(self, config, offsets_path)

    def create_topic_browser(
        self, topic: str, max_size: int = 1 << 20, timeout_s: float = 5.0
    ) -> TopicBrowser:
        """Iterate every message of every partition of ``topic`` from offset 0."""
        from meta.client.consume.pull import TopicBrowser

        return TopicBrowser(self, topic, max_size, timeout_s)

    def get(
        self, topic: str, partition: Partition, offset: int, max_size: int = 1 << 20
    ) -> MessageIterator | None:
        """Pull one batch from ``partition`` at ``offset``; None on 404/403/301."""
        from meta.client.consume.pull import get

        return get(self, topic, partition, offset, max_size)

    def get_partitions_for_topic(self, topic: str) -> list[Partition]:
        """Read the producer partitions of ``topic`` from ZooKeeper once.

        Returns:
            The partitions in numeric order; ``[]`` when no broker publishes the topic.

        Raises:
            ClientError: direct mode (no ZooKeeper), a closed factory, or ZooKeeper did not
                answer a read within ``zk_operation_timeout_ms``.
        """
        with self._lock:
            if self._closed:
                raise ClientClosedError("the session factory was shut down")
        if self._view is None:
            raise ClientError(
                "get_partitions_for_topic needs ZooKeeper; this factory is in direct mode "
                f"({self.config.server_url})"
            )
        return self._view.read_partitions(topic)

    def shutdown(self) -> None:
        """Shut down every producer, close every connection and the ZooKeeper client.

        Idempotent; leaves no thread or socket of this factory behind.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            extras, self._extras = self._extras, []
        for extra in extras:  # Before the pool closes: they flush or store in-flight sends.
            extra.shutdown()
        with self._lock:
            producers = list(self._producers)
            consumers = list(self._consumers)
        for consumer in consumers:
            consumer.shutdown()
        for producer in producers:
            producer.shutdown()
        if self._view is not None:
            self._view.close()
        self._pool.close()
        if self._zk_client is not None:
            from meta.client.zk import cluster_view as zk_cluster

            zk_cluster.close_zookeeper(self._zk_client)

    def __enter__(self) -> MetaMessageSessionFactory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()
