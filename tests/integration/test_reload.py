"""Config reload of a real broker process against the real ZooKeeper (issue 5 item 3).

SIGHUP and ``tools/metaServer.sh reload`` make a running broker re-read its server.ini: new
topics get their ZooKeeper nodes (payloads exactly as docs/formats.md section 4) and take puts,
changed topics are registered again, ``master_config_checksum`` follows the file, and a broken
file leaves the broker serving on its old config. No restart happens in any of them: the same
process serves before and after. Every wait polls with a deadline.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import zlib
from pathlib import Path

import pytest
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from meta.client import MetaMessageSessionFactory
from meta.protocol.commands import Data, Get, Put
from tests.integration.broker_process import BrokerProcess, free_port, server_ini
from tests.integration.client_helpers import Collector, consumer_of, wait_for, zk_config
from tests.integration.script_run import SCRIPT, ScriptRun

TOPICS = {"test": {"numPartitions": 2}, "idle": {}}


@pytest.fixture
def broker(tmp_path, zookeeper, zk_root):
    keywords = ini(zookeeper, zk_root, TOPICS)
    process = BrokerProcess(tmp_path, **keywords)
    process.keywords = keywords  # What rewrite() keeps of the file.
    yield process
    process.stop()


def ini(zookeeper, zk_root: str, topics: dict, **system: object) -> dict:
    return {
        "zk_connect": zookeeper.connect_string,
        "zk": {"zk.zkRoot": zk_root, "zk.zkSessionTimeoutMs": 4000},
        "topics": topics,
        "system": system,
    }


def node(client, path: str) -> bytes | None:
    """The node's bytes, or None when it is absent (also when it goes between two reads)."""
    try:
        return client.get(path)[0]
    except NoNodeError:
        return None


def topic_nodes(topic: str, count: int) -> dict[str, bytes]:
    """docs/formats.md section 4: the three nodes of broker 0's ``topic`` and their bytes."""
    payload = b'{"numParts":%d,"broker":"0-m"}' % count
    return {
        f"/brokers/topics/{topic}/0-m": b"%d" % count,
        f"/brokers/topics-pub/{topic}/0-m": payload,
        f"/brokers/topics-sub/{topic}/0-m": payload,
    }


def has_nodes(client, nodes: dict[str, bytes]) -> bool:
    return all(node(client, path) == data for path, data in nodes.items())


def checksum_node(client) -> bytes | None:
    return node(client, "/brokers/ids/0/master_config_checksum")


def reload_by_signal(broker: BrokerProcess) -> str:
    """SIGHUP the broker; return the log line that reports the outcome."""
    offset = broker.log_path.stat().st_size
    broker.process.send_signal(signal.SIGHUP)
    return wait_for(lambda: outcome_line(broker, offset), what="the reload outcome in the log")


def outcome_line(broker: BrokerProcess, offset: int) -> str | None:
    for line in broker.log(since=offset).splitlines():
        if "config reload done" in line or "config reload failed" in line:
            return line
    return None


def put(broker: BrokerProcess, topic: str, partition: int, data: bytes = b"x") -> int:
    with broker.connect() as connection:
        return connection.request(Put(topic, partition, data, 0, 7)).code


def test_sighup_adds_a_topic_with_its_nodes_and_puts_and_no_restart(broker, kazoo_client):
    """Goal: a topic section added to a running broker's file works after SIGHUP alone.

    Method: start with two topics, append ``[topic=fresh]`` with 3 partitions, SIGHUP; the
    three nodes appear with the exact payloads, a put to partition 2 succeeds, the checksum
    node holds the new file's CRC-32, and the process is the one started first.
    """
    broker.start()
    pid = broker.process.pid
    assert put(broker, "fresh", 0) == 500  # Not a topic of this broker yet.
    rewrite(broker, {**TOPICS, "fresh": {"numPartitions": 3}})

    line = reload_by_signal(broker)

    assert " INFO " in line and "topics added: fresh;" in line
    wait_for(lambda: has_nodes(kazoo_client, topic_nodes("fresh", 3)), what="fresh's nodes")
    assert put(broker, "fresh", 2) == 200
    checksum = zlib.crc32(broker.config_path.read_bytes())
    assert checksum_node(kazoo_client) == b"%d" % checksum
    assert broker.process.pid == pid and broker.process.poll() is None
    assert broker.log().count("serving meta://") == 1


def test_a_changed_partition_count_is_registered_again(broker, kazoo_client):
    broker.start()
    wait_for(lambda: has_nodes(kazoo_client, topic_nodes("test", 2)), what="test's nodes")
    created = kazoo_client.exists("/brokers/topics-pub/test/0-m").czxid
    rewrite(broker, {**TOPICS, "test": {"numPartitions": 5}})

    line = reload_by_signal(broker)

    assert "changed: test;" in line
    wait_for(lambda: has_nodes(kazoo_client, topic_nodes("test", 5)), what="test with 5")
    assert kazoo_client.exists("/brokers/topics-pub/test/0-m").czxid > created
    assert has_nodes(kazoo_client, topic_nodes("idle", 1))
    assert put(broker, "test", 4) == 200


def test_a_removed_topic_without_data_is_unregistered_and_one_with_data_still_serves(
    broker, kazoo_client
):
    broker.start()
    assert put(broker, "test", 1, b"kept") == 200
    rewrite(broker, {"fresh": {}})

    line = reload_by_signal(broker)

    assert "removed: idle, test" in line
    assert_removed_topics_settle(broker, kazoo_client)


def test_removed_topics_settle_the_same_after_the_broker_session_expired(broker, kazoo_client):
    """Goal: what a reload decided about removed topics holds after a ZooKeeper session
    expiry (a starved broker, as under load): ``test`` comes back with the [system]
    defaults, ``idle`` does not come back, and ``test`` still serves its data.

    Method: reload, then stop the broker process (SIGSTOP) until ZooKeeper has deleted its
    ephemeral nodes, continue it, and wait for the registration to settle.
    """
    broker.start()
    assert put(broker, "test", 1, b"kept") == 200
    rewrite(broker, {"fresh": {}})
    reload_by_signal(broker)
    wait_for(lambda: has_nodes(kazoo_client, topic_nodes("test", 1)), what="test registered")
    broker.process.send_signal(signal.SIGSTOP)
    try:
        wait_for(
            lambda: node(kazoo_client, "/brokers/topics/test/0-m") is None,
            timeout_s=60,
            what="ZooKeeper to expire the stopped broker's session",
        )
    finally:
        broker.process.send_signal(signal.SIGCONT)
    assert_removed_topics_settle(broker, kazoo_client)


def assert_removed_topics_settle(broker: BrokerProcess, kazoo_client) -> None:
    """``idle`` (no data) unregistered, ``test`` (data) registered with the [system]
    numPartitions, both waited for (each is written by its own ZooKeeper operation, and a
    session expiry deletes and re-creates them), and ``test``'s data still served."""
    wait_for(
        lambda: node(kazoo_client, "/brokers/topics/idle/0-m") is None, what="idle unregistered"
    )
    wait_for(
        lambda: has_nodes(kazoo_client, topic_nodes("test", 1)),
        what="test registered with the [system] numPartitions",
    )
    assert node(kazoo_client, "/brokers/topics/idle/0-m") is None
    with broker.connect() as connection:
        reply = connection.request(Get("test", "group", 1, 0, 1024, 8))
    assert isinstance(reply, Data) and b"kept" in reply.data


def test_a_broken_file_leaves_the_broker_on_its_old_config(broker, kazoo_client):
    """Goal: a reload of a broken file changes nothing. Method: an unknown key in a topic
    section and a new topic; after SIGHUP the log names file, section and key at ERROR, the
    new topic is neither registered nor accepted, old topics still take puts, and the
    checksum node keeps the old file's CRC-32."""
    broker.start()
    old_checksum = zlib.crc32(broker.config_path.read_bytes())
    wait_for(lambda: checksum_node(kazoo_client) == b"%d" % old_checksum, what="checksum")
    broken = {**TOPICS, "test": {"numPartition": 3}, "fresh": {}}
    rewrite(broker, broken)

    line = reload_by_signal(broker)

    assert " ERROR " in line and "config reload failed, keeping the running configuration" in line
    assert str(broker.config_path) in line
    assert "[topic=test]" in line and "numPartition" in line
    assert broker.process.poll() is None
    assert put(broker, "test", 1) == 200
    assert put(broker, "fresh", 0) == 500
    assert node(kazoo_client, "/brokers/topics/fresh/0-m") is None
    assert checksum_node(kazoo_client) == b"%d" % old_checksum


def rewrite(broker: BrokerProcess, topics: dict) -> None:
    """Write the fixture's server.ini again with other topic sections."""
    broker.write_config(**{**broker.keywords, "topics": topics})


# --- tools/metaServer.sh reload --------------------------------------------------------------


class ScriptBroker(ScriptRun):
    """A broker started, reloaded and stopped by tools/metaServer.sh in a private run dir."""

    timeout_s = 150.0  # metaServer.sh waits at most 60 s to start and 60 s to reload.

    def __init__(self, directory: Path, keywords: dict) -> None:
        super().__init__(directory)
        self.data_path = directory / "data"
        self.port = free_port()
        self.keywords = keywords
        self.write(keywords["topics"])

    def write(self, topics: dict) -> None:
        keywords = {**self.keywords, "topics": topics}
        self.conf.write_text(server_ini(self.port, self.data_path, **keywords))


@pytest.fixture
def script_broker(tmp_path, zookeeper, zk_root):
    scripted = ScriptBroker(tmp_path, ini(zookeeper, zk_root, TOPICS))
    yield scripted
    scripted.run("stop")
    scripted.kill_leftover()


def test_the_reload_subcommand_applies_the_file_and_reports_it(script_broker, kazoo_client):
    """Goal: ``tools/metaServer.sh reload`` is the operator's way to reload. Method: start the
    broker with the script, add a topic, run ``reload``: it exits 0 and prints the outcome
    line, the topic's nodes appear, and the broker pid is unchanged."""
    started = script_broker.run("start")
    assert started.returncode == 0, started.stdout + started.stderr
    pid = script_broker.pid()
    script_broker.write({**TOPICS, "fresh": {"numPartitions": 3}})

    reloaded = script_broker.run("reload")

    assert reloaded.returncode == 0, reloaded.stdout + reloaded.stderr
    assert f"SIGHUP sent to pid {pid}" in reloaded.stdout
    assert "config reload done" in reloaded.stdout and "topics added: fresh;" in reloaded.stdout
    wait_for(lambda: has_nodes(kazoo_client, topic_nodes("fresh", 3)), what="fresh's nodes")
    assert script_broker.pid() == pid


def test_the_reload_subcommand_exits_1_on_a_broken_file_and_3_without_a_broker(script_broker):
    assert script_broker.run("reload").returncode == 3
    started = script_broker.run("start")
    assert started.returncode == 0, started.stdout + started.stderr
    script_broker.conf.write_text(script_broker.conf.read_text() + "bogusKey=1\n")

    reloaded = script_broker.run("reload")

    assert reloaded.returncode == 1, reloaded.stdout + reloaded.stderr
    assert "config reload failed" in reloaded.stdout and "bogusKey" in reloaded.stdout
    assert script_broker.run("status").returncode == 0


def test_the_reload_subcommand_fails_naming_the_wait_when_no_outcome_is_logged(script_broker):
    """Goal: a reload that logs no outcome in time fails and says what it waited for. Method:
    the broker stopped with SIGSTOP (it cannot log) and a 1 s ``META_RELOAD_TIMEOUT_S``."""
    started = script_broker.run("start")
    assert started.returncode == 0, started.stdout + started.stderr
    pid = script_broker.pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        reloaded = script_broker.run("reload", META_RELOAD_TIMEOUT_S="1")
    finally:
        os.kill(pid, signal.SIGCONT)

    assert reloaded.returncode == 1, reloaded.stdout + reloaded.stderr
    assert "no reload outcome in" in reloaded.stderr and "within 1 s" in reloaded.stderr
    assert "(this start) ---" in reloaded.stderr  # the log tail
    assert script_broker.run("status").returncode == 0


def test_the_reload_subcommand_has_help():
    shown = subprocess.run(
        [str(SCRIPT), "reload", "--help"], capture_output=True, text=True, timeout=30
    )

    assert shown.returncode == 0
    assert shown.stdout.startswith("usage: tools/metaServer.sh reload")
    assert "SIGHUP" in shown.stdout and "[system]" in shown.stdout


def test_adding_partitions_leaves_other_groups_alone_and_never_hides_a_node(
    broker, kazoo_client, zookeeper, zk_root, caplog
):
    """Goal: a reload that adds partitions to one topic is seen by that topic's watchers
    only, and at no moment is the broker's node or the topic's node missing.

    Method: a real consumer group reads ``idle``; ZooKeeper watches count the child events
    of ``idle``'s partitions and of the broker's ids node; a thread reads the broker node
    and ``test``'s publisher list in a loop while ``test`` goes from 2 to 4 partitions by
    SIGHUP. Afterwards ``test``'s three nodes hold 4 and share one creation zxid (one
    transaction), no read found a node missing, ``idle`` and ``ids/0`` had no event, and
    the group neither rebalanced nor changed its owner node.
    """
    broker.start()
    wait_for(lambda: has_nodes(kazoo_client, topic_nodes("test", 2)), what="test's nodes")
    factory = MetaMessageSessionFactory(zk_config(zookeeper, zk_root))
    try:
        consumer_of(factory, "idle", "bystanders", Collector())
        owner_path = "/consumers/bystanders/owners/idle/0-0"
        owner_created = wait_for(lambda: kazoo_client.exists(owner_path)).czxid
        events: list[str] = []
        for path in ("/brokers/topics-sub/idle", "/brokers/ids/0"):
            ChildrenWatch(kazoo_client, path, lambda _c, path=path: events.append(path))
        baseline = len(events)  # Each watch reports once when it is set.
        caplog.set_level(logging.INFO, logger="meta.client")
        caplog.clear()
        gaps, stop = [], threading.Event()

        def read_in_a_loop() -> None:
            for _ in range(100_000):  # bounded; ends much earlier through ``stop``
                if stop.is_set():
                    return
                if kazoo_client.exists("/brokers/ids/0/master") is None:
                    gaps.append("ids/0/master")
                if "0-m" not in kazoo_client.get_children("/brokers/topics-pub/test"):
                    gaps.append("topics-pub/test/0-m")

        reader = threading.Thread(target=read_in_a_loop)
        reader.start()
        try:
            rewrite(broker, {**TOPICS, "test": {"numPartitions": 4}})
            assert "changed: test;" in reload_by_signal(broker)
            wait_for(lambda: has_nodes(kazoo_client, topic_nodes("test", 4)), what="test 4")
        finally:
            stop.set()
            reader.join(30)
        assert gaps == []
        assert len({kazoo_client.exists(path).czxid for path in topic_nodes("test", 4)}) == 1
        assert len(events) == baseline
        assert kazoo_client.exists(owner_path).czxid == owner_created
        assert [r for r in caplog.records if "owns" in r.getMessage()] == []
    finally:
        factory.shutdown()
