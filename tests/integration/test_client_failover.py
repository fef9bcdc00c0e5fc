"""Client failover and bad input against a real ZooKeeper and real broker processes.

One module cluster (brokers 1 and 2, 4 partitions each, under a ZooKeeper root of its own)
serves the member-loss, ordering and session-expiry tests; the broker-restart test runs its
own two brokers so that stopping one cannot disturb the others. Every test uses its own topic
and group, every wait polls a condition with a deadline, and every process and client is
stopped in a ``finally``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from kazoo.recipe.watchers import ChildrenWatch

from meta.client import (
    ConsumerConfig,
    HashPartitionSelector,
    Message,
    MetaClientConfig,
    MetaMessageSessionFactory,
)
from meta.client.cluster import java_string_key
from meta.client.zk.balance import assign
from meta.errors import ClientError, InvalidGroupError, MessageTooLargeError
from tests.integration.broker_process import REPO, BrokerProcess, free_port
from tests.integration.client_helpers import (
    Collector,
    consumer_of,
    make_root,
    owners,
    produce,
    wait_for,
    zk_config,
)
from tests.integration.zookeeper import expire_session

TOPICS = {name: {"numPartitions": 4} for name in ("loss", "hash", "expiry", "rewatch", "big")}
PARTITIONS = sorted((f"{b}-{p}" for b in (1, 2) for p in range(4)), key=java_string_key)


def start_broker(directory, zookeeper, root, broker_id, topics, sync_ms=500) -> BrokerProcess:
    return BrokerProcess(
        directory,
        system={"brokerId": broker_id, "numPartitions": 4},
        topics=topics,
        zk_connect=zookeeper.connect_string,
        zk={"zk.zkRoot": root, "zk.zkSessionTimeoutMs": 4000, "zk.zkSyncTimeMs": sync_ms},
    ).start()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    root = make_root(zookeeper)
    brokers = []
    try:
        for broker_id in (1, 2):
            directory = tmp_path_factory.mktemp(f"fbroker{broker_id}")
            brokers.append(start_broker(directory, zookeeper, root, broker_id, TOPICS))
        yield root
    finally:
        for broker in brokers:
            broker.stop()


@pytest.fixture
def factories(zookeeper, cluster):
    opened = []

    def make(root: str = cluster):
        factory = MetaMessageSessionFactory(zk_config(zookeeper, root))
        opened.append(factory)
        return factory

    yield make
    for factory in opened:
        factory.shutdown()


class Sender(threading.Thread):
    """Sends ``topic`` messages synchronously until stopped; records every outcome."""

    def __init__(self, producer, topic: str, pause_s: float = 0.005) -> None:
        super().__init__(name="test-sender", daemon=True)
        self.producer, self.topic, self.pause_s = producer, topic, pause_s
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.acked: list[tuple[float, int, int]] = []  # (time, msg id, broker id)
        self.failures: list[tuple[float, object]] = []  # (time, exception or SendResult)

    def run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            try:
                result = self.producer.send_message(Message(self.topic, b"s%d" % n), 1.0)
            except ClientError as error:
                outcome = error
            else:
                outcome = result
            with self.lock:
                if isinstance(outcome, ClientError) or not outcome.success:
                    self.failures.append((time.monotonic(), outcome))
                else:
                    self.acked.append(
                        (time.monotonic(), outcome.msg_id, outcome.partition.broker_id)
                    )
            n += 1
            time.sleep(self.pause_s)

    def acked_ids(self) -> set[int]:
        with self.lock:
            return {msg_id for _t, msg_id, _b in self.acked}

    def acked_on(self, broker_id: int) -> int:
        with self.lock:
            return sum(1 for _t, _i, broker in self.acked if broker == broker_id)

    def stop(self) -> None:
        self.stopped.set()
        self.join(10)
        assert not self.is_alive(), "the sender thread did not stop"


def child_ids(path) -> list[int]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="ascii") as lines:
        return [int(line) for line in lines.read().split("\n")[:-1]]  # last line may be partial


def test_a_killed_member_loses_its_partitions_and_nothing_is_lost(
    factories, admin, cluster, zookeeper, tmp_path
):
    """Goal: SIGKILL of a group member hands its partitions on; every message is consumed.

    Method: two in-process consumers and one child process (2 s session) share 8 partitions;
    a sender thread produces while the child is killed; after the child's session expires the
    owners must be the DEFAULT split of the two survivors, and the union of what the three
    consumed must hold every acknowledged id. Duplicates may only come from the child's
    partitions (re-read from its last committed offset); the survivors never duplicate.
    """
    out = tmp_path / "child-ids.txt"
    command = [sys.executable, "-m", "tests.integration.consumer_process"]
    command += [zookeeper.connect_string, cluster, "loss", "g-loss", "c2", str(out)]
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    with open(tmp_path / "child.log", "wb") as log:  # The child keeps its own descriptor.
        child = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log)
    sender = None
    try:
        collectors = [Collector() for _ in range(2)]
        consumers = [
            consumer_of(
                factories(),
                "loss",
                "g-loss",
                collectors[n],
                consumer_id=f"c{n}",
                commit_offset_period_ms=500,
            )  # fmt: skip
            for n in range(2)
        ]
        ids = ["g-loss_c0", "g-loss_c1", "g-loss_c2"]
        expected = {p: c for c in ids for p in assign("DEFAULT", c, ids, PARTITIONS)}
        wait_for(lambda: owners(admin, cluster, "g-loss", "loss") == expected, what="3 owners")
        child_partitions = {p for p, owner in expected.items() if owner == "g-loss_c2"}
        producer = factories().create_producer()
        producer.publish("loss")
        sender = Sender(producer, "loss")
        sender.start()
        wait_for(lambda: len(child_ids(out)) >= 30, what="the child to consume")
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        survivors = ids[:2]
        expected = {p: c for c in survivors for p in assign("DEFAULT", c, survivors, PARTITIONS)}
        wait_for(lambda: owners(admin, cluster, "g-loss", "loss") == expected, what="2 owners")
        time.sleep(0.3)  # Keep sending a little after the takeover.
        sender.stop()
        assert not sender.failures
        sent = sender.acked_ids()
        union = lambda: set(child_ids(out)).union(*(c.ids() for c in collectors))  # noqa: E731
        wait_for(lambda: union() >= sent, what="every acknowledged message")
        time.sleep(0.3)  # Late duplicates would show up now.
        survivor_messages = [m for c in collectors for m in c.messages]
        counts = Counter(m.id for m in survivor_messages)
        assert [i for i, n in counts.items() if n > 1] == []
        duplicated = set(child_ids(out)) & set(counts)
        partitions_of = {m.id: str(m.partition) for m in survivor_messages}
        assert {partitions_of[i] for i in duplicated} <= child_partitions
        assert consumers[0].owned_partitions() | consumers[1].owned_partitions() == {
            ("loss", p) for p in PARTITIONS
        }
    finally:
        if sender is not None and sender.is_alive():
            sender.stop()
        if child.poll() is None:
            child.kill()
            child.wait(10)


def test_a_broker_restart_loses_no_acknowledged_message(tmp_path, zookeeper):
    """Goal: a broker crash under load loses no acknowledged message, and producers recover.

    Method: a sender thread sends synchronously (1 s timeout) and one consumer reads, while
    broker 4 of a private two-broker cluster is killed with SIGKILL. Its ZooKeeper nodes stay
    until its session expires, but the round-robin producer takes it out of rotation at its
    first failure, so sends go on to broker 3; a put in flight at the kill is sent again
    there, and any send that still fails does so with a typed failure (``ClientError`` or a
    failed ``SendResult``), only from the kill on. The broker is then started again on the
    same port and data directory (it waits out its old session, DECISIONS 6); the producer's
    probe brings it back and sends must succeed on broker 4 again, and every id whose send
    succeeded must be consumed.
    """
    root = make_root(zookeeper)
    topics = {"restart": {"numPartitions": 2}}
    brokers = []
    factory = MetaMessageSessionFactory(zk_config(zookeeper, root))
    sender = None
    try:
        for broker_id in (3, 4):
            directory = tmp_path / f"broker{broker_id}"
            brokers.append(start_broker(directory, zookeeper, root, broker_id, topics, 0))
        collector = Collector()
        consumer_factory = MetaMessageSessionFactory(zk_config(zookeeper, root))
        try:
            consumer_of(consumer_factory, "restart", "g-restart", collector,
                        max_delay_fetch_ms=500, commit_offset_period_ms=300)  # fmt: skip
            producer = factory.create_producer()
            producer.publish("restart")
            sender = Sender(producer, "restart")
            sender.start()
            on_broker_4 = lambda: sender.acked_on(4)  # noqa: E731
            wait_for(lambda: on_broker_4() >= 20, what="sends to broker 4")
            stopping_at = time.monotonic()
            brokers[1].kill()
            acked = len(sender.acked_ids())
            wait_for(lambda: len(sender.acked_ids()) >= acked + 50, what="sends without broker 4")
            brokers[1].start()
            before = on_broker_4()
            wait_for(lambda: on_broker_4() >= before + 20, what="sends to the restarted broker")
            sender.stop()
            assert len(sender.failures) < 5
            for _t, failure in sender.failures:
                assert isinstance(failure, ClientError) or not failure.success
            assert all(t >= stopping_at for t, _f in sender.failures)
            sent = sender.acked_ids()
            wait_for(lambda: collector.ids() >= sent, what="every acknowledged message")
        finally:
            consumer_factory.shutdown()
    finally:
        if sender is not None and sender.is_alive():
            sender.stop()
        factory.shutdown()
        for broker in brokers:
            broker.stop()


def test_the_hash_selector_keeps_each_key_on_one_partition_in_send_order(factories):
    """Goal: with ``HashPartitionSelector`` a key's messages arrive from one partition, in order.

    Method: keys k0..k9, 30 messages each, sent interleaved; one consumer reads them all.
    """
    factory = factories()
    producer = factory.create_producer(HashPartitionSelector())
    producer.publish("hash")
    sent = set()
    for n in range(30):
        for k in range(10):
            result = producer.send_message(Message("hash", f"k{k}:{n}".encode(), key=f"k{k}"))
            assert result.success
            sent.add(result.msg_id)
    collector = Collector()
    consumer_of(factories(), "hash", "g-hash", collector)
    wait_for(lambda: collector.ids() == sent, what="all 300 messages")
    partitions: dict[str, set[str]] = {}
    order: dict[str, list[int]] = {}
    for message in collector.messages:
        key, n = message.data.decode().split(":")
        partitions.setdefault(key, set()).add(str(message.partition))
        order.setdefault(key, []).append(int(n))
    assert sorted(order) == [f"k{k}" for k in range(10)]
    assert all(len(found) == 1 for found in partitions.values()), partitions
    assert all(numbers == list(range(30)) for numbers in order.values()), order


def in_session(admin, path: str, client) -> bool:
    """Whether the ephemeral node ``path`` exists and belongs to ``client``'s session."""
    stat = admin.exists(path)
    return stat is not None and stat.ephemeralOwner == client.client_id[0]


def test_a_consumer_registers_again_after_its_session_expires(factories, admin, cluster):
    """Goal: after a ZooKeeper session expiry the consumer re-registers and keeps consuming.

    Method: expire the session of the consumer factory's own kazoo client, then check that its
    ids node is back (owned by the new session), that it owns every partition again under the
    same consumerIdString, and that it consumes messages sent afterwards.
    """
    factory = factories()
    collector = Collector()
    consumer = consumer_of(factory, "expiry", "g-exp", collector, consumer_id="solo")
    everything = {p: "g-exp_solo" for p in PARTITIONS}
    wait_for(lambda: owners(admin, cluster, "g-exp", "expiry") == everything, what="owners")
    producer_factory = factories()
    sent = produce(producer_factory, "expiry", 16)
    wait_for(lambda: collector.ids() >= sent, what="the first messages")
    client = factory._zk_client
    old_session = client.client_id[0]
    expire_session(client)
    assert client.client_id[0] != old_session
    ids_path = f"{cluster}/consumers/g-exp/ids/g-exp_solo"
    wait_for(lambda: in_session(admin, ids_path, client), what="the ids node of the new session")
    wait_for(lambda: owners(admin, cluster, "g-exp", "expiry") == everything, what="owners back")
    wait_for(lambda: consumer.owned_partitions() == {("expiry", p) for p in PARTITIONS})
    later = produce(producer_factory, "expiry", 16, prefix="after")
    wait_for(lambda: collector.ids() >= later, what="messages sent after the expiry")


class _WatchThatMissesItsReArm(ChildrenWatch):
    """kazoo's ``ChildrenWatch`` as it ends when the connection drops while it reads its
    children: marked established, it never sets its watch again in the new session."""

    def _session_watcher(self, state):
        pass


def test_a_member_whose_watches_missed_the_expiry_still_sees_a_new_member(
    factories, admin, cluster, monkeypatch
):
    """Goal: a consumer keeps seeing membership changes after a session expiry, even when
    kazoo's own re-arming of a watch is lost in a race. Method: the group's watches are the
    kazoo watch that never re-arms; consumer A's session is expired; once A owns every
    partition again, consumer B joins, and the owners must split between them (without new
    watches after the expiry, A never rebalances and B waits for A's partitions forever)."""
    monkeypatch.setattr("meta.client.zk.group.ChildrenWatch", _WatchThatMissesItsReArm)
    first = factories()
    consumer_of(first, "rewatch", "g-rw", Collector(), consumer_id="a")
    everything = {p: "g-rw_a" for p in PARTITIONS}
    wait_for(lambda: owners(admin, cluster, "g-rw", "rewatch") == everything, what="owners")
    client = first._zk_client  # noqa: SLF001
    expire_session(client)
    ids_path = f"{cluster}/consumers/g-rw/ids/g-rw_a"
    wait_for(lambda: in_session(admin, ids_path, client), what="A's ids node of the new session")
    wait_for(lambda: owners(admin, cluster, "g-rw", "rewatch") == everything, what="owners back")
    consumer_of(factories(), "rewatch", "g-rw", Collector(), consumer_id="b")
    members = ["g-rw_a", "g-rw_b"]
    expected = {p: m for m in members for p in assign("DEFAULT", m, members, PARTITIONS)}
    wait_for(lambda: owners(admin, cluster, "g-rw", "rewatch") == expected, what="the split")


def test_bad_input_fails_fast_with_typed_errors(factories, zookeeper, cluster):
    """Goal: bad input raises a precise error type quickly and sends nothing.

    Method: a blank topic, an oversized message (then a small one on the same hash
    partition, which must land at offset 0), invalid groups, and a factory pointed at a port
    where no ZooKeeper listens, bounded by its connection timeout.
    """
    factory = MetaMessageSessionFactory(zk_config(zookeeper, cluster, max_message_bytes=1024))
    try:
        producer = factory.create_producer(HashPartitionSelector())
        producer.publish("big")
        started = time.monotonic()
        with pytest.raises(ClientError, match="blank"):
            producer.send_message(Message("", b"x"))
        with pytest.raises(ClientError, match="blank"):
            producer.publish(" ")
        with pytest.raises(MessageTooLargeError, match="1024"):
            producer.send_message(Message("big", b"x" * 1025, key="same"))
        assert time.monotonic() - started < 1.0
        result = producer.send_message(Message("big", b"small", key="same"))
        assert result.success and result.offset == 0
    finally:
        factory.shutdown()
    for group in ("", "bad group", "a.b", "a/b"):
        with pytest.raises(InvalidGroupError):
            ConsumerConfig(group)
    nobody = f"127.0.0.1:{free_port()}"
    config = MetaClientConfig(zk_connect=nobody, zk_connection_timeout_ms=1500)
    started = time.monotonic()
    with pytest.raises(ClientError, match=nobody):
        MetaMessageSessionFactory(config)
    assert time.monotonic() - started < 1.5 + 2.0
