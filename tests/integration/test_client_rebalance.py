"""Rebalancing without stalls, against a real broker process and a real ZooKeeper.

When a consumer is assigned a partition whose owner node the previous owner has not
released yet, it must keep fetching the partitions it owns and take the late one alone as
soon as it is freed, instead of pausing everything for ``zk_sync_s``. Every wait polls a
condition with a deadline; the producer is bounded in count and time.
"""

from __future__ import annotations

import threading
import time

import pytest

from meta.client import Message, MetaMessageSessionFactory
from tests.integration.client_helpers import (
    Collector,
    broker_cluster,
    consumer_of,
    owners,
    wait_for,
    zk_config,
)

TOPIC = "steady"
GROUP = "stall-free"
STALL_S_MAX = 0.5
SEND_INTERVAL_S = 0.01
SENDS_MAX = 6000  # 60 s at the interval: far more than the test runs


class SteadyProducer:
    """Sends one message every ``SEND_INTERVAL_S`` round robin until stopped (bounded)."""

    def __init__(self, factory) -> None:
        self.producer = factory.create_producer()
        self.producer.publish(TOPIC)
        self.sent: set[int] = set()
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for number in range(SENDS_MAX):
            if self._stop.wait(SEND_INTERVAL_S):
                return
            result = self.producer.send_message(Message(TOPIC, b"m%d" % number))
            if result.success:
                self.sent.add(result.msg_id)
            else:
                self.failures += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


class HoldingCollector(Collector):
    """Records every message; while ``hold`` is set, blocks on a message of ``partition``
    until ``release`` is set (bounded), which keeps its consumer from releasing it."""

    def __init__(self, partition: int) -> None:
        super().__init__()
        self.partition = partition
        self.hold = threading.Event()
        self.blocked = threading.Event()
        self.release = threading.Event()

    def receive_messages(self, message: Message) -> None:
        super().receive_messages(message)
        if self.hold.is_set() and message.partition.partition == self.partition:
            self.hold.clear()
            self.blocked.set()
            self.release.wait(10)


def longest_gap_s(collector: Collector, partition: int, start: float, end: float) -> float:
    """The longest time in [start, end] without a message of ``partition``."""
    with collector.lock:
        times = [
            when
            for message, when in zip(collector.messages, collector.times, strict=True)
            if message.partition.partition == partition and start <= when <= end
        ]
    edges = [start, *times, end]
    return max(later - earlier for earlier, later in zip(edges, edges[1:], strict=False))


@pytest.fixture
def cluster(tmp_path_factory, zookeeper):
    topics = {TOPIC: {"numPartitions": 6}}
    with broker_cluster(tmp_path_factory, zookeeper, topics, broker_ids=(1,)) as (root, _b):
        yield root


@pytest.mark.slow
def test_a_partition_freed_late_stalls_no_partition_whose_owner_stays(cluster, zookeeper, admin):
    """Goal: a consumer that cannot take a partition yet keeps fetching the others.

    Method: one broker, six partitions, a steady producer. Consumers ``a`` and ``b`` own
    1-0..1-2 and 1-3..1-5. ``a``'s listener then blocks on a message of 1-2, so ``a`` cannot
    release it. ``c`` joins: ``b`` must keep 1-3 and take 1-2 from ``a``, which still holds
    it. For 1.5 s ``b``'s 1-3 must never go more than 0.5 s without a message (the old
    behaviour paused ``b`` entirely for ``zk_sync_s``, 2 s). Then ``a`` is let go: ``b``
    takes 1-2 within a second, and every acknowledged message is received.
    """
    factories = [MetaMessageSessionFactory(zk_config(zookeeper, cluster)) for _ in range(4)]
    producer = None
    try:
        producer = SteadyProducer(factories[0])
        a, b, c = HoldingCollector(2), Collector(), Collector()
        for factory, name, collector in zip(factories[1:], "abc", (a, b, c), strict=True):
            if name == "c":
                a.hold.set()
                wait_for(a.blocked.is_set, what="a blocked on a message of 1-2")
            consumer_of(factory, TOPIC, GROUP, collector, consumer_id=name, zk_sync_s=2.0)
            if name == "b":
                wait_for(lambda: len(set(owners(admin, cluster, GROUP, TOPIC).values())) == 2)
        joined = time.monotonic()
        wait_for(lambda: time.monotonic() > joined + 1.5, what="1.5 s of steady traffic")
        assert longest_gap_s(b, 3, joined, time.monotonic()) < STALL_S_MAX
        assert owners(admin, cluster, GROUP, TOPIC).get("1-2") == f"{GROUP}_a"
        released = time.monotonic()
        a.release.set()
        wait_for(lambda: owners(admin, cluster, GROUP, TOPIC).get("1-2") == f"{GROUP}_b")
        assert time.monotonic() - released < 1.0
        wait_for(lambda: owners(admin, cluster, GROUP, TOPIC).get("1-4") == f"{GROUP}_c")
        producer.stop()
        assert producer.failures == 0
        wait_for(lambda: producer.sent <= a.ids() | b.ids() | c.ids(), what="every message")
    finally:
        if producer is not None:
            producer.stop()
        for factory in factories:
            factory.shutdown()
