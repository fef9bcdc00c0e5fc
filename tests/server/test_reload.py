"""``Broker.reload`` and ``ConfigReloader`` with a fake registry, a ``task.Clock`` and real
ini files read by ``load_config`` (spec 5.6, zk spec 1.3 step 3).

No ZooKeeper and no network: the registry is a recording fake whose Deferreds fire at once
(or fail, or wait, when a test says so); flush batches run only when the test steps them.
"""

from __future__ import annotations

import logging
import zlib
from pathlib import Path

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from meta.config import BrokerConfig, load_config
from meta.errors import ConfigError, InvalidTopicError, StoreError
from meta.protocol.codec import decode_all, encode
from meta.protocol.commands import Put, Result, Transaction
from meta.server.broker import Broker, ReloadRefused, reload_outcome
from meta.server.main import ConfigReloader
from meta.server.protocol import BrokerProtocol
from meta.server.registry import RegistryError
from meta.store.lock import DataPathLock
from meta.store.manager import StoreManager
from tests.integration.broker_process import server_ini
from tests.server.memory_broker import closing_broker
from tests.store.conftest import ManualExecutor, RecordingFiles


class FakeRegistry:
    """Records what the broker asks of the registry; keeps a registered-topic map like it."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.calls: list[tuple] = []
        self.registered: dict[str, object] = {}
        self.failing: set[str] = set()
        self.start_result: defer.Deferred = defer.succeed(None)
        self.checksum = config.checksum

    def start(self, topics_with_stores) -> defer.Deferred:
        configured = sorted(topic.name for topic in self.config.topics)
        for topic in configured + sorted(set(topics_with_stores) - set(configured)):
            self.registered[topic] = self._topic_config(topic)
        return self.start_result

    @property
    def registered_topics(self) -> dict[str, object]:
        return dict(self.registered)

    def set_config(self, config: BrokerConfig) -> None:
        self.calls.append(("set_config",))
        self.config = config

    def register_topic(self, topic: str, force: bool = False) -> defer.Deferred:
        self.calls.append(("register", topic, force))
        if topic in self.failing:
            return defer.fail(RegistryError(f"cannot write {topic}"))
        self.registered[topic] = self._topic_config(topic)
        return defer.succeed(None)

    def unregister_topic(self, topic: str) -> defer.Deferred:
        self.calls.append(("unregister", topic))
        self.registered.pop(topic, None)
        return defer.succeed(None)

    def update_config_checksum(self, checksum: int) -> defer.Deferred:
        self.calls.append(("checksum", checksum))
        self.checksum = checksum
        return defer.succeed(None)

    def stop(self) -> defer.Deferred:
        return defer.succeed(None)

    def _topic_config(self, topic: str):
        sections = {section.name: section for section in self.config.topics}
        return sections.get(topic) or self.config.topic_config(topic)


class Setup:
    """A started broker on a ``Clock`` whose config file the test rewrites."""

    def __init__(self, directory: Path, **ini: object) -> None:
        self.directory = directory
        self.data_path = directory / "data"
        self.data_path.mkdir(exist_ok=True)
        self.config_path = directory / "server.ini"
        self.write(**ini)
        config = load_config(str(self.config_path))
        self.clock = Clock()
        self.executor = ManualExecutor()
        store = StoreManager(config, self.clock, files=RecordingFiles(), executor=self.executor)
        self.registry = FakeRegistry(config)
        self.broker = closing_broker(
            Broker(config, self.clock, registry=self.registry, store=store),
            self.clock,
            self.executor,
        )

    def write(self, **ini: object) -> None:
        self.config_path.write_text(server_ini(0, self.data_path, **ini))

    def reread(self) -> BrokerConfig:
        return load_config(str(self.config_path), None, self.broker.config)

    def reload(self, **ini: object):
        """Rewrite the file, reload it and return the outcome (the fake fires at once)."""
        self.write(**ini)
        return self.result(self.broker.reload(self.reread()))

    @staticmethod
    def result(deferred: defer.Deferred):
        outcome = []
        deferred.addBoth(outcome.append)
        assert outcome, "the Deferred did not fire"
        if isinstance(outcome[0], Failure):
            outcome[0].raiseException()
        return outcome[0]


@pytest.fixture
def setup(tmp_path) -> Setup:
    setup = Setup(tmp_path, topics={"test": {"numPartitions": 2}, "idle": {}})
    setup.broker.start(listen=False)
    return setup


def test_a_new_topic_is_accepted_and_registered(setup):
    outcome = setup.reload(topics={"test": {"numPartitions": 2}, "idle": {}, "fresh": {}})

    assert outcome.added == ("fresh",)
    assert outcome.changed == outcome.removed == outcome.problems == ()
    assert ("register", "fresh", True) in setup.registry.calls
    assert setup.broker.partition_for_put("fresh", 0).topic == "fresh"
    assert [topic.name for topic in setup.broker.config.topics] == ["test", "idle", "fresh"]


def test_every_configured_topic_is_registered_again_with_force(setup):
    setup.reload(topics={"test": {"numPartitions": 5}, "idle": {}})

    registered = [call for call in setup.registry.calls if call[0] == "register"]
    assert registered == [("register", "idle", True), ("register", "test", True)]
    assert setup.registry.registered["test"].num_partitions == 5


def test_a_changed_partition_count_is_used_by_puts_at_once(setup):
    with pytest.raises(Exception, match="wrong partition 4"):
        setup.broker.partition_for_put("test", 4)

    outcome = setup.reload(topics={"test": {"numPartitions": 5}, "idle": {}})

    assert outcome.changed == ("test",)
    assert setup.broker.partition_for_put("test", 4).partition == 4


def test_the_checksum_is_the_new_files(setup):
    outcome = setup.reload(topics={"test": {"numPartitions": 2}, "idle": {}, "fresh": {}})

    checksum = zlib.crc32(setup.config_path.read_bytes())
    assert outcome.checksum == checksum
    assert setup.broker.config.checksum == checksum
    assert setup.registry.checksum == checksum


def test_a_removed_topic_without_data_is_unregistered(setup):
    outcome = setup.reload(topics={"test": {"numPartitions": 2}})

    assert outcome.removed == ("idle",)
    assert ("unregister", "idle") in setup.registry.calls
    assert "idle" not in setup.registry.registered
    with pytest.raises(InvalidTopicError, match="The server do not accept topic idle"):
        setup.broker.partition_for_put("idle", 0)


def test_a_removed_topic_with_data_stays_registered_with_the_system_defaults(setup):
    """Goal: a removed topic that has data is what a restart would make of it. Method: create
    a partition, drop the section; the topic stays registered (with [system] numPartitions),
    its open partition is still there to be read, and puts to it are refused as Java refuses
    them (no configured pattern matches the topic any more)."""
    setup.broker.partition_for_put("test", 1)

    outcome = setup.reload(topics={"idle": {}})

    assert outcome.removed == ("test",)
    assert ("unregister", "test") not in setup.registry.calls
    assert ("register", "test", True) in setup.registry.calls
    assert setup.registry.registered["test"].num_partitions == 1  # [system] numPartitions
    assert setup.broker.store.get("test", 1) is not None
    for partition in (1, 0):
        with pytest.raises(InvalidTopicError, match="The server do not accept topic test"):
            setup.broker.partition_for_put("test", partition)


def test_a_lowered_partition_count_refuses_puts_to_the_partitions_beyond_it(setup):
    """Goal: as Java's getOrCreateMessageStore, every put is checked against the running
    config, also on the put fast path, whose per-connection lookups a reload clears. Method:
    puts to partition 1 over a connection (one alone, then a run of two), numPartitions
    lowered to 1, the same puts again; then raised back."""
    replies = connected(setup)
    reads = (put_frame(1, 1), put_frame(1, 2) + put_frame(1, 3))
    assert [reply.code for reply in replies(*reads)] == [200, 200, 200]

    setup.reload(topics={"test": {"numPartitions": 1}, "idle": {}})

    refused = replies(*reads)
    assert [reply.code for reply in refused] == [500, 500, 500]
    assert all(reply.body.endswith(b"Detail:wrong partition 1") for reply in refused)
    assert setup.broker.store.get("test", 1) is not None  # its data stays
    assert [reply.code for reply in replies(put_frame(0, 4))] == [200]

    setup.reload(topics={"test": {"numPartitions": 2}, "idle": {}})

    assert [reply.code for reply in replies(*reads)] == [200, 200, 200]


def test_a_lowered_partition_count_refuses_transactional_puts_beyond_it(setup):
    """Goal: the transactional put runs use the same per-connection lookups, which a reload
    clears: a new transaction's run to a partition the reload took away is refused.
    Method: a transaction's run of two puts to partition 1, numPartitions lowered to 1, the
    same with a new transaction."""
    replies = connected(setup)

    def transaction(key: str, opaque: int) -> bytes:
        puts = [encode(Put("test", 1, b"body", 0, opaque + n, None, key)) for n in (1, 2)]
        return encode(Transaction(key, "s1", "BEGIN", opaque)) + b"".join(puts)

    assert [reply.code for reply in replies(put_frame(1, 1))] == [200]  # partition 1 exists
    assert [reply.code for reply in replies(transaction("TX:s1:1", 10))] == [200, 200, 200]

    setup.reload(topics={"test": {"numPartitions": 1}, "idle": {}})

    refused = replies(transaction("TX:s1:2", 20))
    assert [reply.code for reply in refused] == [200, 500, 500]
    assert all(b"wrong partition 1" in reply.body for reply in refused[1:])


def connected(setup):
    """A connection to ``setup.broker``; returns ``replies(*reads)``: the results that
    answer those reads once the flushes ran."""
    connection = BrokerProtocol(setup.broker)
    transport = StringTransport()
    connection.makeConnection(transport)

    def replies(*reads: bytes) -> list[Result]:
        for data in reads:
            connection.dataReceived(data)
        setup.executor.run_all()
        got = decode_all(transport.value())
        transport.clear()
        return got

    return replies


def put_frame(partition: int, opaque: int) -> bytes:
    return encode(Put("test", partition, b"body", 0, opaque))


def test_system_changes_wait_for_a_restart_and_topics_inherit_the_running_values(setup, caplog):
    caplog.set_level(logging.WARNING, logger="meta.server")

    outcome = setup.reload(system={"numPartitions": 4}, topics={"test": {}, "fresh": {}})

    assert outcome.at_restart == ("[system] numPartitions changed to 4 (running: 1)",)
    assert setup.broker.config.num_partitions == 1
    assert setup.broker.config.topic_config("fresh").num_partitions == 1
    assert "[system] numPartitions changed to 4 (running: 1), takes effect at restart" in (
        caplog.text
    )


def test_flush_settings_of_a_topic_with_open_partitions_are_reported_as_waiting(setup):
    setup.broker.partition_for_put("test", 0)

    outcome = setup.reload(topics={"test": {"numPartitions": 2, "unflushInterval": 50}})

    assert outcome.at_restart == (
        "[topic=test] unflushInterval changed to 50 (running: 10000) for open partitions",
    )


def test_the_stat_switch_of_a_topic_takes_effect_at_once(setup):
    assert not setup.broker.stat_enabled("test")

    setup.reload(topics={"test": {"numPartitions": 2, "stat": "true"}, "idle": {}})

    assert setup.broker.stat_enabled("test")


def test_a_zookeeper_failure_keeps_the_new_config_and_is_reported(setup, caplog):
    setup.registry.failing.add("fresh")

    outcome = setup.reload(topics={"test": {"numPartitions": 2}, "idle": {}, "fresh": {}})

    assert outcome.problems and "fresh" in outcome.problems[0]
    assert setup.broker.config.topic_config("fresh").name == "fresh"
    assert ("checksum", outcome.checksum) in setup.registry.calls
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert errors and errors[0].getMessage().startswith("config reload done, but ZooKeeper")


def test_a_reload_while_stopping_is_refused(setup):
    setup.broker.stop()
    setup.write(topics={"fresh": {}})

    with pytest.raises(ReloadRefused):
        Setup.result(setup.broker.reload(setup.reread()))
    assert [topic.name for topic in setup.broker.config.topics] == ["test", "idle"]


def test_a_reload_waits_for_start_to_finish(tmp_path):
    setup = Setup(tmp_path, topics={"test": {}})
    setup.registry.start_result = defer.Deferred()
    started = setup.broker.start(listen=False)
    setup.write(topics={"test": {}, "fresh": {}})

    reloaded = setup.broker.reload(setup.reread())

    assert not reloaded.called
    assert setup.registry.calls == []
    setup.registry.start_result.callback(None)
    assert started.called
    assert Setup.result(reloaded).added == ("fresh",)


def test_reload_outcome_is_empty_for_an_identical_file(setup):
    outcome = reload_outcome(setup.broker.config, setup.reread())

    assert (outcome.added, outcome.changed, outcome.removed, outcome.at_restart) == ((),) * 4


# --- ConfigReloader --------------------------------------------------------------------------


def test_a_broken_file_keeps_the_running_config_and_logs_why(setup, caplog):
    """Goal: issue 5 item 3, a broken file changes nothing. Method: an unknown key in a topic
    section; the reloader logs the ConfigError (file, section, key) at ERROR and the broker
    keeps its topics and still takes puts."""
    reloader = ConfigReloader(setup.broker, lambda running: setup.reread())
    text = server_ini(0, setup.data_path, topics={"test": {"numPartition": 3}, "fresh": {}})
    setup.config_path.write_text(text)

    reloader.request()

    assert not reloader.running
    assert [topic.name for topic in setup.broker.config.topics] == ["test", "idle"]
    errors = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert errors[0].startswith("config reload failed, keeping the running configuration: ")
    assert str(setup.config_path) in errors[0]
    assert "[topic=test]" in errors[0] and "numPartition" in errors[0]
    assert setup.broker.partition_for_put("test", 0).topic == "test"
    assert ("set_config",) not in setup.registry.calls


def test_requests_during_a_reload_fold_into_one_more_reload(setup):
    loads: list[defer.Deferred] = []

    def load(running: BrokerConfig) -> defer.Deferred:
        loads.append(defer.Deferred())
        return loads[-1]

    reloader = ConfigReloader(setup.broker, load)
    reloader.request()
    reloader.request()
    reloader.request()
    assert len(loads) == 1

    setup.write(topics={"test": {}, "fresh": {}})
    loads[0].callback(setup.reread())
    assert len(loads) == 2
    loads[1].callback(setup.reread())

    assert len(loads) == 2
    assert not reloader.running
    assert setup.broker.config.topic_config("fresh").name == "fresh"


def test_a_config_error_from_the_loader_is_not_raised(setup):
    def load(running: BrokerConfig) -> defer.Deferred:
        return defer.fail(ConfigError("server.ini: [system] bad"))

    reloader = ConfigReloader(setup.broker, load)
    reloader.request()

    assert not reloader.running


def test_a_topic_data_path_added_by_a_reload_is_locked_against_a_second_broker(setup, tmp_path):
    other = tmp_path / "other-disk"
    setup.reload(topics={"test": {"numPartitions": 2}, "idle": {}, "fresh": {"dataPath": other}})

    with pytest.raises(StoreError, match="in use by another broker"):
        DataPathLock().acquire([other])


def test_a_reload_whose_new_data_path_is_another_brokers_is_refused(setup, tmp_path):
    other = tmp_path / "other-disk"
    second_broker = DataPathLock()
    second_broker.acquire([other])
    running = setup.broker.config

    with pytest.raises(ReloadRefused, match="in use by another broker"):
        setup.reload(topics={"test": {"numPartitions": 2}, "fresh": {"dataPath": other}})

    assert setup.broker.config is running
    with pytest.raises(StoreError, match="in use by another broker"):
        DataPathLock().acquire([setup.data_path])  # the running roots stay locked
    second_broker.release()
