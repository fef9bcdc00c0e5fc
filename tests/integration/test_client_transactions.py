"""Local and XA transactions of the client against a real ZooKeeper and real brokers.

One module cluster: brokers 1 and 2 with 2 partitions per topic under a ZooKeeper root of
their own; every test uses its own topic (and its own XA qualifier, so ``recover`` sees only
its branches). Visibility is checked by pulling every partition from offset 0 with ``get``:
a committed batch must be readable, a rolled-back or uncommitted one never. The two-broker
tests drive a tiny two-phase-commit coordinator written here. Every wait polls a condition
with a deadline.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from meta.client import Message, MetaMessageSessionFactory, Xid
from meta.client.produce.xa import XAMessageProducer, XAResource
from meta.protocol import xa as jta
from tests.integration.client_helpers import broker_cluster, wait_for, zk_config

NAMES = ("local-commit", "local-rollback", "local-context", "xa-branch", "xa-recover", "xa-two")
NAMES += ("xa-pipelined",)
TOPICS = {name: {"numPartitions": 2} for name in NAMES}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    with broker_cluster(tmp_path_factory, zookeeper, TOPICS, numPartitions=2) as (root, brokers):
        yield root, brokers


@pytest.fixture
def factory(zookeeper, cluster):
    root, _brokers = cluster
    made = MetaMessageSessionFactory(zk_config(zookeeper, root))
    yield made
    made.shutdown()


def visible(factory, topic: str) -> list[bytes]:
    """Every message of ``topic`` that a consumer can read now, sorted (pull gets from 0;
    a partition nothing was ever written to answers 404, which ``get`` gives as None)."""
    found: list[bytes] = []
    for partition in factory.get_partitions_for_topic(topic):
        offset = 0
        while (batch := factory.get(topic, partition, offset)) is not None:
            messages = [message.data for message in batch]
            if not messages:
                break
            found += messages
            offset += batch.offset
    return sorted(found)


def new_xid() -> Xid:
    return Xid(0x4D51, uuid.uuid4().bytes, b"branch")


def xa_producer(factory, topic: str) -> XAMessageProducer:
    producer = factory.create_xa_producer(unique_qualifier_prefix=f"q{uuid.uuid4().hex[:12]}")
    producer.publish(topic)
    return producer


def resource_on(producer: XAMessageProducer, uri: str) -> XAResource:
    """A resource pinned to ``uri``: a thread's first resource is pinned at random, so ask
    fresh threads until one lands there (64 tries: a miss has odds of 2**-64)."""
    for _ in range(64):
        found: list[XAResource] = []
        thread = threading.Thread(target=lambda into=found: into.append(producer.get_xa_resource()))
        thread.start()
        thread.join(10)
        if found and found[0].address.uri == uri:
            return found[0]
    raise AssertionError(f"no resource was pinned to {uri}")


def test_a_committed_local_transaction_becomes_visible_at_once(factory):
    producer = factory.create_producer()
    producer.publish("local-commit")
    producer.begin_transaction(timeout=30)
    results = [producer.send_message(Message("local-commit", b"c%d" % n)) for n in range(5)]
    assert all(result.success and result.offset == -1 for result in results)
    assert len({result.partition.broker_id for result in results}) == 1
    assert visible(factory, "local-commit") == []
    producer.commit()
    assert visible(factory, "local-commit") == [b"c%d" % n for n in range(5)]


def test_a_rolled_back_local_transaction_is_never_visible(factory):
    producer = factory.create_producer()
    producer.publish("local-rollback")
    producer.begin_transaction()
    for n in range(4):
        assert producer.send_message(Message("local-rollback", b"r%d" % n)).success
    producer.rollback()
    with producer.begin_transaction():
        producer.send_message(Message("local-rollback", b"kept"))
    assert visible(factory, "local-rollback") == [b"kept"]


def test_the_context_manager_rolls_back_when_the_block_raises(factory):
    producer = factory.create_producer()
    producer.publish("local-context")
    with pytest.raises(RuntimeError, match="abort"):
        with producer.begin_transaction(timeout=30):
            producer.send_message(Message("local-context", b"lost"))
            raise RuntimeError("abort")
    assert producer.current_transaction() is None
    with producer.begin_transaction(timeout=30):
        producer.send_message(Message("local-context", b"saved"))
    assert visible(factory, "local-context") == [b"saved"]


def test_an_xa_branch_commits_in_two_phases(factory):
    producer = xa_producer(factory, "xa-branch")
    resource = producer.get_xa_resource()
    xid = new_xid()
    resource.start(xid, jta.TMNOFLAGS)
    results = [producer.send_message(Message("xa-branch", b"x%d" % n)) for n in range(3)]
    resource.end(xid, jta.TMSUCCESS)
    assert {result.partition.broker_id for result in results} == {
        _broker_id(factory, "xa-branch", resource)
    }
    assert resource.prepare(xid) == jta.XA_OK
    assert visible(factory, "xa-branch") == []
    resource.commit(xid, False)
    assert visible(factory, "xa-branch") == [b"x0", b"x1", b"x2"]


def test_pipelined_puts_of_an_xa_branch_on_a_named_broker_commit_together(factory, cluster):
    """``get_xa_resource_on`` pins the branch to the broker named; ``send_message_async``
    inside the branch keeps many puts in flight, all of them in the branch, in order."""
    producer = xa_producer(factory, "xa-pipelined")
    uri = sorted(address.uri for address in producer.candidate_brokers())[1]
    resource = producer.get_xa_resource_on(uri)
    xid = new_xid()
    resource.start(xid)
    futures = [
        producer.send_message_async(Message("xa-pipelined", b"p%03d" % n)) for n in range(200)
    ]
    results = [future.result(10) for future in futures]
    resource.end(xid)
    assert all(result.success for result in results)
    assert {result.partition.broker_id for result in results} == {
        _broker_id(factory, "xa-pipelined", resource)
    }
    ids = [result.msg_id for result in results]  # the broker took them in the order sent
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    resource.prepare(xid)
    assert visible(factory, "xa-pipelined") == []
    resource.commit(xid, False)
    assert visible(factory, "xa-pipelined") == [b"p%03d" % n for n in range(200)]


def _broker_id(factory, topic: str, resource: XAResource) -> int:
    brokers = factory._view.snapshot(topic).brokers  # noqa: SLF001 - a test looks inside
    (broker_id,) = [b for b, address in brokers.items() if address.uri == resource.address.uri]
    return broker_id


def test_recover_lists_a_prepared_branch_until_it_completes(factory):
    producer = xa_producer(factory, "xa-recover")
    resource = producer.get_xa_resource()
    xid = new_xid()
    resource.start(xid)
    producer.send_message(Message("xa-recover", b"pending"))
    resource.end(xid, jta.TMSUCCESS)
    assert resource.prepare(xid) == jta.XA_OK
    assert resource.recover(jta.TMSTARTRSCAN | jta.TMENDRSCAN) == [xid]
    other = xa_producer(factory, "xa-recover")  # another qualifier sees none of it
    assert xid not in other.get_xa_resource().recover(jta.TMSTARTRSCAN)
    resource.rollback(xid)
    assert resource.recover(jta.TMSTARTRSCAN | jta.TMENDRSCAN) == []
    assert visible(factory, "xa-recover") == []


def coordinate(producer, branches, commit: bool) -> None:
    """A two-phase-commit coordinator: run every branch (start, send, end), prepare all, then
    commit all (two-phase) only if ``commit`` and every vote is XA_OK, else roll back all."""
    for resource, xid, payloads in branches:
        resource.start(xid)
        for payload in payloads:
            assert producer.send_message(Message("xa-two", payload)).success
        resource.end(xid, jta.TMSUCCESS)
    votes = [resource.prepare(xid) for resource, xid, _payloads in branches]
    for resource, xid, _payloads in branches:
        if commit and all(vote == jta.XA_OK for vote in votes):
            resource.commit(xid, False)
        else:
            resource.rollback(xid)


@pytest.mark.parametrize("commit", [True, False], ids=["all-commit", "all-rollback"])
def test_a_two_phase_commit_across_two_brokers_is_all_or_nothing(factory, cluster, commit):
    """Goal: one global transaction over both brokers is atomic. Method: two branches of one
    gtrid, pinned to broker 1 and broker 2, run by ``coordinate``; consumers then see every
    message of the run (commit) or none (rollback), and during the run none at all."""
    _root, brokers = cluster
    producer = xa_producer(factory, "xa-two")
    run = uuid.uuid4().hex[:8].encode()
    gtrid = uuid.uuid4().bytes
    branches = [
        (
            resource_on(producer, f"meta://127.0.0.1:{broker.port}"),
            Xid(0x4D51, gtrid, b"b%d" % number),
            [run + b"-%d-%d" % (number, n) for n in range(3)],
        )
        for number, broker in enumerate(brokers)
    ]
    before = set(visible(factory, "xa-two"))
    coordinate(producer, branches, commit)
    expected = {payload for _r, _x, payloads in branches for payload in payloads}
    if commit:
        wait_for(lambda: expected <= set(visible(factory, "xa-two")), what="every message")
    new = set(visible(factory, "xa-two")) - before
    assert new == (expected if commit else set())
    for resource, _xid, _payloads in branches:
        assert resource.recover(jta.TMSTARTRSCAN) == []
