"""Pull API, topic browser, offset resets, always-from-max and broadcast against real brokers.

One module cluster: brokers 1 and 2 with 2 partitions each under a ZooKeeper root of their
own, with ``updateConsumerOffsets=true`` so that a get beyond the end is answered 301 (the
case the offset-reset policies act on). Every test uses its own topic and group. Every wait
polls a condition with a deadline.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from meta.client import Message, MetaMessageSessionFactory
from meta.client.cluster import Partition, broadcast_group
from meta.client.consume.broadcast import create_broadcast_consumer
from meta.client.consume.consumer import ConsumerConfig
from meta.client.consume.pull import LONG_MAX, TopicBrowser, fetch, get, offset_of
from tests.integration.client_helpers import (
    Collector,
    broker_cluster,
    consumer_of,
    wait_for,
    zk_config,
)

NAMES = ("pull", "factory-api", "browse", "earliest", "latest", "always", "bcast")
TOPICS = {name: {"numPartitions": 2} for name in NAMES}
PARTITIONS = [f"{b}-{p}" for b in (1, 2) for p in range(2)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    system = {"numPartitions": 2, "updateConsumerOffsets": True}
    with broker_cluster(tmp_path_factory, zookeeper, TOPICS, **system) as (root, _brokers):
        yield root


@pytest.fixture
def factory(zookeeper, cluster):
    made = MetaMessageSessionFactory(zk_config(zookeeper, cluster))
    yield made
    made.shutdown()


def produce(factory, topic: str, count: int, prefix: str = "m") -> list:
    producer = factory.create_producer()
    producer.publish(topic)
    results = [producer.send_message(Message(topic, f"{prefix}{n}".encode())) for n in range(count)]
    assert all(result.success for result in results)
    producer.shutdown()
    return results


def commit_offsets(admin, root: str, group: str, topic: str, offset: int) -> None:
    for partition in PARTITIONS:
        path = f"{root}/consumers/{group}/offsets/{topic}/{partition}"
        admin.create(path, f"-1-{offset}".encode(), makepath=True)


def test_get_reads_a_partition_and_answers_none_past_the_end(factory):
    results = produce(factory, "pull", 12)
    partition = results[0].partition
    mine = [r for r in results if r.partition == partition]
    iterator = get(factory, "pull", partition, 0)
    assert [m.id for m in iterator] == [r.msg_id for r in mine]
    end = iterator.offset
    assert offset_of(factory, "pull", partition, LONG_MAX) == end
    second = get(factory, "pull", partition, mine[1].offset, timeout_s=5.0)
    assert [m.id for m in second] == [r.msg_id for r in mine[1:]]
    assert get(factory, "pull", partition, end) is None  # 404 at the end
    assert get(factory, "pull", partition, LONG_MAX) is None  # 301: offset dropped (Java)
    moved = fetch(factory, "pull", partition, LONG_MAX)
    assert (moved.messages, moved.moved_to, moved.next_offset) == ([], end, end)
    assert fetch(factory, "pull", partition, end + 1000).moved_to == end
    result = fetch(factory, "pull", partition, 0)
    assert [m.data for m in result.messages] == [m.data for m in get(factory, "pull", partition, 0)]
    assert result.next_offset == end and result.moved_to is None


def test_the_browser_reads_everything_on_two_brokers(factory):
    sent = produce(factory, "browse", 30)
    browser = TopicBrowser(factory, "browse", max_size=100)
    assert browser.partitions() == [Partition(b, p) for b in (1, 2) for p in range(2)]
    browsed = list(browser)
    assert sorted(m.id for m in browsed) == sorted(r.msg_id for r in sent)
    keys = [(m.partition, m.offset) for m in browsed]
    assert keys == sorted(keys)
    assert {m.partition.broker_id for m in browsed} == {1, 2}


@pytest.mark.parametrize("policy", ["earliest", "latest"])
def test_an_offset_beyond_the_end_resets_to_the_start_or_the_end(factory, admin, cluster, policy):
    old = {r.msg_id for r in produce(factory, policy, 8)}
    group = f"g-{policy}"
    commit_offsets(admin, cluster, group, policy, 10**9)
    collector = Collector()
    consumer_of(factory, policy, group, collector, offset_reset=policy, long_poll_ms=200)
    if policy == "earliest":
        wait_for(lambda: collector.ids() == old, what="every old message again")
        return
    time.sleep(1.5)  # Let the resets happen before producing: nothing old may arrive.
    new = {r.msg_id for r in produce(factory, policy, 6, prefix="new")}
    wait_for(lambda: collector.ids() == new, what="the new messages")
    time.sleep(0.3)
    assert collector.ids() == new


def test_always_from_max_ignores_a_committed_offset(factory, admin, cluster):
    produce(factory, "always", 8)
    commit_offsets(admin, cluster, "g-always", "always", 0)
    collector = Collector()
    consumer = consumer_of(
        factory, "always", "g-always", collector, always_consume_from_max_offset=True
    )
    wait_for(lambda: len(consumer.owned_partitions()) == 4, what="four partitions")
    time.sleep(1.5)  # The tail starts are adopted; committed offset 0 must not be used.
    new = {r.msg_id for r in produce(factory, "always", 6, prefix="new")}
    wait_for(lambda: collector.ids() == new, what="the new messages")
    time.sleep(0.3)
    assert collector.ids() == new


def test_a_broadcast_consumer_keeps_its_offsets_in_a_local_file(factory, admin, cluster, tmp_path):
    sent = {r.msg_id for r in produce(factory, "bcast", 10)}
    path = tmp_path / "offsets.json"
    config = ConsumerConfig("g-bcast", zk_sync_s=0.5, commit_offset_period_ms=200)
    consumer = create_broadcast_consumer(factory, config, str(path), host="10.1.2.3")
    assert consumer.config.group == broadcast_group("g-bcast", "10.1.2.3") == "g-bcast-10-1-2-3"
    collector = Collector()
    consumer.subscribe("bcast", 64 * 1024, collector)
    consumer.complete_subscribe()
    wait_for(lambda: collector.ids() == sent, what="every message")
    consumer.shutdown()
    stored = json.loads(path.read_text())["g-bcast-10-1-2-3"]
    last = {str(m.partition): m.offset + 20 + len(m.data) for m in collector.messages}
    found = {f"{e['partition']['brokerId']}-{e['partition']['partition']}": e for e in stored}
    assert {p: e["offset"] for p, e in found.items()} == last
    assert not admin.exists(f"{cluster}/consumers/g-bcast-10-1-2-3/offsets")
    again = create_broadcast_consumer(factory, config, str(path), host="10.1.2.3")
    more = Collector()
    again.subscribe("bcast", 64 * 1024, more)
    again.complete_subscribe()
    new = {r.msg_id for r in produce(factory, "bcast", 4, prefix="new")}
    wait_for(lambda: more.ids() == new, what="only the new messages")
    again.shutdown()


def test_the_factory_offers_the_browser_and_the_pull_api(factory):
    sent = produce(factory, "factory-api", 6)
    browsed = list(factory.create_topic_browser("factory-api"))
    assert sorted(m.id for m in browsed) == sorted(r.msg_id for r in sent)
    first = sent[0]
    pulled = factory.get("factory-api", first.partition, first.offset)
    assert next(iter(pulled)).id == first.msg_id


def test_a_consumer_offers_the_pull_api_too(factory):
    sent = produce(factory, "factory-api", 3)
    consumer = factory.create_consumer(ConsumerConfig(group="g-pull-api"))
    try:
        first = sent[0]
        pulled = consumer.get("factory-api", first.partition, first.offset)
        assert next(iter(pulled)).id == first.msg_id
    finally:
        consumer.shutdown()


def test_shutting_down_a_factory_with_a_consumer_leaves_no_thread_behind(zookeeper, cluster):
    """Goal: a clean shutdown joins every client thread (fetch, commit, rebalance, recover,
    connection readers and writers, kazoo). Method: note the threads before, consume, shut
    down, and wait (bounded) until only the threads from before remain."""
    before = set(threading.enumerate())
    factory = MetaMessageSessionFactory(zk_config(zookeeper, cluster))
    received = threading.Event()
    consumer = factory.create_consumer(ConsumerConfig(group="g-threads"))
    consumer.subscribe("factory-api", 1 << 20, lambda message: received.set())
    consumer.complete_subscribe()
    produce(factory, "factory-api", 2)
    assert received.wait(30)
    factory.shutdown()
    deadline = time.monotonic() + 15
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(t.name for t in set(threading.enumerate()) - before) == []
