"""Rebalancing without stalls, against a real broker process and a real ZooKeeper.

When a consumer is assigned a partition whose owner node the previous owner has not
released yet, it must keep fetching the partitions it owns and take the late one alone as
soon as it is freed, instead of pausing everything for ``zk_sync_s``. Every wait polls a
condition with a deadline; the producer is bounded in count and time.
"""

from __future__ import annotations

import logging
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
# An empty fetch backs a partition off by a tenth of max_delay_fetch_ms (Java's rule): 50 ms
# here, not the default 500 ms, so a stall of the rebalance stands out from the pacing.
PACE = {"zk_sync_s": 2.0, "max_delay_fetch_ms": 500}


class SteadyProducer:
    """Sends one message every ``SEND_INTERVAL_S`` round robin until stopped (bounded)."""

    def __init__(self, factory) -> None:
        self.producer = factory.create_producer()
        self.producer.publish(TOPIC)
        self.sent: set[int] = set()
        self.sent_at: dict[int, tuple[float, int]] = {}  # msg id -> (send time, partition)
        self.lock = threading.Lock()
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for number in range(SENDS_MAX):
            if self._stop.wait(SEND_INTERVAL_S):
                return
            sent_at = time.monotonic()
            result = self.producer.send_message(Message(TOPIC, b"m%d" % number))
            if result.success:
                with self.lock:
                    self.sent.add(result.msg_id)
                    self.sent_at[result.msg_id] = (sent_at, result.partition.partition)
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


def longest_wait_s(producer, collector: Collector, partition: int, start: float, end: float):
    """The longest time a message of ``partition`` sent in [start, end] waited to be
    received: a stall of the consumer, whatever the pace of the producer. A message not
    received yet counts as waiting until ``end``."""
    with collector.lock:
        received = {
            message.id: when
            for message, when in zip(collector.messages, collector.times, strict=True)
        }
    with producer.lock:
        sent = [
            (msg_id, when)
            for msg_id, (when, number) in producer.sent_at.items()
            if number == partition and start <= when <= end
        ]
    assert sent, f"nothing was sent to partition {partition} in the window"
    return max(received.get(msg_id, end) - when for msg_id, when in sent)


@pytest.fixture
def cluster(tmp_path_factory, zookeeper):
    topics = {TOPIC: {"numPartitions": 6}, "other": {"numPartitions": 1}}
    with broker_cluster(tmp_path_factory, zookeeper, topics, broker_ids=(1,)) as (root, _b):
        yield root


@pytest.mark.slow
def test_a_partition_freed_late_stalls_no_partition_whose_owner_stays(cluster, zookeeper, admin):
    """Goal: a consumer that cannot take a partition yet keeps fetching the others.

    Method: one broker, six partitions, a steady producer. Consumers ``a`` and ``b`` own
    1-0..1-2 and 1-3..1-5. ``a``'s listener then blocks on a message of 1-2, so ``a`` cannot
    release it. ``c`` joins: ``b`` must keep 1-3 and take 1-2 from ``a``, which still holds
    it. No message sent to ``b``'s 1-3 in those 1.5 s may wait 0.5 s or more to be
    received (the old behaviour paused ``b`` entirely for ``zk_sync_s``, 2 s). Then ``a``
    is let go: ``b`` takes 1-2 within a second, and every acknowledged message is received.
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
            consumer_of(factory, TOPIC, GROUP, collector, consumer_id=name, **PACE)
            if name == "b":
                wait_for(lambda: len(set(owners(admin, cluster, GROUP, TOPIC).values())) == 2)
        joined = time.monotonic()
        wait_for(lambda: time.monotonic() > joined + 1.5, what="1.5 s of steady traffic")
        assert longest_wait_s(producer, b, 3, joined, time.monotonic() - 0.5) < STALL_S_MAX
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


def test_a_member_of_another_topic_joining_leaves_the_fetching_alone(
    cluster, zookeeper, admin, caplog
):
    """Goal: a rebalance that does not change a member's share does not stop its fetching.

    Method: ``a`` reads the six partitions of the steady topic. ``b`` joins the same group
    for another topic only: ``a`` rebalances (the group's ids changed) but keeps its share,
    so it must neither restart its fetcher (no new "owns" line) nor leave any message
    waiting 0.5 s or more on any partition.
    """
    factories = [MetaMessageSessionFactory(zk_config(zookeeper, cluster)) for _ in range(3)]
    producer = None
    try:
        producer = SteadyProducer(factories[0])
        a = Collector()
        consumer_of(factories[1], TOPIC, GROUP, a, consumer_id="a", **PACE)
        wait_for(lambda: len(owners(admin, cluster, GROUP, TOPIC)) == 6, what="a owning six")
        caplog.set_level(logging.INFO, logger="meta.client")
        caplog.clear()
        joined = time.monotonic()
        consumer_of(factories[2], "other", GROUP, Collector(), consumer_id="b", **PACE)
        wait_for(lambda: owners(admin, cluster, GROUP, "other"), what="b owning other")
        wait_for(lambda: time.monotonic() > joined + 1.5, what="1.5 s of steady traffic")
        end = time.monotonic() - 0.5  # What was sent until then had 0.5 s to arrive.
        assert [r for r in caplog.records if f"{GROUP}_a owns" in r.getMessage()] == []
        waits = [longest_wait_s(producer, a, number, joined, end) for number in range(6)]
        assert max(waits) < STALL_S_MAX
    finally:
        if producer is not None:
            producer.stop()
        for factory in factories:
            factory.shutdown()


def test_a_member_that_only_gains_partitions_takes_them_without_stopping_its_fetching(
    cluster, zookeeper, admin
):
    """Goal: partitions gained are added to the running fetcher, which is not stopped.

    Method: ``a`` and ``b`` own 1-0..1-2 and 1-3..1-5; ``a``'s listener then blocks on a
    message of 1-0, where stopping ``a``'s fetcher would wait for that batch to end. ``b``
    leaves: ``a`` must own all six while its listener is still blocked. Let go, ``a`` has
    received every acknowledged message not received by ``b``.
    """
    factories = [MetaMessageSessionFactory(zk_config(zookeeper, cluster)) for _ in range(3)]
    producer = None
    a, b = HoldingCollector(0), Collector()
    try:
        producer = SteadyProducer(factories[0])
        consumer_of(factories[1], TOPIC, GROUP, a, consumer_id="a", **PACE)
        leaving = consumer_of(factories[2], TOPIC, GROUP, b, consumer_id="b", **PACE)
        wait_for(lambda: len(set(owners(admin, cluster, GROUP, TOPIC).values())) == 2)
        a.hold.set()
        wait_for(a.blocked.is_set, what="a blocked on a message of 1-0")
        leaving.shutdown()
        mine = {f"1-{number}": f"{GROUP}_a" for number in range(6)}
        wait_for(lambda: owners(admin, cluster, GROUP, TOPIC) == mine, 5.0, "a owning six")
        assert not a.release.is_set() and a.blocked.is_set()
        a.release.set()
        producer.stop()
        assert producer.failures == 0
        wait_for(lambda: producer.sent <= a.ids() | b.ids(), what="every message")
    finally:
        a.release.set()
        if producer is not None:
            producer.stop()
        for factory in factories:
            factory.shutdown()
