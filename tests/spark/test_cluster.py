"""The ``metaq`` source and sink on a real Spark standalone cluster.

Goal: batch reads, Parquet writes, an ``AvailableNow`` stream and both writers work when the
executors are separate processes launched by Spark workers, sharing nothing with the
driver but the plan (which carries each partition's broker address, read from ZooKeeper)
and the options (the writers find the masters in ZooKeeper themselves); and a
``transactional=true`` write lands exactly once when Spark's speculation runs a second
attempt of a slow task on the other host.

Method: three brokers under a fresh ZooKeeper root; a master and two workers, on
127.0.0.1 and 127.0.0.2 (Spark runs a speculative copy only on another host), started once
for the module from PySpark's bundled launcher (``tests/spark/standalone.py``); each test
submits its application (``tests/spark/cluster_job.py``, ``tests/spark/eos_cluster_job.py``)
with ``spark-submit``. What the applications wrote is read back raw, partition by partition,
with the client's ``TopicBrowser``, not with Spark. Bounded: the cluster starts within
``START_TIMEOUT_S`` and each job ends within ``JOB_TIMEOUT_S``; everything started is stopped.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as parquet
import pytest

from meta.admin.client import AdminClient
from meta.admin.reads import stats_lines
from meta.client import Message, MetaMessageSessionFactory
from meta.client.consume.pull import TopicBrowser
from meta.client.zk.spark_commits import SparkCommitRecord
from meta.spark.transactional_write import FORMAT_ID, global_id, unique_qualifier
from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import broker_cluster, zk_config
from tests.spark import eos_cluster_job
from tests.spark.standalone import SparkStandalone

pytestmark = pytest.mark.integration

JOB = Path(__file__).with_name("cluster_job.py")
EOS_JOB = Path(__file__).with_name("eos_cluster_job.py")
JOB_TIMEOUT_S = 480.0
TOPIC = "cluster-in"
STREAM_TOPIC = "cluster-stream"
BATCH_TOPIC = "cluster-batch"
EOS_TOPIC = "cluster-eos"
TOPICS = {name: {"numPartitions": 2} for name in (TOPIC, STREAM_TOPIC, BATCH_TOPIC, EOS_TOPIC)}
MESSAGE_COUNT = 120
WORKER_HOSTS = ("127.0.0.1", "127.0.0.2")
SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    # Only the paused attempt runs this long, so no other task is copied by chance.
    "spark.speculation.multiplier": "4",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.minTaskRuntime": "4s",
    "spark.speculation.efficiency.enabled": "false",
}


@dataclass(frozen=True)
class Cluster:
    """The module's brokers (under ``root``) and Spark standalone cluster."""

    root: str
    brokers: list[BrokerProcess]
    spark: SparkStandalone


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper) -> Iterator[Cluster]:
    with broker_cluster(tmp_path_factory, zookeeper, TOPICS, broker_ids=(1, 2, 3)) as (
        root,
        brokers,
    ):
        directory = tmp_path_factory.mktemp("spark")
        with SparkStandalone(directory, cores=1, worker_hosts=WORKER_HOSTS) as spark:
            yield Cluster(root, brokers, spark)


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


def test_standalone_cluster_reads_and_writes_message_for_message(zookeeper, cluster, tmp_path):
    with MetaMessageSessionFactory(zk_config(zookeeper, cluster.root)) as factory:
        sent = produce(factory)
        done = cluster.spark.submit(
            JOB,
            zookeeper.connect_string,
            cluster.root,
            TOPIC,
            STREAM_TOPIC,
            BATCH_TOPIC,
            str(tmp_path),
            timeout_s=JOB_TIMEOUT_S,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
        executor_logs = list((cluster.spark.directory / "work").glob("app-*/*/stderr"))
        expected_pairs = collections.Counter(
            (row["value"], row["attribute"]) for row in sent.values()
        )
        stream_pairs = stored(factory, STREAM_TOPIC)
        batch_pairs = stored(factory, BATCH_TOPIC)

    assert executor_logs, "no executor ran on a worker"
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


def rolled_back(brokers: list[BrokerProcess]) -> int:
    """The ``tx_rollback`` counters of ``brokers``' general stats, summed."""
    total = 0
    for broker in brokers:
        with AdminClient(("127.0.0.1", broker.port)) as client:
            counters = dict(line.split(" ", 1) for line in stats_lines(client, ""))
        total += int(counters["tx_rollback"])
    return total


def prepared_branches(zookeeper, root: str, topic: str, write_id: str) -> list:
    """The branches of ``write_id`` left prepared on the topic's brokers (``recover``)."""
    with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
        producer = factory.create_xa_producer()
        producer.set_unique_qualifier(unique_qualifier(write_id))
        producer.publish(topic)
        return [
            xid
            for xid in producer.get_xa_resource().recover()
            if (xid.format_id, xid.global_transaction_id) == (FORMAT_ID, global_id(write_id))
        ]


def raw_partitions(factory, topic: str) -> dict[str, list[bytes]]:
    """The values of ``topic``'s messages, read raw, by partition (``<brokerId>-<n>``)."""
    browser = TopicBrowser(factory, topic)
    return {
        str(partition): [bytes(message.data) for message in browser.browse(partition)]
        for partition in browser.partitions()
    }


def test_a_speculated_task_of_a_transactional_write_counts_once(zookeeper, cluster, tmp_path):
    """Goal: a task that Spark runs twice (speculation) writes its rows once.

    Method: ``eos_cluster_job.py`` with speculation on: the first attempt of partition 0
    prepares branches on the three brokers, then stalls until Spark's speculative copy on
    the other host has started; the copy wins and the stalled attempt is killed. The
    markers show both attempts ran, and the brokers' rollback counters that the stalled
    attempt's branches were rolled back. Read raw, the topic holds every row once, each
    key's rows in one partition, on all three brokers; no branch of the write is left
    prepared, and its commit record holds batch 0 and no decision.
    """
    markers = tmp_path / "markers"
    markers.mkdir()
    rollbacks_before = rolled_back(cluster.brokers)
    done = cluster.spark.submit(
        EOS_JOB,
        zookeeper.connect_string,
        cluster.root,
        EOS_TOPIC,
        str(markers),
        timeout_s=JOB_TIMEOUT_S,
        **SPECULATION,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    attempts = sorted(path.name for path in markers.iterdir())
    assert {"0-0", "0-1"} <= set(attempts), attempts  # speculation copied partition 0
    assert rolled_back(cluster.brokers) > rollbacks_before, done.stderr[-5000:]
    with MetaMessageSessionFactory(zk_config(zookeeper, cluster.root)) as factory:
        by_partition = raw_partitions(factory, EOS_TOPIC)
    padding = eos_cluster_job.PADDING.encode()
    expected = {f"row-{n}-".encode() + padding: 1 for n in range(eos_cluster_job.ROWS)}
    assert collections.Counter(v for values in by_partition.values() for v in values) == expected
    keys = collections.defaultdict(set)  # key -> the partitions holding its rows
    for name, values in by_partition.items():
        for value in values:
            keys[int(value.split(b"-")[1]) % eos_cluster_job.KEYS].add(name)
    assert all(len(partitions) == 1 for partitions in keys.values()), keys
    filled = {name.split("-")[0] for name, values in by_partition.items() if values}
    assert filled == {str(broker_id) for broker_id in (1, 2, 3)}
    write_id = eos_cluster_job.WRITE_ID
    assert prepared_branches(zookeeper, cluster.root, EOS_TOPIC, write_id) == []
    connect = zookeeper.connect_string
    with SparkCommitRecord(connect, cluster.root, write_id, 10_000, 10_000) as record:
        assert (record.committed_batch(), record.decided_branches()) == (0, [])
