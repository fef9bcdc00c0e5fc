"""A producer under round-robin load loses one of three brokers to ``kill -9``.

Real broker processes and a real ZooKeeper. The killed broker's ZooKeeper nodes stay until
its session expires (4 s here), so for those seconds the producer still sees its
partitions: keyless sends must leave them at once and go to the other brokers. Every wait
polls a condition with a deadline; the load is bounded in count and time.
"""

from __future__ import annotations

import threading
import time

import pytest

from meta.client import ConsumerConfig, Message, MetaMessageSessionFactory
from tests.integration.client_helpers import Collector, broker_cluster, wait_for, zk_config

TOPIC = "spread"
AFTER_KILL_S = 10.0
SEND_INTERVAL_S = 0.004
SENDS_MAX = 10_000  # far more than the test sends in its time
FAILED_FRACTION_MAX = 0.01


class Load:
    """Sends round robin from one thread until stopped (bounded); records every outcome."""

    def __init__(self, producer) -> None:
        self.producer = producer
        self.outcomes: list[tuple[float, int | None, str | None]] = []  # time, msg id, error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for number in range(SENDS_MAX):
            if self._stop.wait(SEND_INTERVAL_S):
                return
            try:
                result = self.producer.send_message(Message(TOPIC, b"m%d" % number))
                error = None if result.success else result.error_message
                msg_id = result.msg_id if result.success else None
            except Exception as exception:  # Counted as a failed send, like a failed result.
                msg_id, error = None, repr(exception)
            self.outcomes.append((time.monotonic(), msg_id, error))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def acknowledged(self) -> set[int]:
        return {msg_id for _when, msg_id, _error in self.outcomes if msg_id is not None}


@pytest.mark.slow
def test_a_killed_broker_takes_no_share_of_round_robin_sends(tmp_path_factory, zookeeper):
    """Goal: after ``kill -9`` of one of three brokers, fewer than 1% of the sends of the
    next 10 s fail, and no acknowledged message is lost.

    Method: three brokers with two partitions each; one thread sends round robin every 4 ms.
    After 1 s broker 2 is killed; 10 s later the load stops. The failures after the kill are
    counted; then broker 2 is started again on its data and a consumer group reads every
    partition from the start until it has every acknowledged message.
    """
    topics = {TOPIC: {"numPartitions": 2}}
    with broker_cluster(tmp_path_factory, zookeeper, topics, broker_ids=(1, 2, 3)) as (
        root,
        brokers,
    ):
        factory = MetaMessageSessionFactory(zk_config(zookeeper, root))
        load = None
        try:
            producer = factory.create_producer()
            producer.publish(TOPIC)
            load = Load(producer)
            wait_for(lambda: len(load.outcomes) > 100, what="the load running")
            brokers[1].kill()
            killed = time.monotonic()
            wait_for(lambda: time.monotonic() > killed + AFTER_KILL_S, timeout_s=30)
            load.stop()
            after = [outcome for outcome in load.outcomes if outcome[0] >= killed]
            failed = [error for _when, _id, error in after if error is not None]
            assert len(after) > 500
            assert len(failed) < FAILED_FRACTION_MAX * len(after), failed[:5]

            brokers[1].start()
            collector = Collector()
            consumer = factory.create_consumer(ConsumerConfig("everything", zk_sync_s=0.5))
            consumer.subscribe(TOPIC, 64 * 1024, collector)
            consumer.complete_subscribe()
            sent = load.acknowledged()
            wait_for(lambda: sent <= collector.ids(), timeout_s=60, what="every acknowledged")
        finally:
            if load is not None:
                load.stop()
            factory.shutdown()
