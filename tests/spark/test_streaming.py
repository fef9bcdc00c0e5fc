"""Structured Streaming with the ``metaq`` source and sink: real brokers, ZooKeeper, Spark.

One broker (id 1) serves every topic of the module under a fresh ZooKeeper root; each test
has its own topics. Sinks are ``foreachBatch`` functions that keep each batch's rows by
batch id, so a batch Spark replays after a restart replaces its first run (an idempotent
sink, as the exactly-once contract asks). Every wait is bounded and every query stopped.
"""

from __future__ import annotations

import threading

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from meta.client import MetaMessageSessionFactory
from meta.client.cluster import parse_offset
from meta.protocol.message import HEADER_SIZE
from meta.spark.planning import read_cluster
from meta.spark.streaming import READ_LIMITS_SUPPORTED
from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import broker_cluster, produce, wait_for, zk_config

pytestmark = pytest.mark.integration

TOPICS = {
    name: {"numPartitions": 2}
    for name in (
        "stream-once",
        "stream-group",
        "stream-src",
        "stream-dst",
        "stream-grow",
        "stream-all-now",
        "stream-no-limit",
        "stream-running",
    )
}
QUERY_WAIT_S = 90.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    with broker_cluster(tmp_path_factory, zookeeper, TOPICS, broker_ids=(1,)) as (root, _):
        yield root


class BatchSink:
    """``foreachBatch`` target: batch id -> rows; a replayed batch replaces its first run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: dict[int, list] = {}

    def __call__(self, frame, batch_id: int) -> None:
        rows = frame.select("msg_id", "partition", "offset", "value").collect()
        with self.lock:
            self.batches[batch_id] = rows

    def rows(self) -> list:
        with self.lock:
            return [row for rows in self.batches.values() for row in rows]

    def ids(self) -> list[int]:
        return [row.msg_id for row in self.rows()]


def stream(spark, zookeeper, root, topic, **options):
    reader = spark.readStream.format("metaq").option("zk.connect", zookeeper.connect_string)
    reader = reader.option("zk.root", root).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def start(frame, sink, checkpoint, available_now=False):
    writer = frame.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    writer = writer.trigger(availableNow=True) if available_now else writer
    return writer.start()


def wait_for_ids(query, sink, expected: set[int]) -> None:
    def arrived():
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        return expected <= set(sink.ids())

    wait_for(arrived, QUERY_WAIT_S, "the stream to deliver the messages")


def finish(query) -> None:
    """Wait for an AvailableNow query to end by itself, then check it did not fail."""
    try:
        assert query.awaitTermination(QUERY_WAIT_S), "the AvailableNow query did not end"
    finally:
        query.stop()
    assert query.exception() is None


def test_stream_picks_up_new_messages_and_restarts_exactly_once(
    spark, zookeeper, cluster, tmp_path
):
    """Goal: a checkpointed query reads every message once across a stop and a restart.

    Method: produce, start, produce while it runs, stop; produce while it is down; restart
    from the checkpoint; the sink holds each message exactly once.
    """
    root, topic = cluster, "stream-once"
    sink, checkpoint = BatchSink(), tmp_path / "checkpoint"
    with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
        sent = produce(factory, topic, 10, "before-")
        query = start(stream(spark, zookeeper, root, topic), sink, checkpoint)
        try:
            wait_for_ids(query, sink, sent)
            sent |= produce(factory, topic, 10, "during-")
            wait_for_ids(query, sink, sent)
        finally:
            query.stop()
        sent |= produce(factory, topic, 10, "stopped-")
    query = start(stream(spark, zookeeper, root, topic), sink, checkpoint)
    try:
        wait_for_ids(query, sink, sent)
    finally:
        query.stop()
    assert sorted(sink.ids()) == sorted(sent)


@pytest.mark.skipif(not READ_LIMITS_SUPPORTED, reason="read limits need PySpark 4.2+")
def test_available_now_honours_max_bytes_and_commits_to_the_group(
    spark, zookeeper, cluster, tmp_path
):
    """Goal: AvailableNow reads the backlog in byte-limited batches, then stops, and
    ``commitToGroup`` leaves the group's offsets at each partition's end.

    Method: 40 messages of 100 bytes; a 1000-byte limit; compare the batches' bytes and the
    ZooKeeper offset nodes with the ends computed from the send results.
    """
    root, topic, group = cluster, "stream-group", "spark-progress"
    results = _produce(zookeeper, root, topic, 40)
    sink = BatchSink()
    frame = stream(spark, zookeeper, root, topic, maxBytesPerTrigger="1000", commitToGroup=group)
    finish(start(frame, sink, tmp_path / "checkpoint", available_now=True))
    assert sorted(sink.ids()) == sorted(result.msg_id for result in results)
    batch_bytes = [sum(HEADER_SIZE + len(r.value) for r in rows) for rows in sink.batches.values()]
    assert len(batch_bytes) >= 4
    assert max(batch_bytes) <= 1000 + HEADER_SIZE + 100
    ends: dict[str, int] = {}
    for result in results:
        end = result.offset + HEADER_SIZE + 100
        ends[str(result.partition)] = max(ends.get(str(result.partition), 0), end)
    assert _group_offsets(zookeeper, root, group, topic) == ends


def test_available_now_reads_the_backlog_and_commits_to_the_group(
    spark, zookeeper, cluster, tmp_path
):
    """Goal: ``Trigger.AvailableNow`` without a read limit reads everything and stops, on
    every supported PySpark (4.0/4.1 run it through Spark's generic wrapper).

    Method: 30 messages; an AvailableNow query with ``commitToGroup``; it must end by
    itself with every message once and (PySpark 4.2+, see ``MetaQStreamReader.commit``) the
    group's offsets at each partition's end.
    """
    root, topic, group = cluster, "stream-all-now", "spark-all-now"
    results = _produce(zookeeper, root, topic, 30)
    sink = BatchSink()
    frame = stream(spark, zookeeper, root, topic, commitToGroup=group)
    finish(start(frame, sink, tmp_path / "checkpoint", available_now=True))
    assert sorted(sink.ids()) == sorted(result.msg_id for result in results)
    if READ_LIMITS_SUPPORTED:
        assert _group_offsets(zookeeper, root, group, topic) == _ends(results)


def test_a_running_query_commits_its_progress_to_the_group(spark, zookeeper, cluster, tmp_path):
    """Goal: under a running trigger ``commitToGroup`` reaches each partition's end soon
    after the last batch, on every supported PySpark (before 4.2 through ``latestOffset()``).

    Method: produce, start a query, wait for the rows, then (bounded) for the group's offset
    nodes to equal the ends computed from the send results.
    """
    root, topic, group = cluster, "stream-running", "spark-running"
    results = _produce(zookeeper, root, topic, 20)
    sink = BatchSink()
    frame = stream(spark, zookeeper, root, topic, commitToGroup=group)
    query = start(frame, sink, tmp_path / "checkpoint")
    try:
        wait_for_ids(query, sink, {result.msg_id for result in results})
        ends = _ends(results)

        def committed() -> bool:
            try:
                return _group_offsets(zookeeper, root, group, topic) == ends
            except NoNodeError:
                return False

        wait_for(committed, QUERY_WAIT_S, "the group's offsets to reach the ends")
    finally:
        query.stop()


def _ends(results) -> dict[str, int]:
    """Each partition's end after the sends of ``results`` (messages of 100 bytes)."""
    ends: dict[str, int] = {}
    for result in results:
        end = result.offset + HEADER_SIZE + 100
        ends[str(result.partition)] = max(ends.get(str(result.partition), 0), end)
    return ends


@pytest.mark.skipif(READ_LIMITS_SUPPORTED, reason="this PySpark supports read limits")
def test_max_bytes_per_trigger_is_refused_clearly_without_read_limits(
    spark, zookeeper, cluster, tmp_path
):
    """Goal: on PySpark 4.0/4.1 ``maxBytesPerTrigger`` fails the query with a clear error
    (naming the option and the version) instead of being ignored."""
    root = cluster
    frame = stream(spark, zookeeper, root, "stream-no-limit", maxBytesPerTrigger="1000")
    query = start(frame, BatchSink(), tmp_path / "checkpoint")
    try:
        with pytest.raises(Exception) as caught:  # noqa: B017 - Spark wraps the Python error.
            query.awaitTermination(QUERY_WAIT_S)
    finally:
        query.stop()
    assert "maxBytesPerTrigger needs PySpark 4.2 or later" in str(caught.value)


def test_stream_writer_round_trip(spark, zookeeper, cluster, tmp_path):
    root = cluster
    with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
        produce(factory, "stream-src", 25, "copy-")
    frame = stream(spark, zookeeper, root, "stream-src").selectExpr("value", "partition AS key")
    query = (
        frame.writeStream.format("metaq")
        .option("zk.connect", zookeeper.connect_string)
        .option("zk.root", root)
        .option("topic", "stream-dst")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    finish(query)
    back = (
        spark.read.format("metaq")
        .option("zk.connect", zookeeper.connect_string)
        .option("zk.root", root)
        .option("topic", "stream-dst")
        .load()
    )
    assert sorted(bytes(row.value) for row in back.collect()) == sorted(
        b"copy-%d" % n for n in range(25)
    )


def test_partitions_of_a_new_broker_are_picked_up(spark, zookeeper, cluster, tmp_path):
    """Goal: partitions that appear while a query runs are read from their first message.

    Method: a query on a topic broker 1 serves; broker 2 starts serving the same topic;
    messages produced afterwards (round robin over both brokers) all reach the sink.
    """
    root, topic = cluster, "stream-grow"
    sink = BatchSink()
    query = start(stream(spark, zookeeper, root, topic), sink, tmp_path / "checkpoint")
    second = BrokerProcess(
        tmp_path / "broker2",
        system={"brokerId": 2},
        topics={topic: {"numPartitions": 2}},
        zk_connect=zookeeper.connect_string,
        zk={"zk.zkRoot": root, "zk.zkSessionTimeoutMs": 4000},
    )
    try:
        wait_for(lambda: query.lastProgress is not None, QUERY_WAIT_S, "a first trigger")
        second.start()
        wait_for(lambda: len(_served(zookeeper, root, topic)) == 4, 30, "broker 2's partitions")
        with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
            sent = produce(factory, topic, 12, "grow-")
        wait_for_ids(query, sink, sent)
    finally:
        query.stop()
        second.stop()
    assert {row.partition for row in sink.rows()} >= {"2-0", "2-1"}
    assert sorted(sink.ids()) == sorted(sent)


def _produce(zookeeper, root: str, topic: str, count: int) -> list:
    """Send ``count`` numbered 100-byte messages to ``topic``; all must succeed."""
    with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
        producer = factory.create_producer()
        producer.publish(topic)
        results = [producer.send_message(_message(topic, n)) for n in range(count)]
    assert all(result.success for result in results)
    return results


def _message(topic: str, number: int):
    from meta.client import Message

    return Message(topic, b"%03d" % number + b"v" * 97)


def _served(zookeeper, root: str, topic: str) -> list:
    from meta.spark.options import parse_read_options

    options = parse_read_options(
        {"zk.connect": zookeeper.connect_string, "zk.root": root, "topic": topic}
    )
    return read_cluster(options)[0]


def _group_offsets(zookeeper, root: str, group: str, topic: str) -> dict[str, int]:
    admin = KazooClient(hosts=zookeeper.connect_string, timeout=10)
    admin.start(timeout=10)
    try:
        path = f"{root}/consumers/{group}/offsets/{topic}"
        found = {}
        for name in admin.get_children(path):
            msg_id, offset = parse_offset(admin.get(f"{path}/{name}")[0].decode())
            assert msg_id == -1
            found[name] = offset
        return found
    finally:
        admin.stop()
        admin.close()
