"""Failover of synchronous replication as a user runs it: kill -9 the samsa master, promote.

Goal: a samsa master and its gregor slave (real processes, real ZooKeeper) serve a topic; a
producer of the client library sends numbered messages under load through ZooKeeper and
records each 200; a consumer group of the client library (offsets in ZooKeeper) consumes and
commits. The master is killed with SIGKILL and ``tools/metaServer.sh promote`` turns the
slave into the master of the same brokerId. The same consumer, still running, must then
receive every acknowledged message, sent before or after the kill. The consumer is slower
than the producer, so at the kill it has not yet received some acknowledged messages: those
come from the promoted slave's copy.

Duplicates: the consumer may get a message twice only if it had not committed it when the
master died, that is at an offset at or after the group's committed offset read from
ZooKeeper just before the kill (the consumer's in-flight window). The producer does not
retry, so a message is stored once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from meta.client import Message, MetaMessageSessionFactory
from meta.errors import ClientError
from tests.integration.client_helpers import Collector, consumer_of, make_root, wait_for, zk_config
from tests.integration.test_gregor_promote import GregorRun
from tests.integration.test_samsa_master import start_master, stats_sync

SENDERS = 3
CONSUME_S = 0.005  # a consumer slower than the senders: it lags, so the slave must serve


class SlowCollector(Collector):
    """A ``Collector`` that takes ``CONSUME_S`` per message."""

    def receive_messages(self, message: Message) -> None:
        time.sleep(CONSUME_S)
        super().receive_messages(message)


class Senders:
    """``SENDERS`` threads, each sending numbered messages synchronously until stopped; every
    200 is recorded as (time acknowledged, message id)."""

    def __init__(self, producer) -> None:
        self._producer = producer
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.acked: list[tuple[float, int]] = []
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(SENDERS)]

    def __enter__(self) -> Senders:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
            assert not thread.is_alive()

    def _run(self, sender: int) -> None:
        number = 0
        while not self._stop.is_set():
            number += 1
            try:
                result = self._producer.send_message(Message("test", b"%d-%d" % (sender, number)))
            except ClientError:  # no broker to send to, between the kill and the promotion
                time.sleep(0.05)
                continue
            if result.success:
                with self._lock:
                    self.acked.append((time.monotonic(), result.msg_id))
            else:
                time.sleep(0.05)

    def ids(self) -> set[int]:
        with self._lock:
            return {msg_id for _at, msg_id in self.acked}

    def count_since(self, since: float) -> int:
        with self._lock:
            return sum(1 for at, _msg_id in self.acked if at >= since)


def test_a_promoted_gregor_slave_serves_every_acknowledged_message_to_the_group(
    tmp_path, zookeeper, admin
):
    root = make_root(zookeeper)
    (tmp_path / "slave").mkdir()
    slave = GregorRun(tmp_path / "slave", zookeeper, root)
    started = slave.run("start", "gregor")
    assert started.returncode == 0, started.stdout + started.stderr
    master = start_master(
        tmp_path / "master",
        slave.port,
        zk_connect=zookeeper.connect_string,
        zk={"zk.zkRoot": root},
    )
    factory = MetaMessageSessionFactory(zk_config(zookeeper, root))
    offsets_node = f"{root}/consumers/group/offsets/test/0-0"
    try:
        wait_for(lambda: "connected true" in stats_sync(master), what="the link")
        collector = SlowCollector()
        consumer_of(
            factory, "test", "group", collector, max_delay_fetch_ms=100,
            commit_offset_period_ms=200,
        )  # fmt: skip
        producer = factory.create_producer()
        producer.publish("test")
        with Senders(producer) as senders:
            wait_for(lambda: senders.count_since(0) >= 300, what="load")
            wait_for(lambda: admin.exists(offsets_node), what="a committed offset")
            committed_offset = int(admin.get(offsets_node)[0].split(b"-")[1])
            master.kill()
            backlog = senders.ids() - collector.ids()
            promoted = slave.run("promote")
            assert promoted.returncode == 0, promoted.stdout + promoted.stderr
            promoted_at = time.monotonic()
            wait_for(lambda: senders.count_since(promoted_at) >= 100, 30, "sends after promote")
        assert backlog  # acknowledged messages only the promoted slave can serve
        acknowledged = senders.ids()
        wait_for(lambda: collector.ids() >= acknowledged, 30, "every acknowledged message")
        with collector.lock:
            received = list(collector.messages)
        counts = Counter(message.id for message in received)
        duplicated = [m for m in received if counts[m.id] > 1]
        assert all(message.offset >= committed_offset for message in duplicated)
    finally:
        factory.shutdown()
        master.kill()
        slave.stop_broker()
