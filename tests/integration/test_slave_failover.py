"""Async slave, second part (issue 6): lag, config sync, reads from the slave, failover.

Real processes: a master ``BrokerProcess``, a slave (``--slave`` or ``tools/metaServer.sh start
slave``) and a real ZooKeeper under a fresh root. Every wait has a deadline; every process,
client and thread is stopped in a ``finally`` (the fixture stops the brokers, the failover
test also runs ``metaServer.sh stop``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from meta.admin.main import main as admin_main
from meta.client import Message, MetaMessageSessionFactory
from meta.errors import ClientError
from meta.protocol.commands import Data, Get, Put, Stats
from meta.protocol.message import iter_messages
from tests.integration.broker_process import REPO, BrokerProcess
from tests.integration.client_helpers import Collector, consumer_of, wait_for, zk_config
from tests.integration.test_slave import Cluster, produce, slave_script, wait_until_identical
from tests.integration.test_slave import make_cluster as make_slave_cluster

SYSTEM = {"numPartitions": 4, "maxSegmentSize": 64 * 1024, "unflushThreshold": 0}
TOPICS = {"alpha": {"numPartitions": 4}, "beta": {"numPartitions": 2}}


def make_cluster(tmp_path, zookeeper, slave_properties: str, **system: object) -> Cluster:
    """``test_slave.make_cluster`` with this module's sections, ``system`` added to them."""
    return make_slave_cluster(tmp_path, zookeeper, {**SYSTEM, **system}, TOPICS, slave_properties)


@pytest.fixture
def cluster(tmp_path, zookeeper):
    cluster = make_cluster(tmp_path, zookeeper, "slaveId=0\nslaveMaxDelayInMills=200\n")
    try:
        yield cluster
    finally:
        cluster.slave.stop()
        cluster.master.stop()


def stats(broker: BrokerProcess, item: str) -> list[str]:
    with broker.connect() as connection:
        reply = connection.request(Stats(item, connection.next_opaque()))
    assert reply.code == 200, reply
    return reply.body.decode().split("\r\n")[1:-2]


def lag_rows(broker: BrokerProcess) -> dict[tuple[str, int], list[str]]:
    return {(t[0], int(t[2])): t for t in (line.split(" ") for line in stats(broker, "slave"))}


def test_stats_slave_and_meta_admin_slaves_show_the_lag_per_partition(cluster, capsys):
    """Goal: lag in bytes and seconds per partition, through ``stats slave``, ``stats
    json:slave`` and ``meta-admin slaves`` (which reads the JSON item). Method: once the copy
    is identical, every partition must reach lag 0 / 0 s with the master's end equal to the
    slave's; after the master stops, the state says so. The arithmetic itself is unit-tested
    in tests/slave/test_lag.py."""
    cluster.master.start()
    cluster.slave.start()
    produce(cluster.master, 600, seed=11)
    wait_until_identical(cluster)
    ends = {(t[0], int(t[2])): int(t[6]) for t in map(str.split, stats(cluster.master, "offsets"))}

    def caught_up() -> bool:
        rows = lag_rows(cluster.slave)
        return set(rows) == set(ends) and all(
            row[4] == row[6] == str(ends[key]) and row[8] == row[10] == "0" and row[12] == "copying"
            for key, row in rows.items()
        )

    wait_for(caught_up, 15, "lag 0 on every partition")
    zk = ["--zk-connect", cluster_zk(cluster), "--zk-root", cluster.root]
    assert admin_main(["slaves", *zk, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert len(document["slaves"]) == len(ends)
    assert {(r["topic"], r["partition"], r["lag_bytes"]) for r in document["slaves"]} == {
        (topic, partition, 0) for topic, partition in ends
    }
    with cluster.slave.connect() as connection:
        reply = connection.request(Stats("json:slave", connection.next_opaque()))
    rows = json.loads(reply.body)["async_slave"]
    assert {(r["topic"], r["partition"]) for r in rows} == set(ends)  # what meta-admin read
    assert admin_main(["slaves", *zk, "0"]) == 0
    table = capsys.readouterr().out
    assert table.split("\n")[0].split() == [
        "BROKER", "SLAVE", "TOPIC", "PARTITION", "SLAVE_END", "MASTER_END", "LAG_BYTES",
        "LAG_SECONDS", "STATE",
    ]  # fmt: skip
    assert stats(cluster.master, "slave")[:2] == ["slave", "resultCode 1"]  # Java's topic item
    cluster.master.stop()
    wait_for(lambda: {r[12] for r in lag_rows(cluster.slave).values()} == {"no-master"}, 15)


def cluster_zk(cluster: Cluster) -> str:
    text = cluster.master.config_path.read_text()
    return next(line.split("=", 1)[1] for line in text.splitlines() if "zk.zkConnect" in line)


def test_a_topic_added_and_reloaded_on_the_master_reaches_an_autosync_slave(tmp_path, zookeeper):
    """Goal: autoSyncMasterConfig. Method: add a topic to the master's server.ini and reload
    it (SIGHUP); the slave must write it into its own server.ini (keeping its port and data
    path), reload, register it, and copy its data."""
    cluster = make_cluster(
        tmp_path, zookeeper, "slaveId=0\nslaveMaxDelayInMills=200\nautoSyncMasterConfig=true\n"
    )
    try:
        cluster.master.start()
        cluster.slave.start()
        produce(cluster.master, 100, seed=12)
        wait_until_identical(cluster)
        topics = {**TOPICS, "gamma": {"numPartitions": 3}, "beta": {"numPartitions": 1}}
        cluster.master.write_config(
            system=SYSTEM, topics=topics, zk_connect=zookeeper.connect_string,
            zk={"zk.zkRoot": cluster.root, "zk.zkSessionTimeoutMs": 2000},
        )  # fmt: skip
        os.kill(cluster.master.process.pid, signal.SIGHUP)
        wait_for(lambda: "config reload done" in cluster.master.log(), 15, "master reload")
        wait_for(lambda: "topics added: gamma; changed: beta" in cluster.slave.log(), 20)
        text = cluster.slave.config_path.read_text()
        assert "[topic=gamma]" in text and f"serverPort={cluster.slave.port}" in text
        assert f"dataPath={cluster.slave.data_path}" in text
        assert f"serverPort={cluster.master.port}" not in text
        with cluster.master.connect() as connection:
            for partition in range(3):
                put = Put("gamma", partition, b"g%d" % partition, 0, connection.next_opaque())
                assert connection.request(put).code == 200
        hashes = wait_until_identical(cluster)
        assert "gamma-2/00000000000000000000.meta" in hashes
        assert " ERROR " not in cluster.slave.log()
    finally:
        cluster.slave.stop()
        cluster.master.stop()


def test_consumers_read_every_replicated_message_from_the_slave(cluster, zookeeper):
    """Goal: spec 6.5. Method: with ids/0/master gone (master stopped), a new consumer group
    finds only the slave in ZooKeeper and must read every message from it."""
    cluster.master.start()
    cluster.slave.start()
    factory = MetaMessageSessionFactory(zk_config(zookeeper, cluster.root))
    try:
        producer = factory.create_producer()
        producer.publish("alpha")
        results = [producer.send_message(Message("alpha", b"r%d" % n)) for n in range(200)]
        assert all(result.success for result in results)
        wait_until_identical(cluster)
        cluster.master.stop()
        collector = Collector()
        consumer_of(factory, "alpha", "readers-of-slave", collector, max_delay_fetch_ms=200)
        sent = {result.msg_id for result in results}
        wait_for(lambda: collector.ids() >= sent, 20, "every message from the slave")
        assert len(collector.messages) == len(sent)  # and no duplicate
    finally:
        factory.shutdown()


class Sender(threading.Thread):
    """Sends synchronously until stopped; records (time, id, partition, offset) of each ack."""

    def __init__(self, producer, topic: str) -> None:
        super().__init__(name="test-sender", daemon=True)
        self.producer, self.topic = producer, topic
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.acked: list[tuple[float, int, int, int]] = []

    def run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            try:
                result = self.producer.send_message(Message(self.topic, b"f%d" % n), 1.0)
            except ClientError:
                result = None
            if result is not None and result.success:
                with self.lock:
                    entry = (time.monotonic(), result.msg_id, result.partition.partition)
                    self.acked.append((*entry, result.offset))
            n += 1
            time.sleep(0.01)

    def acked_since(self, since: float) -> list[tuple[float, int, int, int]]:
        with self.lock:
            return [entry for entry in self.acked if entry[0] >= since]

    def stop(self) -> None:
        self.stopped.set()
        self.join(10)
        assert not self.is_alive()


def records(broker: BrokerProcess, topic: str, partition: int) -> dict[int, int]:
    """offset -> message id of every record of one partition."""
    found, offset = {}, 0
    with broker.connect() as connection:
        while True:
            get = Get(topic, "check", partition, offset, 1024 * 1024, connection.next_opaque())
            reply = connection.request(get)
            if not isinstance(reply, Data):
                return found
            for record in iter_messages(reply.data, offset):
                found[record.offset] = record.msg_id
                offset = record.offset + record.size


def test_failover_promote_the_slave_after_kill_9_of_the_master(tmp_path, zookeeper):
    """Goal: issue 6 failover. Method: a producer sends steadily and a consumer group reads
    while the master is killed with SIGKILL; ``metaServer.sh promote`` turns the slave into
    the master (same brokerId and data). Producers must go on through ZooKeeper, the consumer
    must get messages sent after the promotion, and every message acknowledged before the
    kill that the slave had copied must be in the promoted log at its offset, with its id.
    The promoted broker runs with updateConsumerOffsets=true, so a consumer that had read
    past the copy's end is sent back to it (301) instead of waiting (see README)."""
    cluster = make_cluster(
        tmp_path, zookeeper, "slaveId=0\nslaveMaxDelayInMills=100\n", updateConsumerOffsets="true"
    )
    producers = MetaMessageSessionFactory(zk_config(zookeeper, cluster.root))
    consumers = MetaMessageSessionFactory(zk_config(zookeeper, cluster.root))
    sender = None
    try:
        cluster.master.start()
        started = slave_script(cluster, "start", "slave")
        assert started.returncode == 0, started.stderr
        status = slave_script(cluster, "status").stdout
        assert "meta-server is running as async slave of broker 0 (pid " in status
        cluster.slave.log_path = cluster.slave.directory / "run" / "meta-server.log"
        collector = Collector()
        consumer_of(consumers, "alpha", "fo-group", collector,
                    max_delay_fetch_ms=200, commit_offset_period_ms=300)  # fmt: skip
        producer = producers.create_producer()
        producer.publish("alpha")
        sender = Sender(producer, "alpha")
        sender.start()
        wait_for(lambda: len(sender.acked_since(0)) >= 150, 20, "steady sends")
        killed_at = time.monotonic()
        cluster.master.kill()
        copied = {key[1]: int(row[4]) for key, row in lag_rows(cluster.slave).items()
                  if key[0] == "alpha"}  # fmt: skip
        promoted = slave_script(cluster, "promote")
        assert promoted.returncode == 0, promoted.stderr + promoted.stdout
        assert "stopping the async slave of broker 0 (pid " in promoted.stdout
        assert "promoted: broker 0 serving" in promoted.stdout
        promoted_at = time.monotonic()
        wait_for(lambda: len(sender.acked_since(promoted_at)) >= 30, 30, "sends after promote")
        after = {entry[1] for entry in sender.acked_since(promoted_at)}
        wait_for(lambda: len(collector.ids() & after) >= 20, 30, "the consumer to resume")
        sender.stop()
        logs = {p: records(cluster.slave, "alpha", p) for p in range(4)}
        before = [entry for entry in sender.acked if entry[0] < killed_at]
        replicated = [e for e in before if e[3] < copied.get(e[2], 0)]
        assert len(replicated) >= 100
        assert all(logs[p].get(offset) == msg_id for _t, msg_id, p, offset in replicated)
        for _t, msg_id, p, offset in sender.acked_since(promoted_at):
            assert logs[p].get(offset) == msg_id
    finally:
        if sender is not None and sender.is_alive():
            sender.stop()
        consumers.shutdown()
        producers.shutdown()
        slave_script(cluster, "stop")
        cluster.master.kill()


def test_metaserver_sh_promote_has_help_and_takes_only_new_slave(tmp_path):
    env = dict(os.environ, META_RUN_DIR=str(tmp_path), META_PYTHON=sys.executable)
    command = [str(REPO / "tools" / "metaServer.sh"), "promote"]
    shown = subprocess.run(
        [*command, "--help"], env=env, capture_output=True, text=True, timeout=30
    )
    assert shown.returncode == 0
    assert "usage: tools/metaServer.sh promote" in shown.stdout
    assert "ids/<brokerId>/master" in shown.stdout
    refused = subprocess.run([*command, "now"], env=env, capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0 and "unknown promote argument: now" in refused.stderr
