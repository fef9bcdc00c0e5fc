"""Batch reads and writes of the ``metaq`` source against real brokers and a real ZooKeeper.

One cluster (2 brokers x 3 partitions under a fresh ZooKeeper root) serves the whole module;
messages are produced once, with and without attributes, and every test reads them back
through the module's ``spark`` session (``tests/spark/conftest.py``).
"""

from __future__ import annotations

import json
import time

import pytest
from kazoo.client import KazooClient

from meta.client import Message, MetaMessageSessionFactory
from meta.spark.schema import ARROW_SCHEMA, SPARK_SCHEMA
from tests.integration.broker_process import free_port
from tests.integration.client_helpers import broker_cluster, zk_config

pytestmark = pytest.mark.integration

TOPIC = "spark-read"
ROUND_TRIP_TOPIC = "spark-write"
TOPICS = {TOPIC: {"numPartitions": 3}, ROUND_TRIP_TOPIC: {"numPartitions": 3}}
MESSAGE_COUNT = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    """Yields ``(root, sent)``: ``sent`` maps msg_id -> (partition text, offset, value, attr)."""
    with broker_cluster(tmp_path_factory, zookeeper, TOPICS) as (root, _brokers):
        with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
            producer = factory.create_producer()
            producer.publish(TOPIC)
            sent = {}
            for number in range(MESSAGE_COUNT):
                attribute = f"attr-{number}" if number % 3 else None
                message = Message(TOPIC, f"value-{number}".encode(), attribute)
                result = producer.send_message(message)
                assert result.success, result.error_message
                sent[result.msg_id] = (
                    str(result.partition),
                    result.offset,
                    message.data,
                    attribute,
                )
        yield root, sent


def reader(spark, zookeeper, root, **options):
    frame = spark.read.format("metaq").option("zk.connect", zookeeper.connect_string)
    frame = frame.option("zk.root", root)
    for name, value in options.items():
        frame = frame.option(name, value)
    return frame.load()


def rows_by_id(frame) -> dict:
    rows = frame.collect()
    by_id = {row.msg_id: row for row in rows}
    assert len(by_id) == len(rows), "a message was read twice"
    return by_id


def test_arrow_schema_matches_what_pyspark_derives():
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    # Newer PySpark takes the time zone; 4.0 has no such parameter and converts to UTC.
    timezone = (
        {"timezone": "UTC"} if "timezone" in inspect.signature(to_arrow_schema).parameters else {}
    )
    assert to_arrow_schema(SPARK_SCHEMA, **timezone).equals(ARROW_SCHEMA)


def test_batch_read_returns_exactly_the_produced_messages(spark, zookeeper, cluster):
    root, sent = cluster
    frame = reader(spark, zookeeper, root, topic=TOPIC)
    assert frame.schema == SPARK_SCHEMA
    by_id = rows_by_id(frame)
    assert set(by_id) == set(sent)
    for msg_id, (partition, offset, value, attribute) in sent.items():
        row = by_id[msg_id]
        assert (row.topic, row.partition, row.offset) == (TOPIC, partition, offset)
        assert (bytes(row.value), row.attribute, row.flag) == (
            value,
            attribute,
            int(bool(attribute)),
        )
        assert f"{row.broker_id}-{row.partition_id}" == partition
        assert abs(row.timestamp.timestamp() - time.time()) < 600


def test_six_broker_partitions_are_read(spark, zookeeper, cluster):
    root, _sent = cluster
    frame = reader(spark, zookeeper, root, topics=f"{TOPIC}, {ROUND_TRIP_TOPIC}")
    partitions = {row.partition for row in frame.select("partition").distinct().collect()}
    assert partitions == {f"{b}-{p}" for b in (1, 2) for p in range(3)}


def test_latest_starting_offsets_read_nothing(spark, zookeeper, cluster):
    root, _sent = cluster
    assert reader(spark, zookeeper, root, topic=TOPIC, startingOffsets="latest").count() == 0


def test_earliest_to_latest_reads_everything(spark, zookeeper, cluster):
    root, sent = cluster
    frame = reader(
        spark, zookeeper, root, topic=TOPIC, startingOffsets="earliest", endingOffsets="latest"
    )
    assert frame.count() == len(sent)


def test_json_offsets_bound_the_read(spark, zookeeper, cluster):
    """Start one partition at its third message and end another after its second."""
    root, sent = cluster
    per_partition: dict[str, list[tuple[int, int]]] = {}
    for msg_id, (partition, offset, _value, _attribute) in sent.items():
        per_partition.setdefault(partition, []).append((offset, msg_id))
    for entries in per_partition.values():
        entries.sort()
    starting = {TOPIC: {"1-0": per_partition["1-0"][2][0]}}
    ending = {TOPIC: {"2-1": per_partition["2-1"][2][0], "1-2": -2}}
    frame = reader(
        spark,
        zookeeper,
        root,
        topic=TOPIC,
        startingOffsets=json.dumps(starting),
        endingOffsets=json.dumps(ending),
    )
    expected = set(sent)
    expected -= {msg_id for _offset, msg_id in per_partition["1-0"][:2]}
    expected -= {msg_id for _offset, msg_id in per_partition["2-1"][2:]}
    expected -= {msg_id for _offset, msg_id in per_partition["1-2"]}
    assert set(rows_by_id(frame)) == expected


def test_max_bytes_per_partition_splits_without_loss_or_duplicates(spark, zookeeper, cluster):
    root, sent = cluster
    frame = reader(spark, zookeeper, root, topic=TOPIC, maxBytesPerPartition="100")
    assert frame.rdd.getNumPartitions() > 6 * 3
    assert set(rows_by_id(frame)) == set(sent)


def test_group_starts_from_committed_offsets(spark, zookeeper, cluster):
    root, sent = cluster
    first_of_1_1 = min((o, i) for i, (p, o, _v, _a) in sent.items() if p == "1-1")
    second_of_1_1 = sorted((o, i) for i, (p, o, _v, _a) in sent.items() if p == "1-1")[1]
    path = f"{root}/consumers/spark-group/offsets/{TOPIC}/1-1"
    admin = KazooClient(hosts=zookeeper.connect_string, timeout=10)
    admin.start(timeout=10)
    try:
        admin.create(path, f"{first_of_1_1[1]}-{second_of_1_1[0]}".encode(), makepath=True)
    finally:
        admin.stop()
        admin.close()
    frame = reader(spark, zookeeper, root, topic=TOPIC, group="spark-group")
    assert set(rows_by_id(frame)) == set(sent) - {first_of_1_1[1]}


def test_topic_pattern_selects_matching_topics(spark, zookeeper, cluster):
    root, sent = cluster
    frame = reader(spark, zookeeper, root, topics="spark-re.*d")
    assert frame.count() == len(sent)


def test_writer_round_trip_reads_back_identically(spark, zookeeper, cluster):
    root, _sent = cluster
    rows = [(f"line {n}".encode(), f"a{n}" if n % 2 else None, f"k{n % 4}") for n in range(40)]
    frame = spark.createDataFrame(rows, "value binary, attribute string, key string")
    frame.write.format("metaq").option("zk.connect", zookeeper.connect_string).option(
        "zk.root", root
    ).option("topic", ROUND_TRIP_TOPIC).mode("append").save()
    back = reader(spark, zookeeper, root, topic=ROUND_TRIP_TOPIC).collect()
    assert sorted((bytes(r.value), r.attribute) for r in back) == sorted(
        (value, attribute) for value, attribute, _key in rows
    )
    partitions_of_key: dict[str, set[str]] = {}
    values = {value: key for value, _attribute, key in rows}
    for row in back:
        partitions_of_key.setdefault(values[bytes(row.value)], set()).add(row.partition)
    assert all(len(partitions) == 1 for partitions in partitions_of_key.values())


def error_text(action) -> str:
    with pytest.raises(Exception) as caught:  # noqa: B017 - Spark wraps the Python error.
        action()
    return str(caught.value)


def test_unknown_topic_is_a_clear_error(spark, zookeeper, cluster):
    root, _sent = cluster
    text = error_text(lambda: reader(spark, zookeeper, root, topic="no-such").collect())
    assert "unknown topic no-such" in text


def test_malformed_offsets_json_is_a_clear_error(spark, zookeeper, cluster):
    root, _sent = cluster
    text = error_text(
        lambda: reader(spark, zookeeper, root, topic=TOPIC, startingOffsets="{oops").collect()
    )
    assert "malformed startingOffsets" in text


def test_missing_zk_connect_is_a_clear_error(spark):
    text = error_text(lambda: spark.read.format("metaq").option("topic", TOPIC).load().collect())
    assert "zk.connect is required" in text


def test_unreachable_zookeeper_fails_within_the_timeout(spark):
    connect = f"127.0.0.1:{free_port()}"
    began = time.monotonic()
    text = error_text(
        lambda: (
            spark.read.format("metaq")
            .option("zk.connect", connect)
            .option("zk.connectionTimeoutMs", "1500")
            .option("topic", TOPIC)
            .load()
            .collect()
        )
    )
    assert f"cannot connect to ZooKeeper at {connect}" in text
    assert time.monotonic() - began < 30


def test_writer_refuses_a_dataframe_without_value(spark, zookeeper, cluster):
    root, _sent = cluster
    frame = spark.createDataFrame([("x",)], "body string")
    text = error_text(
        lambda: (
            frame.write.format("metaq")
            .option("zk.connect", zookeeper.connect_string)
            .option("zk.root", root)
            .option("topic", ROUND_TRIP_TOPIC)
            .mode("append")
            .save()
        )
    )
    assert "needs a value column" in text
