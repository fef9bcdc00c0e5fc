"""Helpers shared by the client integration tests (real brokers, real ZooKeeper).

Every wait polls a condition with a deadline (``wait_for``); nothing sleeps and hopes.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from meta.client import ConsumerConfig, Message, MetaClientConfig
from tests.integration.broker_process import START_TIMEOUT_S, BrokerProcess

WAIT_S = 20.0


def wait_for(condition, timeout_s: float = WAIT_S, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")


def make_root(zookeeper) -> str:
    root = f"/t-{uuid.uuid4().hex}"
    admin = KazooClient(hosts=zookeeper.connect_string, timeout=10)
    admin.start(timeout=10)
    try:
        admin.create(root)
    finally:
        admin.stop()
        admin.close()
    return root


@contextlib.contextmanager
def broker_cluster(
    tmp_path_factory, zookeeper, topics: dict, broker_ids=(1, 2), **system: object
) -> Iterator[tuple[str, list[BrokerProcess]]]:
    """Brokers registered under a fresh ZooKeeper root; yields (root, brokers), stops them.

    The brokers start side by side, as a cluster's brokers do: each process spends its first
    second or two importing, and the waits for them overlap.
    """
    root = make_root(zookeeper)
    brokers: list[BrokerProcess] = []
    try:
        for broker_id in broker_ids:
            brokers.append(
                BrokerProcess(
                    tmp_path_factory.mktemp(f"broker{broker_id}-"),
                    system={"brokerId": broker_id, **system},
                    topics=topics,
                    zk_connect=zookeeper.connect_string,
                    zk={"zk.zkRoot": root, "zk.zkSessionTimeoutMs": 4000},
                ).launch()
            )
        for broker in brokers:
            broker.wait_until_serving(START_TIMEOUT_S)
        yield root, brokers
    finally:
        for broker in brokers:
            broker.stop()


def zk_config(zookeeper, root: str, **fields) -> MetaClientConfig:
    return MetaClientConfig(zk_connect=zookeeper.connect_string, zk_root=root, **fields)


class Collector:
    """A listener that records every message it gets."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: list[Message] = []
        self.times: list[float] = []

    def receive_messages(self, message: Message) -> None:
        with self.lock:
            self.messages.append(message)
            self.times.append(time.monotonic())

    def ids(self) -> set[int]:
        with self.lock:
            return {message.id for message in self.messages}


def produce(factory, topic: str, count: int, prefix: str = "m") -> set[int]:
    producer = factory.create_producer()
    producer.publish(topic)
    results = [producer.send_message(Message(topic, f"{prefix}{n}".encode())) for n in range(count)]
    assert all(result.success for result in results)
    return {result.msg_id for result in results}


def consumer_of(factory, topic: str, group: str, listener, **fields):
    fields.setdefault("zk_sync_s", 0.5)
    consumer = factory.create_consumer(ConsumerConfig(group, **fields))
    consumer.subscribe(topic, 64 * 1024, listener)
    consumer.complete_subscribe()
    return consumer


def owners(admin, root: str, group: str, topic: str) -> dict[str, str]:
    """Partition -> owner; an owner node deleted while being read (a rebalance) is skipped."""
    path = f"{root}/consumers/{group}/owners/{topic}"
    found = {}
    for name in admin.get_children(path) if admin.exists(path) else []:
        try:
            found[name] = admin.get(f"{path}/{name}")[0].decode()
        except NoNodeError:
            pass
    return found
