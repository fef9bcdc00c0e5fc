"""The ZooKeeper test fixtures run a real server, and the failure helpers really fail it."""

from __future__ import annotations

import threading

from kazoo.client import KazooClient, KazooState

from tests.integration.zookeeper import (
    ZooKeeperServer,
    expire_session,
    lose_connection,
    port_is_open,
)


def test_server_answers_four_letter_words(zookeeper):
    assert zookeeper.four_letter_word("ruok") == "imok"
    assert "Mode: standalone" in zookeeper.four_letter_word("srvr")


def test_client_creates_and_reads_a_node_under_its_chroot(zookeeper, zk_root, kazoo_client):
    kazoo_client.create("/broker", b"meta://127.0.0.1:8123")
    data, _stat = kazoo_client.get("/broker")
    assert data == b"meta://127.0.0.1:8123"
    admin = KazooClient(hosts=zookeeper.connect_string)
    admin.start(timeout=10)
    try:
        assert admin.get(f"{zk_root}/broker")[0] == b"meta://127.0.0.1:8123"
    finally:
        admin.stop()
        admin.close()


def test_expire_session_loses_the_session_and_its_ephemeral_nodes(zookeeper, kazoo_client):
    """Goal: expire_session() is a real server-side expiry, not a client-side simulation.

    Method: create an ephemeral node, record every state change, expire the session, then
    check that LOST was reported, the session id changed and the node is gone for everyone.
    """
    kazoo_client.create("/ids/0", b"", ephemeral=True, makepath=True)
    old_session_id = kazoo_client.client_id[0]
    states: list[str] = []
    lock = threading.Lock()

    def record(state: str) -> None:
        with lock:
            states.append(state)

    kazoo_client.add_listener(record)

    expire_session(kazoo_client)

    with lock:
        assert KazooState.LOST in states
    assert kazoo_client.state == KazooState.CONNECTED
    assert kazoo_client.client_id[0] != old_session_id
    assert kazoo_client.exists("/ids/0") is None


def test_lose_connection_keeps_the_session(kazoo_client):
    kazoo_client.create("/alive", b"", ephemeral=True)
    session_id = kazoo_client.client_id[0]

    lose_connection(kazoo_client)

    assert kazoo_client.state == KazooState.CONNECTED
    assert kazoo_client.client_id[0] == session_id
    assert kazoo_client.exists("/alive") is not None


def test_server_stops_cleanly_and_restarts_on_the_same_port(tmp_path):
    """Goal: stop() leaves no process and no listening port; restart() brings it back.

    Method: run a private server (the session one must stay up), stop it, check the process
    was reaped and the port refuses connections, then restart and check it answers again.
    """
    server = ZooKeeperServer(tmp_path)
    server.start()
    port = server.port
    assert port_is_open(server.host, port)

    server.restart()
    assert server.port == port
    assert server.four_letter_word("ruok") == "imok"
    process = server._process

    server.stop()
    assert not server.running
    assert process.returncode is not None
    assert not port_is_open(server.host, port)
