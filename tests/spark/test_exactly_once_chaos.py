"""Exactly-once under chaos: streaming copies of 50,000 numbered messages, broken on purpose.

Goal: with ``transactional=true`` the sink holds every number exactly once although the
copy's Python workers, its driver (twice) and a broker are killed or restarted while it
runs; with the option off, the same chaos leaves duplicates (so the chaos is real).

Method: two brokers under a fresh ZooKeeper root serve the source (2 partitions each) and
the sinks; the source is produced once. Both copies, one with the option and one without,
run side by side in one driver (``eos_chaos_job.py``, a process of its own with a real local
Spark) under ``tests/spark/stream_chaos.py``'s ``ChaosRun``, once for the module: every
driver start and kill, broker restart and worker kill meets each copy that still runs
(every random choice is seeded). The first driver kill is timed on one of the first batches
of the at-least-once copy; the broker restart and the second driver kill are timed on
batches of the transactional copy, as a run of that copy alone would time them. Each test
then reads every partition of its sink raw, with ``get`` through the client's
``TopicBrowser`` (not through Spark), and counts each number.
"""

from __future__ import annotations

import collections
from collections import deque

import pytest

from meta.client import Message, MetaMessageSessionFactory
from meta.client.consume.pull import TopicBrowser, offset_of
from meta.protocol.commands import LONG_MAX
from meta.spark.transactional_write import FORMAT_ID, unique_qualifier
from tests.integration.client_helpers import broker_cluster, zk_config
from tests.spark.stream_chaos import TRANSACTIONAL_ID, ChaosCluster, ChaosReport, ChaosRun

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MESSAGES = 50_000
SOURCE = "chaos-source"
SINKS = {True: "chaos-exactly-once", False: "chaos-at-least-once"}
TOPICS = {name: {"numPartitions": 2} for name in (SOURCE, *SINKS.values())}
BATCHES = 4  # the source is copied in about this many micro-batches, when nothing breaks
IN_FLIGHT_MAX = 2000
SEED = 20261126


def produce_numbers(factory: MetaMessageSessionFactory) -> int:
    """Send ``0 .. MESSAGES-1`` to the source; return the bytes the source then holds."""
    producer = factory.create_producer()
    producer.publish(SOURCE)
    in_flight = deque()
    for number in range(MESSAGES):
        in_flight.append(producer.send_message_async(Message(SOURCE, b"%d" % number)))
        if len(in_flight) >= IN_FLIGHT_MAX:
            in_flight.popleft().result(30).raise_for_status()
    while in_flight:
        in_flight.popleft().result(30).raise_for_status()
    partitions = factory.get_partitions_for_topic(SOURCE)
    assert len(partitions) == 4
    return sum(offset_of(factory, SOURCE, partition, LONG_MAX) for partition in partitions)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    with broker_cluster(tmp_path_factory, zookeeper, TOPICS) as (root, brokers):
        with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
            source_bytes = produce_numbers(factory)
        yield ChaosCluster(
            zookeeper.connect_string, root, brokers, SOURCE, source_bytes, source_bytes // BATCHES
        )


@pytest.fixture(scope="module")
def report(cluster, tmp_path_factory) -> ChaosReport:
    """Both copies under one chaos run: the at-least-once copy first, then the other."""
    sinks = {SINKS[False]: False, SINKS[True]: True}
    return ChaosRun(cluster, sinks, SEED, tmp_path_factory.mktemp("chaos")).run()


def sink_counts(zookeeper, root: str, sink: str) -> collections.Counter:
    """How many times each number is in ``sink``, read raw from every partition."""
    with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
        browser = TopicBrowser(factory, sink)
        assert len(browser.partitions()) == 4
        return collections.Counter(int(message.data) for message in browser)


def prepared_branches(zookeeper, root: str) -> list:
    """The prepared branches of the copy's write that the brokers still hold."""
    with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
        producer = factory.create_xa_producer()
        producer.set_unique_qualifier(unique_qualifier(TRANSACTIONAL_ID))
        producer.publish(SINKS[True])
        return [x for x in producer.get_xa_resource().recover() if x.format_id == FORMAT_ID]


def describe(report: ChaosReport, counts: collections.Counter) -> str:
    missing = MESSAGES - len(set(counts) & set(range(MESSAGES)))
    duplicated = sum(count - 1 for count in counts.values() if count > 1)
    return (
        f"{missing} missing, {duplicated} extra copies; driver kills {report.driver_kills}, "
        f"{report.worker_kills} worker kills, {report.broker_restarts} broker restarts, "
        f"{report.query_failures()} query failures; timeline:\n" + "\n".join(report.timeline)
    )


def test_a_transactional_stream_copies_every_message_once_through_chaos(cluster, zookeeper, report):
    counts = sink_counts(zookeeper, cluster.root, SINKS[True])
    summary = describe(report, counts)
    print(summary)
    assert len(report.driver_kills) == 2, summary
    assert report.worker_kills >= 3, summary
    assert report.broker_restarts == 1, summary
    assert sorted(counts) == list(range(MESSAGES)), summary
    assert set(counts.values()) == {1}, summary
    assert prepared_branches(zookeeper, cluster.root) == []


def test_the_same_chaos_duplicates_messages_without_the_option(cluster, zookeeper, report):
    counts = sink_counts(zookeeper, cluster.root, SINKS[False])
    summary = describe(report, counts)
    print(summary)
    assert report.kills_before_commit[SINKS[False]] >= 1, summary  # its rows in, uncommitted
    assert report.worker_kills >= 3, summary
    assert sorted(counts) == list(range(MESSAGES)), summary  # at least once: no gap
    assert max(counts.values()) > 1, summary
