"""A samsa master whose slave dies and comes back, with a real ZooKeeper.

Goal (sync spec §1.7 with §1.11): when the slave dies under load, puts fail with 500 within
``sendToSlaveTimeoutInMills`` plus a margin, no put is answered 200 unless the slave stored
it, the master withdraws its ``topics-pub`` and legacy ``topics/T/B-m`` nodes and keeps
``ids/B/master`` and ``topics-sub``; when the slave is back (and caught up), the nodes return
and puts succeed. Method: a real master process registered under a fresh ZooKeeper root, a
raw-socket fake slave (``FakeGregorSlave``) stopped and started again on the same port, a
producer thread pipelining puts throughout.
"""

from __future__ import annotations

import threading
import time

from meta.client import Message, MetaMessageSessionFactory
from meta.protocol.commands import Put
from meta.protocol.encoding import encode
from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.client_helpers import make_root, wait_for, zk_config
from tests.integration.fake_gregor import FakeGregorSlave
from tests.integration.test_samsa_master import MARGIN_S, TIMEOUT_MS, start_master, stats_sync

BATCH = 20


class Producer:
    """Pipelines batches of puts to the master until stopped; records every outcome as
    (code, msg_id or None, seconds from send to reply, send time)."""

    def __init__(self, master) -> None:
        self._master = master
        self.outcomes: list[tuple[int, int | None, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()

    def _run(self) -> None:
        opaque = 0
        with self._master.connect(timeout_s=30) as connection:
            while not self._stop.is_set():
                frames = []
                for _ in range(BATCH):
                    opaque += 1
                    frames.append(encode(Put("test", 0, b"load %d" % opaque, 0, opaque, -1)))
                sent_at = time.monotonic()
                connection.send_bytes(b"".join(frames))
                for _ in range(BATCH):
                    reply = connection.receive()
                    msg_id = int(reply.body.split()[0]) if reply.code == 200 else None
                    self.outcomes.append((reply.code, msg_id, time.monotonic() - sent_at, sent_at))
                time.sleep(0.005)  # a steady load, not a flood of 500s


def test_a_dead_slave_withdraws_the_master_from_producers_until_it_is_back(
    tmp_path, zookeeper, admin
):
    root = make_root(zookeeper)
    slave = FakeGregorSlave(free_port()).start()
    master = start_master(
        tmp_path / "master",
        slave.port,
        zk_connect=zookeeper.connect_string,
        zk={"zk.zkRoot": root},
        topics={"test": {}},
    )
    nodes = {
        kind: f"{root}/brokers/{kind}/test/0-m" for kind in ("topics", "topics-pub", "topics-sub")
    }
    master_node = f"{root}/brokers/ids/0/master"
    try:
        wait_for(lambda: all(admin.exists(path) for path in nodes.values()), what="registration")
        with Producer(master) as producer:
            wait_for(lambda: sum(o[0] == 200 for o in producer.outcomes) >= 200, what="load")
            slave.stop()
            killed_at = time.monotonic()
            wait_for(
                lambda: (
                    admin.exists(nodes["topics-pub"]) is None
                    and admin.exists(nodes["topics"]) is None
                ),
                what="withdrawal",
            )
            withdrawn_after = time.monotonic() - killed_at
            assert admin.exists(nodes["topics-sub"]) and admin.exists(master_node)
            wait_for(
                lambda: any(o[0] == 500 and o[3] > killed_at + 0.5 for o in producer.outcomes),
                what="refused puts",
            )
            assert "advertised false" in stats_sync(master)
            slave = restart(slave)
            wait_for(lambda: admin.exists(nodes["topics-pub"]), what="republishing")
            wait_for(lambda: admin.exists(nodes["topics"]), what="legacy node")
            resumed = len(producer.outcomes)
            wait_for(
                lambda: sum(o[0] == 200 for o in producer.outcomes[resumed:]) >= 100,
                what="puts after the slave's return",
            )
        stored = {sync.msg_id for sync in slave.syncs}
        acknowledged = [
            msg_id for code, msg_id, _latency, _sent in producer.outcomes if code == 200
        ]
        assert set(acknowledged) <= stored  # no 200 without the slave's copy
        slowest = max(latency for _code, _id, latency, _sent in producer.outcomes)
        assert slowest <= TIMEOUT_MS / 1000 + MARGIN_S
        assert withdrawn_after <= TIMEOUT_MS / 1000 + MARGIN_S + 5  # plus ZooKeeper's time
        assert admin.exists(nodes["topics-sub"]) and admin.exists(master_node)
        lines = stats_sync(master)
        assert "advertised true" in lines and "connected true" in lines
    finally:
        master.stop()
        slave.stop()


def restart(slave: FakeGregorSlave) -> FakeGregorSlave:
    """A slave back on the same port with every record the dead one stored (a restart)."""
    back = FakeGregorSlave(slave.port)
    back.ends = dict(slave.ends)
    back.syncs = list(slave.syncs)
    return back.start()


def test_a_zookeeper_producer_moves_to_another_broker_while_the_master_is_withdrawn(
    tmp_path, zookeeper, admin
):
    """Goal: withdrawing the master from producers makes a ZooKeeper producer send to the
    topic's other broker, and republishing brings the master back into its choice. Method: a
    samsa master (broker 0) and a plain broker 1 serve the topic; the client library's
    producer sends before, while and after the slave is down."""
    root = make_root(zookeeper)
    slave = FakeGregorSlave(free_port()).start()
    zk = {"zk.zkRoot": root}
    master = start_master(
        tmp_path / "master", slave.port, zk_connect=zookeeper.connect_string, zk=zk
    )
    other = BrokerProcess(
        tmp_path / "other",
        system={"brokerId": 1},
        zk_connect=zookeeper.connect_string,
        zk=zk,
    ).start()
    factory = MetaMessageSessionFactory(zk_config(zookeeper, root))
    try:
        producer = factory.create_producer()
        producer.publish("test")

        def brokers_used(count: int) -> set[int] | None:
            """The brokers ``count`` sends went to; None if one failed (the master refuses
            puts until the producer sees it withdrawn)."""
            results = [producer.send_message(Message("test", b"m")) for _ in range(count)]
            if not all(result.success for result in results):
                return None
            return {result.partition.broker_id for result in results}

        wait_for(lambda: brokers_used(20) == {0, 1}, what="both brokers in use")
        slave.stop()
        wait_for(lambda: admin.exists(f"{root}/brokers/topics-pub/test/0-m") is None)
        wait_for(lambda: brokers_used(20) == {1}, what="the producer leaving the master")
        slave = FakeGregorSlave(slave.port).start()
        wait_for(lambda: brokers_used(20) == {0, 1}, what="the producer back on the master")
    finally:
        factory.shutdown()
        other.stop()
        master.stop()
        slave.stop()
