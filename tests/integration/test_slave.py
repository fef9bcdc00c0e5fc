"""An async slave against real processes: a master, a slave and a real ZooKeeper (issue 6).

Every test runs a master ``BrokerProcess`` and a slave ``BrokerProcess`` started with
``--slave async_slave.properties`` under a fresh ZooKeeper root. Segments are kept small
(64 KiB) so that several files per partition are compared, and messages carry attributes
and unusual flags so that "verbatim" is checked, not just "same payload".
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from meta.protocol.codec import encode
from meta.protocol.commands import Data, Get, Offset, Put, Stats
from meta.protocol.message import encode_payload, iter_messages
from tests.integration.broker_process import REPO, BrokerProcess
from tests.integration.client_helpers import make_root, wait_for

SYSTEM = {"numPartitions": 4, "maxSegmentSize": 64 * 1024, "unflushThreshold": 0}
TOPICS = {"alpha": {"numPartitions": 4}, "beta": {"numPartitions": 2}, "late-*": {}}
PRODUCED = (("alpha", 4), ("beta", 2))
COPY_WAIT_S = 60.0
PUT_BATCH = 500


@dataclass
class Cluster:
    root: str
    master: BrokerProcess
    slave: BrokerProcess


SLAVE_PROPERTIES = "slaveId=0\nslaveGroup=copy-group\nslaveMaxDelayInMills=200\n"


def make_cluster(
    tmp_path: Path, zookeeper, system: dict, topics: dict, slave_properties: str = SLAVE_PROPERTIES
) -> Cluster:
    """A master and its slave (``slave_properties``; by default slave 0 of group copy-group,
    200 ms delay) under a fresh root, not started, with the same ``[system]`` and topic
    sections."""
    root = make_root(zookeeper)
    settings = {
        "system": system,
        "topics": topics,
        "zk_connect": zookeeper.connect_string,
        "zk": {"zk.zkRoot": root, "zk.zkSessionTimeoutMs": 2000},
    }
    master = BrokerProcess(tmp_path / "master", **settings)
    slave = BrokerProcess(tmp_path / "slave", **settings)
    properties = slave.directory / "async_slave.properties"
    properties.write_text(slave_properties)
    slave.arguments = ["--slave", str(properties)]
    return Cluster(root, master, slave)


@pytest.fixture
def cluster(tmp_path, zookeeper):
    made = make_cluster(tmp_path, zookeeper, SYSTEM, TOPICS)
    try:
        yield made
    finally:
        made.slave.stop()
        made.master.stop()


def produce(
    broker: BrokerProcess,
    count: int,
    seed: int,
    pause_s: float = 0.0,
    produced: tuple[tuple[str, int], ...] = PRODUCED,
    body_bytes_max: int = 400,
) -> None:
    """Put ``count`` messages round robin over ``produced``'s partitions, pipelined, all acked.

    A third carry an attribute (flag bit 0), a third the flag 6 (copied as is), sizes vary
    from 1 to ``body_bytes_max - 1`` bytes.
    """
    rng = random.Random(seed)
    with broker.connect() as connection:
        for first in range(0, count, PUT_BATCH):
            puts = []
            for n in range(first, min(count, first + PUT_BATCH)):
                topic, partitions = produced[n % len(produced)]
                body = rng.randbytes(rng.randrange(1, body_bytes_max))
                if n % 3 == 0:
                    data, flag = body, 0
                elif n % 3 == 1:
                    data, flag = encode_payload(body, f"attr-{seed}-{n}")
                else:
                    data, flag = body, 6
                partition = (n // len(produced)) % partitions
                puts.append(Put(topic, partition, data, flag, connection.next_opaque()))
            connection.send_bytes(b"".join(encode(put) for put in puts))
            for _ in puts:
                reply = connection.receive()
                assert reply.code == 200, reply
            time.sleep(pause_s)


def segment_files(broker: BrokerProcess) -> dict[str, bytes]:
    """``<topic>-<partition>/<start>.meta`` -> SHA-256 of the file."""
    return {
        f"{path.parent.name}/{path.name}": hashlib.sha256(path.read_bytes()).digest()
        for path in sorted(Path(broker.data_path).glob("*-*/*.meta"))
    }


def visible_ends(broker: BrokerProcess) -> set[str]:
    """The ``stats offsets`` lines: every partition's first offset and visible end."""
    with broker.connect() as connection:
        reply = connection.request(Stats("offsets", connection.next_opaque()))
    assert reply.code == 200, reply
    return set(reply.body.decode().split("\r\n")[1:-2])


def wait_until_identical(cluster: Cluster, timeout_s: float = COPY_WAIT_S) -> dict[str, bytes]:
    """Wait until every segment file of the slave has the master's bytes and the slave serves
    all of it (its visible ends, which follow the fsync, are the master's); return the hashes."""
    expected = segment_files(cluster.master)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        same_files = segment_files(cluster.slave) == expected
        if same_files and visible_ends(cluster.slave) == visible_ends(cluster.master):
            return expected
        time.sleep(0.1)
    sizes = {
        name: (
            (cluster.master.data_path / name).stat().st_size,
            (cluster.slave.data_path / name).stat().st_size
            if (cluster.slave.data_path / name).exists()
            else None,
        )
        for name in expected
    }
    raise AssertionError(
        f"slave not identical within {timeout_s} s; (master, slave) sizes {sizes}\n"
        f"slave log:\n{cluster.slave.log()[-5000:]}"
    )


def test_every_slave_segment_file_is_byte_identical_to_the_masters(cluster):
    """Goal: the slave copies records verbatim at the master's offsets. Method: a backlog
    written before the slave starts, more written while it copies; then every segment file
    (several per partition) must hash the same on both sides."""
    cluster.master.start()
    produce(cluster.master, 3000, seed=1)
    cluster.slave.start()
    produce(cluster.master, 3000, seed=2)
    hashes = wait_until_identical(cluster)
    assert len(hashes) > 2 * 6  # several segments in each of the 6 partitions
    assert {name.split("/")[0] for name in hashes} == {
        *(f"alpha-{p}" for p in range(4)),
        *(f"beta-{p}" for p in range(2)),
    }


ACCEPTANCE_TOPICS = (("alpha", 4), ("beta", 4))
ACCEPTANCE_MESSAGES = 100_000


@pytest.mark.slow
def test_acceptance_100k_messages_over_2_topics_x_4_partitions_are_byte_identical(
    tmp_path, zookeeper
):
    """Issue 6 acceptance "Byte identity": 100k messages to a master with 2 topics x 4
    partitions, then every segment file of the slave hashes the same as the master's. Small
    messages (1-99 bytes, attributes and odd flags) and 16 KiB segments give hundreds of
    segment files. Half is a backlog written before the slave starts, half is written while
    it copies. Every record is counted on the slave."""
    root = make_root(zookeeper)
    settings = {
        "system": {**SYSTEM, "maxSegmentSize": 16 * 1024},
        "topics": {topic: {"numPartitions": count} for topic, count in ACCEPTANCE_TOPICS},
        "zk_connect": zookeeper.connect_string,
        "zk": {"zk.zkRoot": root, "zk.zkSessionTimeoutMs": 2000},
    }
    cluster = Cluster(
        root,
        BrokerProcess(tmp_path / "master", **settings),
        BrokerProcess(tmp_path / "slave", **settings),
    )
    properties = cluster.slave.directory / "async_slave.properties"
    properties.write_text("slaveId=0\nslaveGroup=copy-group\nslaveMaxDelayInMills=200\n")
    cluster.slave.arguments = ["--slave", str(properties)]
    half = ACCEPTANCE_MESSAGES // 2
    try:
        cluster.master.start()
        produce(cluster.master, half, 21, produced=ACCEPTANCE_TOPICS, body_bytes_max=100)
        cluster.slave.start()
        produce(cluster.master, half, 22, produced=ACCEPTANCE_TOPICS, body_bytes_max=100)
        hashes = wait_until_identical(cluster, timeout_s=120)
        counts = _record_counts(cluster.slave)
    finally:
        cluster.slave.stop()
        cluster.master.stop()
    assert set(counts) == {f"{topic}-{p}" for topic, n in ACCEPTANCE_TOPICS for p in range(n)}
    assert sum(counts.values()) == ACCEPTANCE_MESSAGES
    assert len(hashes) > 200  # many segment files, each compared
    assert " ERROR " not in cluster.slave.log()


def _record_counts(broker: BrokerProcess) -> dict[str, int]:
    """``<topic>-<partition>`` -> records in its segment files (each file holds whole records)."""
    counts: dict[str, int] = {}
    for path in Path(broker.data_path).glob("*-*/*.meta"):
        found = sum(1 for _ in iter_messages(path.read_bytes(), 0))
        counts[path.parent.name] = counts.get(path.parent.name, 0) + found
    return counts


def test_a_slave_killed_mid_stream_resumes_from_its_local_end(cluster):
    """Goal: no gap and no duplicate after kill -9. Method: produce steadily, kill -9 the slave
    once it has copied part of the stream, start it again while production goes on; at the
    end the files must be identical (a gap or a duplicate would shift every later byte)."""
    cluster.master.start()
    cluster.slave.start()
    producer = threading.Thread(target=produce, args=(cluster.master, 10_000, 3, 0.1))
    producer.start()
    try:
        wait_for(lambda: sum(_sizes(cluster.slave)) > 200_000, 30, "the slave to copy a part")
        assert producer.is_alive()  # the kill comes mid-stream
        cluster.slave.kill()
        copied_before = sum(_sizes(cluster.slave))
        cluster.slave.start()
    finally:
        producer.join(60)
    assert not producer.is_alive()
    wait_until_identical(cluster)
    assert sum(_sizes(cluster.master)) > copied_before
    assert " ERROR " not in cluster.slave.log()  # no partition was stopped


def _sizes(broker: BrokerProcess) -> list[int]:
    return [path.stat().st_size for path in Path(broker.data_path).glob("*-*/*.meta")]


def test_a_topic_created_on_the_master_after_the_slave_started_is_copied(cluster, admin):
    cluster.master.start()
    cluster.slave.start()
    produce(cluster.master, 600, seed=4)
    wait_until_identical(cluster)
    with cluster.master.connect() as connection:
        for partition in (0, 3, 0):
            put = Put("late-topic", partition, b"late %d" % partition, 0, connection.next_opaque())
            assert connection.request(put).code == 200
    hashes = wait_until_identical(cluster)
    assert {"late-topic-0/00000000000000000000.meta", "late-topic-3/00000000000000000000.meta"} <= (
        set(hashes)
    )
    node = f"{cluster.root}/brokers/topics-sub/late-topic/0-s0"
    wait_for(lambda: admin.exists(node), what=node)
    assert json.loads(admin.get(node)[0]) == {"numParts": 4, "broker": "0-s0"}


def test_a_put_to_the_slave_gets_403_and_gets_are_served(cluster):
    cluster.master.start()
    cluster.slave.start()
    produce(cluster.master, 60, seed=5)
    wait_until_identical(cluster)
    with cluster.slave.connect() as connection:
        reply = connection.request(Put("alpha", 0, b"no", 0, connection.next_opaque()))
        assert reply.code == 403
        assert b"slave 0 of broker 0" in reply.body
        get = Get("alpha", "readers", 0, 0, 1024 * 1024, connection.next_opaque())
        from_slave = connection.request(get)
        offset = connection.request(Offset("alpha", "readers", 0, 10**9, connection.next_opaque()))
    with cluster.master.connect() as connection:
        from_master = connection.request(get)
    assert isinstance(from_slave, Data)
    assert from_slave.data == from_master.data
    assert offset.code == 200
    assert int(offset.body) == len(from_master.data)


def test_the_slave_registers_exactly_the_specs_nodes_and_removes_them_at_stop(cluster, admin):
    cluster.master.start()
    cluster.slave.start()
    ids = f"{cluster.root}/brokers/ids/0"
    master_uri = f"meta://127.0.0.1:{cluster.master.port}".encode()
    slave_uri = f"meta://127.0.0.1:{cluster.slave.port}".encode()
    assert admin.get(f"{ids}/slave0")[0] == slave_uri
    assert admin.get(f"{ids}/slave0")[1].ephemeralOwner != 0
    assert admin.get(ids)[0] == master_uri  # only the master writes the compatibility node
    checksum = zlib.crc32(cluster.master.config_path.read_bytes())
    assert admin.get(f"{ids}/master_config_checksum")[0] == b"%d" % checksum
    assert sorted(admin.get_children(ids)) == ["master", "master_config_checksum", "slave0"]
    for topic, count in (("alpha", 4), ("beta", 2), ("late-*", 4)):
        assert admin.get(f"{cluster.root}/brokers/topics/{topic}/0-s0")[0] == b"%d" % count
        for kind in ("topics-pub", "topics-sub"):
            data = admin.get(f"{cluster.root}/brokers/{kind}/{topic}/0-s0")[0]
            assert data == b'{"numParts":%d,"broker":"0-s0"}' % count
    assert cluster.slave.stop() == 0
    assert not admin.exists(f"{ids}/slave0")
    for kind in ("topics", "topics-pub", "topics-sub"):
        assert not admin.exists(f"{cluster.root}/brokers/{kind}/alpha/0-s0")
        assert admin.exists(f"{cluster.root}/brokers/{kind}/alpha/0-m")


def test_the_slave_waits_while_the_master_is_down_and_follows_it_back(cluster):
    """Goal: spec 6.2, fetching stops while ids/B/master is missing and resumes from the local
    end when the master returns. Method: stop the master, check the slave noticed, start
    the master again and write more; the copy must catch up exactly."""
    cluster.master.start()
    cluster.slave.start()
    produce(cluster.master, 600, seed=6)
    wait_until_identical(cluster)
    cluster.master.stop()
    wait_for(lambda: "has no master in ZooKeeper" in cluster.slave.log(), what="slave noticed")
    cluster.master.start()
    produce(cluster.master, 600, seed=7)
    wait_until_identical(cluster)


def slave_script(cluster: Cluster, *arguments: str) -> subprocess.CompletedProcess:
    """``tools/metaServer.sh ARGUMENTS`` for the cluster's slave (its run dir, config and
    async_slave.properties)."""
    env = dict(
        os.environ,
        META_RUN_DIR=str(cluster.slave.directory / "run"),
        META_CONF=str(cluster.slave.config_path),
        META_SLAVE_CONF=str(cluster.slave.directory / "async_slave.properties"),
        META_PYTHON=sys.executable,
        PYTHONPATH=str(REPO),
    )
    script = REPO / "tools" / "metaServer.sh"
    return subprocess.run(
        [str(script), *arguments], env=env, capture_output=True, text=True, timeout=150, cwd=REPO
    )


def test_metaserver_sh_start_slave_starts_a_copying_slave(cluster, admin):
    cluster.master.start()
    produce(cluster.master, 300, seed=8)
    started = slave_script(cluster, "start", "slave")
    try:
        assert started.returncode == 0, started.stderr
        # The script returns once the port listens; registration follows right after.
        node = f"{cluster.root}/brokers/ids/0/slave0"
        wait_for(lambda: admin.exists(node), what=node)
        cluster.slave.log_path = cluster.slave.directory / "run" / "meta-server.log"
        wait_until_identical(cluster)
    finally:
        stopped = slave_script(cluster, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not admin.exists(f"{cluster.root}/brokers/ids/0/slave0")


def test_metaserver_sh_start_slave_names_the_bad_key_and_value(cluster):
    properties = cluster.slave.directory / "async_slave.properties"
    properties.write_text("slaveId=0\nslaveMaxDelayInMills=soon\n")
    started = slave_script(cluster, "start", "slave")
    assert started.returncode != 0
    assert f"{properties}: slaveMaxDelayInMills='soon': not an integer" in started.stderr


def test_a_transaction_batch_across_the_segment_size_rolls_as_on_the_master(cluster):
    """Goal: byte identity when the master wrote a transaction's records in one append that
    crosses maxSegmentSize (the master rolls after the whole batch, a record-by-record copy
    would roll after the first record past the size). Method: fill alpha-0 to just below
    64 KiB, commit a local transaction of ten 1 KiB messages, put more; compare the files."""
    from tests.integration.test_transactions import Wire

    cluster.master.start()
    cluster.slave.start()
    with cluster.master.connect() as connection:
        wire = Wire(connection, "slave-tx")
        for n in range(60):
            assert wire.put(None, 0, b"p%04d" % n + b"." * 1000, topic="alpha").code == 200
        key = f"TX:slave-tx:{time.monotonic_ns() % 2**31}"
        assert wire.tx(key, "BEGIN").code == 200
        for n in range(10):
            assert wire.put(key, 0, b"t%04d" % n + b"." * 1000, topic="alpha").code == 200
        assert wire.tx(key, "COMMIT_ONE_PHASE").code == 200
        for n in range(10):
            assert wire.put(None, 0, b"q%04d" % n + b"." * 1000, topic="alpha").code == 200
    hashes = wait_until_identical(cluster)
    first = Path(cluster.master.data_path, "alpha-0", "00000000000000000000.meta")
    assert first.stat().st_size > 64 * 1024 + 1024  # the batch crossed the size in one append
    assert len([name for name in hashes if name.startswith("alpha-0/")]) == 2


def test_the_slave_registers_its_consumer_id_node_and_no_owner_or_offset_node(cluster, admin):
    """Goal: zk spec 6.2, what Java's slave writes under consumers/<slaveGroup>: one
    ephemeral ids/<slaveGroup>_<host>-<pid>-<uuid> node holding the copied topics
    comma-joined, and nothing else (no owners, no offsets: the copy resumes from the local
    end). Method: read the nodes while it copies, after a topic is added, and after stop."""
    cluster.master.start()
    cluster.slave.start()
    produce(cluster.master, 60, seed=9)
    wait_until_identical(cluster)
    group = f"{cluster.root}/consumers/copy-group"
    wait_for(lambda: admin.exists(f"{group}/ids") and admin.get_children(f"{group}/ids"))
    [child] = admin.get_children(f"{group}/ids")
    prefix, _, rest = child.partition("_")
    host, pid, uuid = rest.split("-", 2)
    assert prefix == "copy-group"
    assert host and int(pid) == cluster.slave.process.pid and len(uuid) == 36
    node = f"{group}/ids/{child}"
    data, stat = admin.get(node)
    assert stat.ephemeralOwner != 0
    assert sorted(data.decode().split(",")) == ["alpha", "beta"]
    with cluster.master.connect() as connection:
        assert connection.request(Put("late-x", 1, b"x", 0, connection.next_opaque())).code == 200
    wait_for(lambda: b"late-x" in admin.get(node)[0], what="late-x in the consumer node")
    assert sorted(admin.get(node)[0].decode().split(",")) == ["alpha", "beta", "late-x"]
    assert admin.get_children(group) == ["ids"]  # no owners, no offsets
    assert cluster.slave.stop() == 0
    assert admin.get_children(f"{group}/ids") == []


def test_a_master_whose_data_starts_after_0_is_copied_at_the_same_offsets(cluster):
    """Goal: zk spec 6.1 step 6.3, the slave's first local segment starts at the master's
    first offset when retention deleted the master's first segments. Method: the master's
    oldest segment files of alpha-0 and beta-1 are deleted while it is down (what retention
    does); the slave must then hold exactly the master's files, first names included, and
    serve a get at the master's first offset."""
    cluster.master.start()
    produce(cluster.master, 8000, seed=10)
    cluster.master.stop()
    firsts = {}
    for name in ("alpha-0", "beta-1"):
        files = sorted(Path(cluster.master.data_path, name).glob("*.meta"))
        assert len(files) >= 3
        for path in files[:2]:
            path.unlink()
        firsts[name] = int(files[2].name[:20])
    cluster.master.start()
    cluster.slave.start()
    produce(cluster.master, 600, seed=11)
    hashes = wait_until_identical(cluster)
    for name, first in firsts.items():
        assert min(int(n.split("/")[1][:20]) for n in hashes if n.startswith(name + "/")) == first
    with cluster.slave.connect() as connection:
        get = Get("alpha", "readers", 0, firsts["alpha-0"], 4096, connection.next_opaque())
        assert isinstance(connection.request(get), Data)
    assert " ERROR " not in cluster.slave.log()
