"""Direct-mode consumption: one broker, given partitions, no ZooKeeper.

``DirectConsumerGroup`` stands in for ``meta.client.zk.group.ZkConsumerGroup`` when the
session factory has a ``server_url`` instead of ZooKeeper. As Java's
``SimpleMessageConsumer.completeSubscribe`` does in that mode, it skips registration and
rebalance and creates, for every subscribed topic, one fetch request per partition named in
``ConsumerConfig.partition`` against that one broker, starting at ``ConsumerConfig.offset``
(``Long.MAX_VALUE``, answered 301 with the end, when consuming from the max offset).

Invariants:

* Nothing here touches ZooKeeper or imports kazoo.
* There is no group membership: two direct consumers of one group read independently.
* Offsets live in memory only (Java keeps no offset storage in direct mode): ``commit``
  clears the modified flags and a restarted consumer starts at ``ConsumerConfig.offset``
  again. ``offsets()`` tells where each partition stands, for callers that persist it.

Thread-safety: ``start``/``commit``/``close`` are called by the owning ``MessageConsumer``
(under its rules); ``owned`` and ``offsets`` are safe from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from meta.client.cluster import BrokerAddress, Partition
from meta.client.fetch.manager import FetchManager, FetchRequest

log = logging.getLogger("meta.client")


def parse_partitions(text: str) -> list[Partition]:
    """Parse ``ConsumerConfig.partition``: one ``B-P`` or several, comma-separated.

    Raises:
        ClientError: a part is not ``<brokerId>-<partition>``, or the list is empty.
    """
    from meta.errors import ClientError

    parts = [part.strip() for part in text.split(",")]
    partitions = [Partition.parse(part) for part in parts if part]
    if not partitions:
        raise ClientError(f"ConsumerConfig.partition names no partition: {text!r}")
    return sorted(set(partitions))


class DirectConsumerGroup:
    """The fetch requests of a direct-mode consumer (no ZooKeeper, no rebalance).

    Args:
        broker: the factory's ``server_url`` broker.
        consumer_id: the consumer's id string (for logs).
        topics: topic -> fetch ``max_size``.
        partitions: the partitions to read of every topic.
        fetcher: the consumer's fetch manager (stopped).
        start_offset: the first offset of every partition (``LONG_MAX``: the tail).
    """

    def __init__(
        self,
        broker: BrokerAddress,
        consumer_id: str,
        topics: Mapping[str, int],
        partitions: list[Partition],
        fetcher: FetchManager,
        start_offset: int,
    ) -> None:
        self.consumer_id = consumer_id
        self._broker = broker
        self._topics = dict(topics)
        self._partitions = list(partitions)
        self._fetcher = fetcher
        self._start_offset = start_offset
        self._lock = threading.Lock()
        self._owned: set[tuple[str, str]] = set()
        self._closed = False

    def start(self) -> None:
        """Start fetching every (topic, partition) from the start offset."""
        requests = [
            FetchRequest(topic, partition, self._broker, self._start_offset, max_size=size)
            for topic, size in sorted(self._topics.items())
            for partition in self._partitions
        ]
        with self._lock:
            self._owned = {request.key for request in requests}
        self._fetcher.start(requests)
        log.info("direct consumer %s reads %s from %s", self.consumer_id,
                 sorted(self._owned), self._broker.uri)  # fmt: skip

    def owned(self) -> set[tuple[str, str]]:
        """The ``(topic, B-P)`` pairs read (all of them, for the consumer's life)."""
        with self._lock:
            return set(self._owned)

    def offsets(self) -> dict[tuple[str, str], int]:
        """``(topic, B-P)`` -> the offset of the next unacknowledged message."""
        return {key: request.offset for key, request in self._fetcher.requests().items()}

    def commit(self) -> None:
        """Nothing to write (offsets are in memory only); clears the modified flags."""
        self._fetcher.take_modified()

    def close(self) -> None:
        """Stop fetching. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._fetcher.stop()
