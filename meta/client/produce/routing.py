"""``Router``: which partition, and which broker, a producer's message goes to.

With ZooKeeper the router reads the topic's current snapshot from the factory's
``ZkClusterView`` (producer partitions in numeric order, master addresses) and lets the
producer's ``PartitionSelector`` choose. In direct mode every message goes to the one
configured broker with partition -1, and the broker chooses. With a ``BrokerRotation`` (a
keyless selector, ``meta.client.produce.rotation``), the selector chooses among the
partitions of the brokers still in rotation only.

Invariants: only masters are routed to (the snapshot holds ``topics-pub`` ``B-m``
partitions and ``ids/B/master`` URIs only). A message that cannot be routed raises a
``NoPartitionError`` subclass that says why (``meta.client.produce.unroutable``).

Thread-safety: thread-safe; ``served`` is replaced one topic at a time (a dict store).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from meta.client.cluster import RANDOM_PARTITION, BrokerAddress, Partition
from meta.client.message import Message
from meta.client.produce import unroutable
from meta.client.produce.rotation import BrokerRotation
from meta.client.produce.selectors import PartitionSelector
from meta.errors import NoPartitionError

if TYPE_CHECKING:
    from meta.client.zk.cluster_view import TopicSnapshot, ZkClusterView

__all__ = ["Router"]


class Router:
    """Routes a producer's messages.

    Args:
        selector: chooses a partition per message.
        view: the factory's ZooKeeper view; None in direct mode.
        direct_broker: the broker of direct mode; None with ZooKeeper.
        is_published: whether the producer published a topic (for the error's text).
        rotation: the brokers out of rotation; None when the selector must not avoid any.
    """

    def __init__(
        self,
        selector: PartitionSelector,
        view: ZkClusterView | None,
        direct_broker: BrokerAddress | None,
        is_published: Callable[[str], bool],
        rotation: BrokerRotation | None = None,
    ) -> None:
        self.selector = selector
        self.rotation = rotation
        self._view = view
        self._direct_broker = direct_broker
        self._is_published = is_published
        # topic -> the brokers of its last snapshot that had partitions (one per topic).
        self._served: dict[str, Mapping[int, BrokerAddress]] = {}

    def route(self, message: Message) -> tuple[Partition, BrokerAddress]:
        """Choose the partition and its master broker.

        Raises:
            TopicNotPublishedError: ``publish(topic)`` was never called.
            TopicNotServedError: no broker serves the topic (nothing in ZooKeeper).
            BrokersUnavailableError: the topic's brokers are down, not registered yet, or
                all out of rotation after failures.
        """
        if self._direct_broker is not None:
            return RANDOM_PARTITION, self._direct_broker
        topic = message.topic
        snapshot = self.snapshot(topic)
        if not snapshot.partitions:
            raise self._unroutable(topic)
        self._served[topic] = snapshot.brokers  # The brokers seen, for a later error's text.
        partitions: Sequence[Partition] = snapshot.partitions
        if self.rotation is not None and self.rotation.any_out:
            partitions = self._in_rotation(topic, snapshot, self.rotation)
        partition = self.selector.get_partition(topic, partitions, message)
        address = snapshot.brokers.get(partition.broker_id)
        if address is None:
            raise unroutable.no_master(topic, partition, snapshot.brokers)
        return partition, address

    def route_to(self, message: Message, pinned: BrokerAddress) -> tuple[Partition, BrokerAddress]:
        """Choose, with the selector, among the partitions of the ``pinned`` broker only.

        Raises:
            NoPartitionError: that broker has no partition of the message's topic now.
        """
        snapshot = self.snapshot(message.topic)
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
        return self.selector.get_partition(message.topic, partitions, message), pinned

    def snapshot(self, topic: str) -> TopicSnapshot:
        """The topic's current snapshot (ZooKeeper mode only)."""
        assert self._view is not None
        return self._view.snapshot(topic)

    def brokers_of(self, topic: str) -> list[BrokerAddress]:
        """The brokers ``topic`` is routed to now."""
        if self._direct_broker is not None:
            return [self._direct_broker]
        return list(self.snapshot(topic).brokers.values())

    def _in_rotation(
        self, topic: str, snapshot: TopicSnapshot, rotation: BrokerRotation
    ) -> list[Partition]:
        """The partitions whose broker is in rotation; raises when there is none."""
        out = rotation.out_uris()
        kept = [
            partition
            for partition in snapshot.partitions
            if (address := snapshot.brokers.get(partition.broker_id)) is None
            or address.uri not in out
        ]
        if not kept:
            raise unroutable.all_out(topic, rotation.describe())
        return kept

    def _unroutable(self, topic: str) -> NoPartitionError:
        """Why ``topic`` has no partition: not published, not served, or brokers down."""
        if not self._is_published(topic):
            return unroutable.not_published(topic)
        assert self._view is not None
        return unroutable.no_partition(
            topic, self._view.publish_path(topic), self._served.get(topic, {})
        )
