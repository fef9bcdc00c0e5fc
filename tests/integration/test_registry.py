"""``BrokerRegistry`` against a real ZooKeeper: nodes, payloads, session loss, stale nodes, stop.

Each test uses its own ``zk_root`` as ``zk.zkRoot`` and reads the tree through the
``kazoo_client`` fixture, which is chrooted there, so paths below start at ``/brokers``. The
registry runs on the real reactor in a background thread (``tests/reactor_thread.py``); every
wait is bounded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from meta.config import BrokerConfig, load_config
from meta.server.registry import BrokerRegistry, RegistryError, topic_payload
from tests.integration.zookeeper import expire_session, lose_connection
from tests.reactor_thread import ReactorThread, reactor_thread

URI = "meta://127.0.0.1:8123"
SESSION_TIMEOUT_MS = 4000
WAIT_S = 15.0


def server_ini(zk_connect: str, zk_root: str, data_path: Path, **options: object) -> str:
    """A server.ini; ``system``/``zk`` dicts add keys, ``topics`` maps section -> keys."""
    system = {
        "brokerId": 0,
        "numPartitions": 2,
        "dataPath": data_path,
        "unflushThreshold": 0,
        "unflushInterval": 10000,
        "maxSegmentSize": 1024 * 1024,
        "maxTransferSize": 1024 * 1024,
    }
    system.update(options.get("system", {}))
    zk = {
        "zk.zkConnect": zk_connect,
        "zk.zkRoot": zk_root,
        "zk.zkSessionTimeoutMs": SESSION_TIMEOUT_MS,
        "zk.zkConnectionTimeoutMs": 5000,
        "zk.zkSyncTimeMs": 0,
    }
    zk.update(options.get("zk", {}))
    topics = options.get("topics", {"alpha": {"numPartitions": 4}})
    lines = ["[system]", *(f"{k}={v}" for k, v in system.items()), "[zookeeper]"]
    lines += [f"{k}={v}" for k, v in zk.items()]
    for name, keys in topics.items():
        lines += [f"[topic={name}]", *(f"{k}={v}" for k, v in keys.items())]
    return "\n".join(lines) + "\n"


def wait_until(predicate: Callable[[], object], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s} s")
        time.sleep(0.05)


@pytest.fixture
def reactor() -> ReactorThread:
    return reactor_thread()


@pytest.fixture
def make_config(tmp_path, zookeeper, zk_root) -> Callable[..., BrokerConfig]:
    counter = iter(range(1000))

    def make(**options: object) -> BrokerConfig:
        path = tmp_path / f"server-{next(counter)}.ini"
        ini = server_ini(zookeeper.connect_string, zk_root, tmp_path / "data", **options)
        path.write_text(ini)
        return load_config(str(path))

    return make


class Registries:
    """Builds registries on the reactor thread, records their kazoo clients, stops them all."""

    def __init__(self, reactor: ReactorThread) -> None:
        self.reactor = reactor
        self.created: list[BrokerRegistry] = []
        self.clients: dict[BrokerRegistry, list[KazooClient]] = {}

    def new(self, config: BrokerConfig, slave_id: int = -1, **kwargs) -> BrokerRegistry:
        box: list[KazooClient] = []

        def factory(**client_args) -> KazooClient:
            box.append(KazooClient(**client_args))
            return box[0]

        registry = BrokerRegistry(
            config, self.reactor.reactor, URI, slave_id, kazoo_factory=factory, **kwargs
        )
        self.created.append(registry)
        self.clients[registry] = box
        return registry

    def start(self, registry: BrokerRegistry, topics: Iterable[str] = ()) -> None:
        self.reactor.call(registry.start, topics)

    def client(self, registry: BrokerRegistry) -> KazooClient:
        return self.clients[registry][0]

    def session(self, registry: BrokerRegistry) -> int:
        return self.client(registry).client_id[0]

    def stop_all(self) -> None:
        for registry in self.created:
            self.reactor.call(registry.stop)


@pytest.fixture
def registries(reactor) -> Iterator[Registries]:
    made = Registries(reactor)
    try:
        yield made
    finally:
        made.stop_all()


def text(admin: KazooClient, path: str) -> str:
    return admin.get(path)[0].decode()


def owner(admin: KazooClient, path: str) -> int:
    return admin.get(path)[1].ephemeralOwner


def broker_nodes(topics: dict[str, int], suffix: str = "0-m") -> dict[str, str]:
    """Every node a broker writes for ``topics`` (name -> partitions), with its payload."""
    nodes: dict[str, str] = {}
    for topic, count in topics.items():
        nodes[f"/brokers/topics/{topic}/{suffix}"] = str(count)
        nodes[f"/brokers/topics-pub/{topic}/{suffix}"] = topic_payload(count, suffix)
        nodes[f"/brokers/topics-sub/{topic}/{suffix}"] = topic_payload(count, suffix)
    return nodes


def test_master_registers_every_node_with_the_spec_payload(make_config, registries, kazoo_client):
    """Goal: after start, every node of zk spec 1.2 exists with its exact payload and kind.

    Method: a config with one topic section and a wildcard section, plus one topic known only
    from its store directory; read every node back and check data and ephemeralOwner.
    """
    config = make_config(topics={"alpha": {"numPartitions": 4}, "meta-*": {"numPartitions": 3}})
    registry = registries.new(config)
    registries.start(registry, ["stored", "alpha"])
    session = registries.session(registry)
    admin = kazoo_client

    assert text(admin, "/brokers/ids/0") == URI
    assert owner(admin, "/brokers/ids/0") == 0
    assert text(admin, "/brokers/ids/0/master") == URI
    assert owner(admin, "/brokers/ids/0/master") == session
    assert text(admin, "/brokers/ids/0/master_config_checksum") == str(config.checksum)
    assert owner(admin, "/brokers/ids/0/master_config_checksum") == session
    assert sorted(admin.get_children("/brokers/ids/0")) == ["master", "master_config_checksum"]
    for topic, count in {"alpha": 4, "meta-*": 3, "stored": 2}.items():
        assert text(admin, f"/brokers/topics/{topic}/0-m") == str(count)
        for kind in ("topics-pub", "topics-sub"):
            path = f"/brokers/{kind}/{topic}/0-m"
            assert json.loads(text(admin, path)) == {"numParts": count, "broker": "0-m"}
            assert text(admin, path).startswith('{"numParts":')
            assert owner(admin, path) == session
        assert owner(admin, f"/brokers/topics/{topic}/0-m") == session
        assert owner(admin, f"/brokers/topics-pub/{topic}") == 0
    assert sorted(registry.registered_topics) == ["alpha", "meta-*", "stored"]
    assert registry.connected


def test_topic_without_accept_publish_has_only_topics_and_topics_sub(
    make_config, registries, kazoo_client
):
    config = make_config(topics={"quiet": {"numPartitions": 1, "acceptPublish": "false"}})
    registries.start(registries.new(config))

    assert kazoo_client.exists("/brokers/topics-pub/quiet/0-m") is None
    assert text(kazoo_client, "/brokers/topics/quiet/0-m") == "1"
    assert json.loads(text(kazoo_client, "/brokers/topics-sub/quiet/0-m")) == {
        "numParts": 1,
        "broker": "0-m",
    }


def test_slave_registers_its_own_nodes_and_no_master_nodes(make_config, registries, kazoo_client):
    registry = registries.new(make_config(), slave_id=1)
    registries.start(registry)
    session = registries.session(registry)

    assert text(kazoo_client, "/brokers/ids/0/slave1") == URI
    assert owner(kazoo_client, "/brokers/ids/0/slave1") == session
    assert kazoo_client.get_children("/brokers/ids/0") == ["slave1"]
    assert text(kazoo_client, "/brokers/ids/0") == ""
    for path, payload in broker_nodes({"alpha": 4}, suffix="0-s1").items():
        assert text(kazoo_client, path) == payload
        assert owner(kazoo_client, path) == session
    assert kazoo_client.exists("/brokers/topics/alpha/0-m") is None


def test_after_session_expiry_every_node_comes_back_in_the_new_session(
    make_config, registries, kazoo_client
):
    """Goal: zk spec 1.3 step 4, a new session registers everything again.

    Method: register, expire the registry's session on the server (the helper's session-steal
    trick), then wait until every node exists again, owned by the client's new session.
    """
    config = make_config()
    registry = registries.new(config)
    registries.start(registry, ["extra"])
    old_session = registries.session(registry)
    registries.reactor.call(registry.register_topic, "dynamic")
    expected = broker_nodes({"alpha": 4, "extra": 2, "dynamic": 2})
    expected["/brokers/ids/0/master"] = URI
    expected["/brokers/ids/0/master_config_checksum"] = str(config.checksum)

    expire_session(registries.client(registry))
    new_session = registries.session(registry)
    assert new_session != old_session

    def all_back() -> bool:
        for path, payload in expected.items():
            found = kazoo_client.exists(path)
            if found is None or found.ephemeralOwner != new_session:
                return False
            assert text(kazoo_client, path) == payload
        return True

    wait_until(all_back, "re-registration after session expiry")
    wait_until(lambda: registry.connected, "registry reporting connected")
    assert text(kazoo_client, "/brokers/ids/0") == URI


def test_a_lost_connection_on_the_same_session_keeps_the_nodes(
    make_config, registries, kazoo_client
):
    registry = registries.new(make_config())
    registries.start(registry)
    session = registries.session(registry)
    created = kazoo_client.exists("/brokers/ids/0/master").czxid

    lose_connection(registries.client(registry))

    wait_until(lambda: registry.connected, "registry reporting connected")
    assert registries.session(registry) == session
    assert kazoo_client.exists("/brokers/ids/0/master").czxid == created


def test_stop_removes_everything_the_broker_created(make_config, registries, kazoo_client):
    registry = registries.new(make_config())
    registries.start(registry, ["stored"])
    registries.reactor.call(registry.register_topic, "dynamic")

    registries.reactor.call(registry.stop)

    assert kazoo_client.exists("/brokers/ids/0") is None
    for path in broker_nodes({"alpha": 4, "stored": 2, "dynamic": 2}):
        assert kazoo_client.exists(path) is None
    assert registries.client(registry).state == "LOST"
    registries.reactor.call(registry.stop)  # Idempotent.


def test_master_stop_clears_ids_node_while_a_slave_is_registered(
    make_config, registries, kazoo_client
):
    master = registries.new(make_config())
    slave = registries.new(make_config(), slave_id=2)
    registries.start(master)
    registries.start(slave)

    registries.reactor.call(master.stop)

    assert text(kazoo_client, "/brokers/ids/0") == ""
    assert kazoo_client.get_children("/brokers/ids/0") == ["slave2"]
    assert kazoo_client.exists("/brokers/topics/alpha/0-m") is None
    assert kazoo_client.exists("/brokers/topics/alpha/0-s2") is not None


CRASHING_HOLDER = textwrap.dedent(
    """
    import sys, time
    from kazoo.client import KazooClient
    client = KazooClient(hosts=sys.argv[1], timeout=1.0)
    client.start(timeout=10)
    client.create(sys.argv[2], sys.argv[3].encode(), ephemeral=True, makepath=True)
    print(hex(client.client_id[0]), flush=True)
    time.sleep(60)
    """
)


def test_start_waits_out_a_stale_master_node_of_a_crashed_broker(
    make_config, registries, kazoo_client, zookeeper, zk_root
):
    """Goal: DECISIONS 6, a stale ephemeral master node delays start instead of failing it.

    Method: another process creates ``ids/0/master`` and is killed with SIGKILL, so its
    session ends only when the server expires it (after about 1 s). ``start`` must then
    succeed, with the node owned by the registry's session.
    """
    path = f"{zk_root}/brokers/ids/0/master"
    holder = subprocess.Popen(
        [sys.executable, "-c", CRASHING_HOLDER, zookeeper.connect_string, path, "meta://old:1"],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline().startswith(b"0x")
    finally:
        holder.kill()
        holder.wait(WAIT_S)
    assert text(kazoo_client, "/brokers/ids/0/master") == "meta://old:1"
    registry = registries.new(make_config())

    registries.start(registry)

    assert text(kazoo_client, "/brokers/ids/0/master") == URI
    assert owner(kazoo_client, "/brokers/ids/0/master") == registries.session(registry)


def test_start_fails_clearly_while_another_live_broker_holds_the_master_node(
    make_config, registries, kazoo_client
):
    kazoo_client.create("/brokers/ids/0/master", b"meta://other:1", ephemeral=True, makepath=True)
    registry = registries.new(make_config(), stale_wait_s=1.0)

    with pytest.raises(RegistryError, match="another broker with id 0 .* at meta://other:1"):
        registries.start(registry)

    assert text(kazoo_client, "/brokers/ids/0/master") == "meta://other:1"
    assert owner(kazoo_client, "/brokers/ids/0/master") == kazoo_client.client_id[0]
    assert kazoo_client.exists("/brokers/topics/alpha/0-m") is None
    assert registries.client(registry).state == "LOST"


def test_forced_registration_rewrites_only_a_changed_topic(make_config, registries, kazoo_client):
    """Goal: zk spec 1.3 step 3, a reload re-creates the nodes of a changed topic only, in
    one transaction.

    Method: register two topics; reload a config where only ``beta`` has more partitions;
    force both. ``beta``'s nodes are new (czxid) with the new count, all three created by the
    same ZooKeeper transaction (one czxid), so no reader saw them missing; ``alpha``'s are
    untouched.
    """
    topics = {"alpha": {"numPartitions": 4}, "beta": {"numPartitions": 2}}
    registry = registries.new(make_config(topics=topics))
    registries.start(registry)
    before = {
        path: kazoo_client.exists(path).czxid for path in broker_nodes({"alpha": 4, "beta": 2})
    }

    reloaded = make_config(topics={**topics, "beta": {"numPartitions": 8}})
    registries.reactor.call(registry.set_config, reloaded)
    for topic in ("alpha", "beta"):
        registries.reactor.call(registry.register_topic, topic, force=True)
    registries.reactor.call(registry.update_config_checksum, reloaded.checksum)

    for path, payload in broker_nodes({"alpha": 4}).items():
        assert text(kazoo_client, path) == payload
        assert kazoo_client.exists(path).czxid == before[path]
    for path, payload in broker_nodes({"beta": 8}).items():
        assert text(kazoo_client, path) == payload
        assert kazoo_client.exists(path).czxid > before[path]
    assert len({kazoo_client.exists(path).czxid for path in broker_nodes({"beta": 8})}) == 1
    checksum = text(kazoo_client, "/brokers/ids/0/master_config_checksum")
    assert checksum == str(reloaded.checksum)
    assert registry.registered_topics["beta"].num_partitions == 8


def test_reload_without_accept_publish_deletes_the_topics_pub_node(
    make_config, registries, kazoo_client
):
    registry = registries.new(make_config())
    registries.start(registry)
    reloaded = make_config(topics={"alpha": {"numPartitions": 4, "acceptPublish": "false"}})

    registries.reactor.call(registry.set_config, reloaded)
    registries.reactor.call(registry.register_topic, "alpha", force=True)

    assert kazoo_client.exists("/brokers/topics-pub/alpha/0-m") is None
    assert text(kazoo_client, "/brokers/topics-sub/alpha/0-m") == topic_payload(4, "0-m")


def test_a_reload_that_changes_no_node_payload_writes_nothing(
    make_config, registries, kazoo_client
):
    """A changed flush setting is not in any node: the topic's nodes keep their zxids."""
    registry = registries.new(make_config())
    registries.start(registry)
    paths = list(broker_nodes({"alpha": 4}))
    before = {path: kazoo_client.exists(path) for path in paths}
    reloaded = make_config(topics={"alpha": {"numPartitions": 4, "unflushThreshold": 7}})

    registries.reactor.call(registry.set_config, reloaded)
    registries.reactor.call(registry.register_topic, "alpha", force=True)

    assert registry.registered_topics["alpha"].unflush_threshold == 7
    assert {path: kazoo_client.exists(path) for path in paths} == before


def test_unforced_registration_of_a_registered_topic_writes_nothing(
    make_config, registries, kazoo_client
):
    registry = registries.new(make_config())
    registries.start(registry)
    created = kazoo_client.exists("/brokers/topics/alpha/0-m").czxid

    registries.reactor.call(registry.register_topic, "alpha")
    registries.reactor.call(registry.register_topic, "alpha", force=True)

    assert kazoo_client.exists("/brokers/topics/alpha/0-m").czxid == created


def test_start_names_the_connect_string_when_zookeeper_is_unreachable(make_config, registries):
    config = make_config(zk={"zk.zkConnect": "127.0.0.1:1", "zk.zkConnectionTimeoutMs": 500})
    registry = registries.new(config)

    with pytest.raises(RegistryError, match="cannot connect to ZooKeeper at 127.0.0.1:1"):
        registries.start(registry)


def test_disabled_zookeeper_makes_every_method_a_no_op(make_config, registries):
    registry = registries.new(make_config(zk={"zk.zkEnable": "false"}))

    for call in (
        lambda: registry.start(["x"]),
        lambda: registry.register_topic("x"),
        lambda: registry.update_config_checksum(1),
        registry.stop,
    ):
        assert call().called
    assert registries.clients[registry] == []
