"""The consumer against a real ZooKeeper and real broker processes.

One module cluster: brokers 1 and 2 with 4 partitions each under a ZooKeeper root of their
own. Every test uses its own topic and group, so tests do not see each other's offsets or
owners. Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from meta.client import ConsumerConfig, Message, MetaMessageSessionFactory
from meta.client.cluster import java_string_key, parse_offset
from meta.client.zk.balance import assign
from meta.errors import InvalidGroupError
from tests.integration.client_helpers import (
    Collector,
    broker_cluster,
    consumer_of,
    owners,
    produce,
    wait_for,
    zk_config,
)

TOPICS = {
    name: {"numPartitions": 4}
    for name in ("all", "resume", "group", "poll", "filter", "executor", "big")
}
PARTITIONS = sorted((f"{b}-{p}" for b in (1, 2) for p in range(4)), key=java_string_key)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    with broker_cluster(tmp_path_factory, zookeeper, TOPICS, numPartitions=4) as (root, _brokers):
        yield root


@pytest.fixture
def factories(zookeeper, cluster):
    opened = []

    def make():
        factory = MetaMessageSessionFactory(zk_config(zookeeper, cluster))
        opened.append(factory)
        return factory

    yield make
    for factory in opened:
        factory.shutdown()


def test_an_invalid_group_is_refused_by_the_config():
    with pytest.raises(InvalidGroupError):
        ConsumerConfig("bad group")
    with pytest.raises(InvalidGroupError):
        ConsumerConfig("a.b")


def test_one_consumer_receives_every_message_in_partition_order(factories):
    factory = factories()
    sent = produce(factory, "all", 40)
    collector = Collector()
    consumer_of(factory, "all", "g-all", collector)
    wait_for(lambda: collector.ids() == sent, what="all 40 messages")
    by_partition: dict[str, list[int]] = {}
    for message in collector.messages:
        by_partition.setdefault(str(message.partition), []).append(message.offset)
    assert sorted(by_partition) == sorted(PARTITIONS)
    assert all(offsets == sorted(set(offsets)) for offsets in by_partition.values())


def test_offsets_are_committed_in_java_format_and_a_restart_resumes(factories, admin, cluster):
    """Consume, shut down, compare the offset nodes with the last records, then resume."""
    factory = factories()
    first = produce(factory, "resume", 20)
    collector = Collector()
    consumer = consumer_of(factory, "resume", "g-resume", collector, commit_offset_period_ms=200)
    wait_for(lambda: collector.ids() == first, what="the first 20 messages")
    consumer.shutdown()
    last = {}
    for message in collector.messages:
        last[str(message.partition)] = message
    path = f"{cluster}/consumers/g-resume/offsets/resume"
    assert sorted(admin.get_children(path)) == sorted(last)
    for partition, message in last.items():
        text = admin.get(f"{path}/{partition}")[0].decode()
        assert text == f"{message.id}-{message.offset + 20 + len(message.data)}"
        assert parse_offset(text) == (message.id, message.offset + 20 + len(message.data))
    assert admin.get_children(f"{cluster}/consumers/g-resume/ids") == []
    second = produce(factory, "resume", 10, prefix="again")
    again = Collector()
    consumer_of(factories(), "resume", "g-resume", again)
    wait_for(lambda: again.ids() == second, what="the 10 new messages")
    time.sleep(0.3)  # Nothing old may trickle in after the new ones.
    assert again.ids() == second


def test_a_group_of_three_splits_partitions_and_takes_over_from_a_leaver(factories, admin, cluster):
    """Three consumers get the DEFAULT assignment; one leaves; the rest consume everything."""
    collectors = [Collector() for _ in range(3)]
    consumers = [
        consumer_of(factories(), "group", "g3", collectors[n], consumer_id=f"c{n}")
        for n in range(3)
    ]
    ids = sorted((c.consumer_id for c in consumers), key=java_string_key)
    expected = {p: c for c in ids for p in assign("DEFAULT", c, ids, PARTITIONS)}
    wait_for(lambda: owners(admin, cluster, "g3", "group") == expected, what="DEFAULT owners")
    for consumer in consumers:
        mine = {p for p, owner in expected.items() if owner == consumer.consumer_id}
        assert consumer.owned_partitions() == {("group", p) for p in mine}
    producer_factory = factories()
    sent = produce(producer_factory, "group", 30)
    union = lambda: set().union(*(c.ids() for c in collectors))  # noqa: E731
    wait_for(lambda: union() >= sent, what="the first 30 messages")
    consumers[1].shutdown()
    remaining = sorted((consumers[0].consumer_id, consumers[2].consumer_id), key=java_string_key)
    expected = {p: c for c in remaining for p in assign("DEFAULT", c, remaining, PARTITIONS)}
    wait_for(lambda: owners(admin, cluster, "g3", "group") == expected, what="new owners")
    sent |= produce(producer_factory, "group", 30, prefix="after")
    wait_for(lambda: union() >= sent, what="every message after the leave")


def test_long_polling_delivers_a_new_message_before_the_backoff_would(factories):
    """Park a consumer on empty partitions well past several backoff steps, then send."""
    factory = factories()
    collector = Collector()
    consumer_of(factory, "poll", "g-poll", collector, max_delay_fetch_ms=5000, long_poll_ms=1000)
    time.sleep(2.5)  # Without long polling the backoff would now be near its 5 s maximum.
    producer = factory.create_producer()
    producer.publish("poll")
    sent_at = time.monotonic()
    assert producer.send_message(Message("poll", b"wake up")).success
    wait_for(lambda: collector.messages, timeout_s=5.0, what="the message")
    assert collector.times[0] - sent_at < 3.0


def test_a_message_filter_skips_rejected_messages_and_the_offset_moves_past_them(
    factories, admin, cluster
):
    """Goal: rejected messages never reach the listener but count as consumed (spec §3.6).

    Method: 20 messages, a filter accepting the even-numbered payloads; once the accepted
    ones arrived and offsets are committed, every partition's committed offset is its end.
    """
    factory = factories()
    produce(factory, "filter", 20)
    collector = Collector()
    asked = []

    def even(group, message):
        asked.append(group)
        return int(message.data[1:]) % 2 == 0

    consumer = factory.create_consumer(
        ConsumerConfig("g-filter", zk_sync_s=0.5, commit_offset_period_ms=200)
    )
    consumer.subscribe("filter", 64 * 1024, collector, message_filter=even)
    consumer.complete_subscribe()
    wait_for(lambda: len(collector.messages) == 10, what="the 10 accepted messages")
    assert sorted(int(m.data[1:]) for m in collector.messages) == list(range(0, 20, 2))
    consumer.shutdown()
    assert set(asked) == {"g-filter"} and len(asked) == 20
    committed = {
        name: parse_offset(
            admin.get(f"{cluster}/consumers/g-filter/offsets/filter/{name}")[0].decode()
        )
        for name in admin.get_children(f"{cluster}/consumers/g-filter/offsets/filter")
    }
    record_bytes = [20 + len(b"m%d" % n) for n in range(20)]  # header + payload
    assert sum(offset for _id, offset in committed.values()) == sum(record_bytes)


def test_a_listener_with_an_executor_has_its_batches_run_there(factories):
    factory = factories()
    sent = produce(factory, "executor", 12)
    threads = set()

    class Listener(Collector):
        executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="listener-pool")

        def receive_messages(self, message):
            threads.add(threading.current_thread().name)
            super().receive_messages(message)

    listener = Listener()
    try:
        consumer_of(factory, "executor", "g-executor", listener)
        wait_for(lambda: listener.ids() == sent, what="all 12 messages")
    finally:
        factory.shutdown()
        Listener.executor.shutdown()
    assert threads and all(name.startswith("listener-pool") for name in threads)


def test_a_message_larger_than_the_fetch_size_still_arrives(factories):
    """The fetch size grows to the head message's length, then shrinks back (spec §3.6)."""
    factory = factories()
    producer = factory.create_producer()
    producer.publish("big")
    wait_for(lambda: factory.get_partitions_for_topic("big"), what="topic big registered")
    sizes = [100, 200_000, 100, 300]
    for size in sizes:
        assert producer.send_message(Message("big", b"x" * size)).success
    collector = Collector()
    consumer = factory.create_consumer(ConsumerConfig("g-big", zk_sync_s=0.5))
    consumer.subscribe("big", 4096, collector)
    consumer.complete_subscribe()
    wait_for(lambda: len(collector.messages) == len(sizes), what="all 4 messages")
    assert sorted(len(m.data) for m in collector.messages) == sorted(sizes)
