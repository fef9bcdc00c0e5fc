"""Who may send ``sync`` to a gregor slave (``meta.sync.peers``), in one process.

Goal: the address rule (a master on this host may come from a loopback or own address, no
other loopback address), the secret's hello (right, wrong, replayed, missing) and what a
refused connection gets (403 naming the reason, nothing stored, one log line per refusal
within the limit). Method: ``tests.sync.test_gregor.Slave``, an in-memory gregor slave whose
master is 192.168.1.1, fed the bytes a master sends.
"""

from __future__ import annotations

from meta.protocol.codec import encode
from meta.protocol.commands import Stats
from meta.sync.peers import LOCAL_SOURCES, master_addresses, sync_hello
from tests.sync.test_gregor import MASTER, Slave, replies, sync

OWN = ["10.1.2.3", "fe80::1%eth0"]


def test_a_remote_master_is_accepted_from_its_addresses_only():
    accepted = master_addresses("m.example", resolve=lambda host: ["10.9.9.9"], own=OWN)
    assert accepted == frozenset({"10.9.9.9"})


def test_a_master_on_this_host_may_come_from_loopback_or_an_own_address():
    for names in (["127.0.0.1"], ["10.1.2.3"], ["::ffff:127.0.0.1"]):
        accepted = master_addresses("here", resolve=lambda host, n=names: n, own=OWN)
        assert LOCAL_SOURCES | {"10.1.2.3", "fe80::1"} <= accepted
        assert "127.0.0.2" not in accepted


def test_a_sync_from_another_address_gets_403_and_is_not_stored(tmp_path):
    slave = Slave(str(tmp_path / "slave"))
    protocol, transport = slave.connect(peer="192.168.1.7")
    protocol.dataReceived(sync(1, 1) + sync(2, 2))
    protocol.dataReceived(sync(3, 3))
    slave.executor.run_all()
    got = replies(transport)
    assert [(r.opaque, r.code) for r in got] == [(1, 403), (2, 403), (3, 403)]
    assert got[0].body.decode() == (
        f"sync is accepted only from the master {MASTER} (not from 192.168.1.7)"
    )
    assert all(log.max_offset == 0 for log in slave.broker.store.partitions())
    assert slave.warned == ["192.168.1.7"] * 2  # one refusal per read
    master, master_transport = slave.connect()
    master.dataReceived(sync(4, 4))
    slave.executor.run_all()
    assert [(r.opaque, r.code) for r in replies(master_transport)] == [(4, 200)]


def hello(secret: str, nonce: str | None = None) -> bytes:
    return encode(Stats(sync_hello(secret, nonce), 9))


def test_with_a_secret_only_a_connection_that_proved_it_may_sync(tmp_path):
    slave = Slave(str(tmp_path / "slave"), secret="s3cret")
    none, none_transport = slave.connect()
    none.dataReceived(sync(1, 1))
    wrong, wrong_transport = slave.connect()
    wrong.dataReceived(hello("other") + sync(2, 2))
    right, right_transport = slave.connect()
    nonce = "ab" * 16
    right.dataReceived(hello("s3cret", nonce) + sync(3, 3))
    replayed, replayed_transport = slave.connect()
    replayed.dataReceived(hello("s3cret", nonce) + sync(4, 4))
    slave.executor.run_all()
    (refused,) = replies(none_transport)
    assert refused.code == 403 and "sent no sync-hello" in refused.body.decode()
    assert [r.code for r in replies(wrong_transport)] == [403, 403]
    assert [r.code for r in replies(right_transport)] == [200, 200]
    assert [r.code for r in replies(replayed_transport)] == [403, 403]
    assert sum(log.max_offset > 0 for log in slave.broker.store.partitions()) == 1


def test_a_wrong_hello_takes_back_an_accepted_master_connection(tmp_path):
    slave = Slave(str(tmp_path / "slave"), secret="s3cret")
    protocol, transport = slave.connect()
    protocol.dataReceived(hello("s3cret") + sync(1, 1))
    protocol.dataReceived(hello("other") + sync(2, 2))
    slave.executor.run_all()
    got = [(r.opaque, r.code) for r in replies(transport)]
    assert sorted(got) == [(1, 200), (2, 403), (9, 200), (9, 403)]


def test_the_configured_master_is_read_as_host_or_host_port():
    from meta.config import GregorConfig
    from meta.sync.peers import SyncPeers

    for master in ("[::1]:8123", "[::1]", "127.0.0.1:8123", "localhost"):
        peers = SyncPeers.from_config(GregorConfig(master=master), lambda c: True, print)
        assert peers.master == master
        assert LOCAL_SOURCES <= peers.accepted, master
        assert "127.0.0.2" not in peers.accepted
