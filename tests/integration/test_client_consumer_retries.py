"""Consumer retries, the recover store and manual ack against a real ZooKeeper and broker.

One module cluster: broker 1 with one partition per topic under a ZooKeeper root of its
own, so every message of a topic is in partition ``1-0`` in send order. Each test has its
own topic and group. Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import threading

import pytest
from kazoo.client import KazooClient

from meta.client import ConsumerConfig, Message, MetaMessageSessionFactory
from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import make_root, wait_for, zk_config

TOPICS = {name: {"numPartitions": 1} for name in ("retry", "manual")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    root = make_root(zookeeper)
    broker = BrokerProcess(
        tmp_path_factory.mktemp("rbroker"),
        system={"brokerId": 1, "numPartitions": 1},
        topics=TOPICS,
        zk_connect=zookeeper.connect_string,
        zk={"zk.zkRoot": root, "zk.zkSessionTimeoutMs": 4000},
    ).start()
    try:
        yield root
    finally:
        broker.stop()


@pytest.fixture
def factory(zookeeper, cluster):
    opened = MetaMessageSessionFactory(zk_config(zookeeper, cluster))
    yield opened
    opened.shutdown()


def send(factory, topic: str, names: list[str]) -> dict[str, tuple[int, int]]:
    """Send ``names`` in order; return name -> (msg_id, offset)."""
    producer = factory.create_producer()
    producer.publish(topic)
    sent = {}
    for name in names:
        result = producer.send_message(Message(topic, name.encode()))
        assert result.success
        sent[name] = (result.msg_id, result.offset)
    return sent


def start_consumer(factory, topic: str, group: str, listener, **fields):
    config = ConsumerConfig(group, zk_sync_s=0.5, max_delay_fetch_ms=200, **fields)
    consumer = factory.create_consumer(config)
    consumer.subscribe(topic, 64 * 1024, listener)
    consumer.complete_subscribe()
    return consumer


def test_a_poison_message_is_retried_then_recovered_once_the_listener_accepts_it(factory, tmp_path):
    """m2 always fails: it is tried max_fetch_retries + 1 = 3 times by the fetch loop, m3 and
    m4 still arrive, m2 sits in the recover store; once the listener accepts it the
    recover manager delivers it and the store is empty."""
    lock = threading.Lock()
    fetch_calls: list[str] = []
    accepted: list[str] = []
    poisoned = threading.Event()
    poisoned.set()

    def listener(message):
        name = message.data.decode()
        with lock:
            if threading.current_thread().name.startswith("meta-fetch"):
                fetch_calls.append(name)
            if name == "m2" and poisoned.is_set():
                raise RuntimeError("poison")
            accepted.append(name)

    send(factory, "retry", [f"m{n}" for n in range(5)])
    consumer = start_consumer(
        factory, "retry", "g-retry", listener,
        max_fetch_retries=2, recover_path=str(tmp_path), recover_interval_ms=300,
    )  # fmt: skip
    wait_for(lambda: "m4" in accepted, what="the messages after the poison one")
    with lock:
        assert accepted == ["m0", "m1", "m3", "m4"]
        assert fetch_calls.count("m2") == 3
    recover_file = consumer.recover_store.file("retry")
    assert [s.message.data for s in recover_file.pending()] == [b"m2"]
    poisoned.clear()
    wait_for(lambda: "m2" in accepted, what="m2 from the recover store")
    wait_for(lambda: len(recover_file) == 0, what="the recover store to empty")
    assert fetch_calls.count("m2") == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["retry@g-retry"]


def test_manual_ack_rollback_redelivers_and_ack_commits_the_offset(factory, zookeeper, cluster):
    """a1 is rolled back once, so a0 and a1 come again; a2 acks, and the committed offset
    in ZooKeeper is the end of a2."""
    seen: list[str] = []
    rolled_back = threading.Event()

    def listener(message):
        control = message.partition_control
        control.set_auto_ack(False)
        name = message.data.decode()
        seen.append(name)
        if name == "a1" and not rolled_back.is_set():
            rolled_back.set()
            control.rollback()
        elif name == "a2":
            control.ack()

    sent = send(factory, "manual", ["a0", "a1", "a2"])
    start_consumer(factory, "manual", "g-manual", listener, commit_offset_period_ms=100)
    wait_for(lambda: "a2" in seen, what="a2")
    assert seen == ["a0", "a1", "a0", "a1", "a2"]
    msg_id, offset = sent["a2"]
    expected = f"{msg_id}-{offset + 20 + len(b'a2')}"
    admin = KazooClient(hosts=zookeeper.connect_string, timeout=10)
    admin.start(timeout=10)
    try:
        path = f"{cluster}/consumers/g-manual/offsets/manual/1-0"
        wait_for(
            lambda: admin.exists(path) and admin.get(path)[0].decode() == expected,
            what="the acked offset in ZooKeeper",
        )
    finally:
        admin.stop()
        admin.close()
