"""The ``metaq`` source and sink on a real Spark standalone cluster.

Goal: batch reads, Parquet writes, an ``AvailableNow`` stream and both writers work when the
executors are separate processes launched by a Spark worker, sharing nothing with the
driver but the plan (which carries each partition's broker address, read from ZooKeeper)
and the options (the writers find the masters in ZooKeeper themselves).

Method: two brokers under a fresh ZooKeeper root; a master and a worker started from
PySpark's bundled launcher (``tests/spark/standalone.py``); ``tests/spark/cluster_job.py``
submitted with ``spark-submit``. The produced messages are then compared, message for
message, with the rows the job collected, with its Parquet files, and with what its stream
and batch writers stored (read back with the client's ``TopicBrowser``, not with Spark).
Bounded: the cluster starts within ``START_TIMEOUT_S`` and the job ends within
``JOB_TIMEOUT_S``; everything started is stopped.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pyarrow.parquet as parquet
import pytest

from meta.client import Message, MetaMessageSessionFactory
from meta.client.consume.pull import TopicBrowser
from tests.integration.client_helpers import broker_cluster, zk_config
from tests.spark.standalone import SparkStandalone

pytestmark = pytest.mark.integration

JOB = Path(__file__).with_name("cluster_job.py")
JOB_TIMEOUT_S = 300.0
TOPIC = "cluster-in"
STREAM_TOPIC = "cluster-stream"
BATCH_TOPIC = "cluster-batch"
TOPICS = {name: {"numPartitions": 2} for name in (TOPIC, STREAM_TOPIC, BATCH_TOPIC)}
MESSAGE_COUNT = 120


def produce(factory) -> dict[int, dict]:
    """``MESSAGE_COUNT`` messages, two in three with an attribute; msg_id -> expected row."""
    producer = factory.create_producer()
    producer.publish(TOPIC)
    sent = {}
    for number in range(MESSAGE_COUNT):
        attribute = f"attr-{number}" if number % 3 else None
        value = f"value-{number}-" + "x" * (number % 17)
        result = producer.send_message(Message(TOPIC, value.encode(), attribute))
        assert result.success, result.error_message
        sent[result.msg_id] = {
            "msg_id": result.msg_id,
            "partition": str(result.partition),
            "offset": result.offset,
            "value": value,
            "attribute": attribute,
        }
    return sent


def stored(factory, topic: str) -> collections.Counter:
    """(value, attribute) of every message of ``topic``, counted."""
    return collections.Counter(
        (message.data.decode("utf-8"), message.attribute)
        for message in TopicBrowser(factory, topic)
    )


def test_standalone_cluster_reads_and_writes_message_for_message(
    tmp_path_factory, zookeeper, tmp_path
):
    with broker_cluster(tmp_path_factory, zookeeper, TOPICS) as (root, _brokers):
        with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
            sent = produce(factory)
            with SparkStandalone(tmp_path / "spark") as cluster:
                done = cluster.submit(
                    JOB,
                    zookeeper.connect_string,
                    root,
                    TOPIC,
                    STREAM_TOPIC,
                    BATCH_TOPIC,
                    str(tmp_path),
                    timeout_s=JOB_TIMEOUT_S,
                )
                assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
                executor_logs = list((tmp_path / "spark" / "work").glob("app-*/*/stderr"))
            expected_pairs = collections.Counter(
                (row["value"], row["attribute"]) for row in sent.values()
            )
            stream_pairs = stored(factory, STREAM_TOPIC)
            batch_pairs = stored(factory, BATCH_TOPIC)

    assert executor_logs, "no executor ran on the worker"
    collected = json.loads((tmp_path / "batch.json").read_text())
    assert {row["msg_id"]: row for row in collected} == sent
    assert len(collected) == len(sent)

    table = parquet.read_table(tmp_path / "parquet").to_pylist()
    assert len(table) == len(sent)
    for row in table:
        expected = sent[row["msg_id"]]
        assert (row["partition"], row["offset"]) == (expected["partition"], expected["offset"])
        assert (row["value"].decode("utf-8"), row["attribute"]) == (
            expected["value"],
            expected["attribute"],
        )

    assert stream_pairs == expected_pairs
    assert batch_pairs == expected_pairs
