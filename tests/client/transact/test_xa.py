"""The XA producer and ``XAResource`` against scripted loopback brokers.

The brokers are ``tests.client.transact.test_transaction.ScriptedBroker``s (real TCP servers on
127.0.0.1 that record the exact bytes of every request and answer from a script; ``END`` is
never answered). Topic ``t`` lives on brokers 1, 2 and 3, topic ``u`` on broker 2 only. Every
wait polls with a deadline.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from meta.client import MetaClientConfig, MetaMessageSessionFactory, Xid
from meta.client.message import Message
from meta.client.produce.selectors import RoundRobinPartitionSelector
from meta.client.produce.xa import XAMessageProducer
from meta.client.transact.transaction import parse_xid_key
from meta.errors import ClientError, NoBrokerError, TransactionError, XAError
from meta.protocol import xa as jta
from meta.protocol.commands import Put
from tests.client.transact.test_transaction import (
    WAIT_S,
    ScriptedBroker,
    no_reply,
    put_frame,
    reply,
    stub_cluster,
    wait_until,
)

XID = Xid(7, b"gt", b"b")
QUALIFIER = "XAMessageProducer-host1"
KEY = f"XID:7:6774:62:{QUALIFIER}"


@pytest.fixture
def brokers():
    started = {number: ScriptedBroker() for number in (1, 2, 3)}
    yield started
    for broker in started.values():
        broker.close()


@pytest.fixture
def cluster(brokers):
    view, pool = stub_cluster({"t": brokers, "u": {2: brokers[2]}})
    yield view, pool
    pool.close()


def xa_producer(cluster, **options) -> XAMessageProducer:
    view, pool = cluster
    options.setdefault("hostname", "host1")
    return XAMessageProducer(pool, RoundRobinPartitionSelector(), 1 << 20, view, **options)


@pytest.fixture
def producer(cluster):
    made = xa_producer(cluster, rng=random.Random(3))
    made.publish("t")
    yield made
    made.shutdown()


def broker_of(resource, brokers) -> ScriptedBroker:
    (broker,) = [b for b in brokers.values() if b.port == resource.address.port]
    return broker


def transaction_frames(broker: ScriptedBroker) -> list[bytes]:
    return [frame for frame in broker.frames() if frame.startswith(b"transaction ")]


def run_in_thread(call):
    results: list = []
    thread = threading.Thread(target=lambda: results.append(call()))
    thread.start()
    thread.join(WAIT_S)
    return results[0]


def test_xid_keys_have_the_spec_form_and_parse_back():
    xid = Xid(-1, b"\x01\xab", b"")
    assert xid.key("q") == "XID:-1:01ab::q"
    assert Xid.from_key("XID:-1:01AB::q") == xid
    assert parse_xid_key(KEY) == (XID, QUALIFIER)


@pytest.mark.parametrize("key", ["TX:s:1", "null", "XID:1:zz:00:q", "XID:1:00:00", "XID:x:0:0:q"])
def test_keys_that_are_not_xa_keys_are_refused(key):
    with pytest.raises(ClientError):
        Xid.from_key(key)


@pytest.mark.parametrize(
    "parts", [(2**31, b"", b""), (1, b"x" * 65, b""), (1, b"", "b"), (True, b"", b"")]
)
def test_an_xid_outside_the_jta_limits_is_refused(parts):
    with pytest.raises(ClientError):
        Xid(*parts)


def test_the_qualifier_defaults_to_the_java_one_and_takes_a_prefix(cluster):
    assert xa_producer(cluster).unique_qualifier == QUALIFIER
    assert xa_producer(cluster, unique_qualifier_prefix="app").unique_qualifier == "app-host1"


@pytest.mark.parametrize("bad", ["a b", "a:b", "a\tb", "a\nb", "a\rb", "", "  "])
def test_a_qualifier_with_forbidden_characters_is_refused(cluster, bad):
    with pytest.raises(ClientError):
        xa_producer(cluster, unique_qualifier_prefix=bad)
    producer = xa_producer(cluster)
    with pytest.raises(ClientError):
        producer.set_unique_qualifier(bad)  # The new value is checked (Java checked the old).
    with pytest.raises(ClientError):
        producer.set_unique_qualifier_prefix(bad)
    assert producer.unique_qualifier == QUALIFIER


def test_set_unique_qualifier_takes_a_valid_new_value(cluster):
    producer = xa_producer(cluster)
    producer.set_unique_qualifier("mine")
    producer.set_unique_qualifier_prefix("app")
    assert producer.unique_qualifier == "app-host1"


def test_the_factory_refuses_xa_in_direct_mode():
    with MetaMessageSessionFactory(MetaClientConfig(server_url="meta://127.0.0.1:1")) as factory:
        with pytest.raises(ClientError, match="ZooKeeper"):
            factory.create_xa_producer()


def test_candidates_are_the_masters_common_to_every_topic_sorted(producer, brokers):
    expected = sorted((b.address for b in brokers.values()), key=lambda a: a.uri)
    assert producer.candidate_brokers() == expected
    producer.publish("u")
    assert producer.candidate_brokers() == [brokers[2].address]
    assert producer.get_xa_resource().address == brokers[2].address


def test_without_a_common_broker_there_is_no_resource(cluster):
    producer = xa_producer(cluster)
    with pytest.raises(NoBrokerError, match="common broker"):
        producer.get_xa_resource()


def test_each_thread_gets_its_own_resource_pinned_to_a_candidate(producer):
    resource = producer.get_xa_resource()
    assert producer.get_xa_resource() is resource
    other = run_in_thread(producer.get_xa_resource)
    assert other is not resource
    assert {resource.address, other.address} <= set(producer.candidate_brokers())
    assert resource.is_same_rm(resource) and not resource.is_same_rm(object())
    assert resource.is_same_rm(other) == (other.address == resource.address)
    producer.set_unique_qualifier("another")  # Another qualifier: other broker transactions.
    for _ in range(30):  # Each thread's resource is pinned at random among three brokers.
        other = run_in_thread(producer.get_xa_resource)
        if other.address == resource.address:
            break
    assert other.address == resource.address and not resource.is_same_rm(other)


def test_a_two_phase_branch_sends_the_exact_wire_lines(producer, brokers):
    resource = producer.get_xa_resource()
    broker, sid = broker_of(resource, brokers), producer.session_id
    assert resource.set_transaction_timeout(30) and resource.get_transaction_timeout() == 30
    resource.start(XID, jta.TMNOFLAGS)
    result = producer.send_message(Message("t", b"x"))
    resource.end(XID, jta.TMSUCCESS)
    assert resource.prepare(XID) == jta.XA_OK
    resource.commit(XID, False)
    partition = result.partition.partition
    assert broker.frames() == [
        f"transaction {KEY} {sid} BEGIN 30 {QUALIFIER} 1\r\n".encode(),
        put_frame("t", partition, b"x", KEY, 2),
        f"transaction {KEY} {sid} END {QUALIFIER} 3\r\n".encode(),
        f"transaction {KEY} {sid} PREPARE {QUALIFIER} 4\r\n".encode(),
        f"transaction {KEY} {sid} COMMIT_TWO_PHASE {QUALIFIER} 5\r\n".encode(),
    ]
    assert result.success and result.offset == -1


def test_one_phase_commit_rollback_and_forget_send_their_types(producer, brokers):
    resource = producer.get_xa_resource()
    broker, sid = broker_of(resource, brokers), producer.session_id
    resource.commit(XID, True)
    resource.rollback(XID)
    resource.forget(XID)
    assert broker.frames() == [
        f"transaction {KEY} {sid} COMMIT_ONE_PHASE {QUALIFIER} 1\r\n".encode(),
        f"transaction {KEY} {sid} ROLLBACK {QUALIFIER} 2\r\n".encode(),
        f"transaction {KEY} {sid} FORGET {QUALIFIER} 3\r\n".encode(),
    ]


def test_end_waits_for_no_reply(producer, brokers):
    resource = producer.get_xa_resource()
    broker = broker_of(resource, brokers)
    resource.start(XID)
    started = time.monotonic()
    resource.end(XID, jta.TMSUCCESS)  # The broker never answers END; the timeout is 5 s.
    assert time.monotonic() - started < 1.0
    wait_until(lambda: b" END " in broker.frames()[-1], what="END on the wire")
    assert resource.associated_xid is None


def test_every_put_of_a_branch_goes_to_the_pinned_broker(producer, brokers):
    resource = producer.get_xa_resource()
    resource.start(XID)
    results = [producer.send_message(Message("t", b"m%d" % n)) for n in range(6)]
    resource.end(XID, jta.TMSUCCESS)
    pinned = broker_of(resource, brokers)
    assert {result.partition.partition for result in results} == {0, 1}
    puts = [command for command, _ in pinned.requests if isinstance(command, Put)]
    assert len(puts) == 6 and {put.tx_key for put in puts} == {KEY}
    for other in brokers.values():
        if other is not pinned:
            assert other.frames() == []


def test_sends_after_end_are_not_part_of_the_branch(producer, brokers):
    resource = producer.get_xa_resource()
    resource.start(XID)
    resource.end(XID, jta.TMSUCCESS)
    producer.send_message(Message("t", b"plain"))
    puts = [c for b in brokers.values() for c, _ in b.requests if isinstance(c, Put)]
    assert [put.tx_key for put in puts] == [None]


def test_prepare_returns_read_only_from_the_reply(producer, brokers):
    resource = producer.get_xa_resource()
    broker_of(resource, brokers).script["PREPARE"] = reply(200, b"3")
    assert resource.prepare(XID) == jta.XA_RDONLY


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (reply(500, b"XAException:code=-6,msg=Cannot call prepare now."), jta.XAER_PROTO),
        (reply(500, b"XAException:code=7,msg=null"), jta.XA_HEURCOM),
        (reply(500, b"java.lang.NullPointerException"), jta.XAER_RMERR),
        (reply(503, b"busy"), jta.XAER_RMERR),
        (reply(200, b"maybe"), jta.XAER_RMERR),
        (no_reply, jta.XAER_RMFAIL),  # Java: XA_RBTIMEOUT, which claims a rollback.
    ],
)
def test_broker_answers_map_to_xa_error_codes(producer, brokers, answer, code):
    producer.set_transaction_request_timeout(0.3)
    resource = producer.get_xa_resource()
    broker_of(resource, brokers).script["PREPARE"] = answer
    with pytest.raises(XAError) as caught:
        resource.prepare(XID)
    assert caught.value.error_code == code


def test_the_xa_error_keeps_the_broker_message(producer, brokers):
    resource = producer.get_xa_resource()
    text = b"XAException:code=-4,msg=XA transaction 'x' has not been started."
    broker_of(resource, brokers).script["COMMIT_TWO_PHASE"] = reply(500, text)
    with pytest.raises(XAError) as caught:
        resource.commit(XID, False)
    assert caught.value.error_code == jta.XAER_NOTA
    assert caught.value.message == "XA transaction 'x' has not been started."


def test_a_broker_that_is_gone_gives_rmfail(producer, brokers):
    resource = producer.get_xa_resource()
    resource.start(XID)
    broker_of(resource, brokers).close()
    with pytest.raises(XAError) as caught:
        resource.end(XID, jta.TMSUCCESS)
        resource.prepare(XID)  # END may still have left before the close was seen.
    assert caught.value.error_code == jta.XAER_RMFAIL
    assert resource.associated_xid is None


def test_start_rules_follow_the_xa_contract(producer):
    resource = producer.get_xa_resource()
    other = Xid(7, b"other", b"")
    with pytest.raises(XAError) as caught:
        resource.start(XID, jta.TMRESUME)
    assert caught.value.error_code == jta.XAER_NOTA
    with pytest.raises(XAError) as caught:
        resource.start(XID, jta.TMSUCCESS)
    assert caught.value.error_code == jta.XAER_INVAL
    resource.start(XID)
    for xid, flags in ((other, jta.TMNOFLAGS), (XID, jta.TMJOIN)):
        with pytest.raises(XAError) as caught:
            resource.start(xid, flags)
        assert caught.value.error_code == jta.XAER_DUPID


def test_start_during_a_local_transaction_is_a_protocol_error(producer):
    resource = producer.get_xa_resource()
    producer.begin_transaction()
    with pytest.raises(XAError) as caught:
        resource.start(XID)
    assert caught.value.error_code == jta.XAER_PROTO


def test_a_local_transaction_cannot_begin_while_a_branch_is_associated(producer):
    producer.get_xa_resource().start(XID)
    with pytest.raises(TransactionError, match="in progress"):
        producer.begin_transaction()


def test_suspend_and_resume_keep_the_branch_without_a_new_begin(producer, brokers):
    resource = producer.get_xa_resource()
    broker = broker_of(resource, brokers)
    resource.start(XID)
    resource.end(XID, jta.TMSUSPEND)
    producer.send_message(Message("t", b"outside"))
    resource.start(XID, jta.TMRESUME)
    producer.send_message(Message("t", b"inside"))
    resource.end(XID, jta.TMSUCCESS)
    wait_until(lambda: len(transaction_frames(broker)) == 3, what="the second END")
    kinds = [frame.split()[3] for frame in transaction_frames(broker)]
    assert kinds == [b"BEGIN", b"END", b"END"]
    puts = {c.data: c.tx_key for b in brokers.values() for c, _ in b.requests if type(c) is Put}
    assert puts == {b"outside": None, b"inside": KEY}


def test_end_rules_follow_the_xa_contract(producer, brokers):
    resource = producer.get_xa_resource()
    resource.end(XID, jta.TMSUCCESS)  # Not associated: nothing to do, nothing sent (Java).
    for flags, code in ((jta.TMSUSPEND, jta.XAER_PROTO), (jta.TMFAIL, jta.XAER_PROTO)):
        with pytest.raises(XAError) as caught:
            resource.end(XID, flags)
        assert caught.value.error_code == code
    resource.start(XID)
    with pytest.raises(XAError) as caught:
        resource.end(XID, jta.TMJOIN)
    assert caught.value.error_code == jta.XAER_INVAL
    assert [b" END " in frame for frame in broker_of(resource, brokers).frames()] == [False]


def test_prepare_or_commit_before_end_is_a_protocol_error(producer):
    resource = producer.get_xa_resource()
    resource.start(XID)
    for call in (lambda: resource.prepare(XID), lambda: resource.commit(XID, True)):
        with pytest.raises(XAError) as caught:
            call()
        assert caught.value.error_code == jta.XAER_PROTO


def test_the_transaction_timeout_must_be_a_non_negative_int(producer):
    resource = producer.get_xa_resource()
    assert resource.get_transaction_timeout() == 0
    for bad in (-1, 1.5, True):
        with pytest.raises(XAError) as caught:
            resource.set_transaction_timeout(bad)
        assert caught.value.error_code == jta.XAER_INVAL


def test_after_commit_the_thread_gets_a_fresh_resource_and_the_old_one_still_works(producer):
    resource = producer.get_xa_resource()
    resource.start(XID)
    resource.end(XID, jta.TMSUCCESS)
    resource.commit(XID, True)
    assert producer.get_xa_resource() is not resource
    second = Xid(7, b"second", b"")
    resource.start(second)  # Binds the kept resource to this thread again.
    result = producer.send_message(Message("t", b"again"))
    assert result.offset == -1
    resource.end(second, jta.TMSUCCESS)


def test_recover_merges_every_candidate_and_skips_a_failing_one(producer, brokers):
    """Goal: RECOVER goes to every candidate broker with the qualifier; the keys are merged
    without duplicates; a broker that refuses is skipped. Method: brokers 1 and 2 list
    overlapping keys, broker 3 answers 500."""
    keys = [Xid(1, bytes([n]), b"q").key(QUALIFIER) for n in range(3)]
    brokers[1].script["RECOVER"] = reply(200, f"{keys[0]}\r\n{keys[1]}".encode())
    brokers[2].script["RECOVER"] = reply(200, f"{keys[1]}\r\n{keys[2]}".encode())
    brokers[3].script["RECOVER"] = reply(500, b"disk on fire")
    recovered = producer.get_xa_resource().recover(jta.TMSTARTRSCAN | jta.TMENDRSCAN)
    assert len(recovered) == 3  # In candidate (URI) order, each once.
    assert set(recovered) == {Xid.from_key(key) for key in keys}
    sid = producer.session_id
    for broker in brokers.values():
        assert broker.frames() == [f"transaction null {sid} RECOVER {QUALIFIER} 1\r\n".encode()]


def test_recover_skips_a_broker_that_is_gone_or_silent(producer, brokers):
    key = XID.key(QUALIFIER)
    brokers[1].script["RECOVER"] = reply(200, key.encode())
    brokers[2].script["RECOVER"] = no_reply
    brokers[3].close()
    producer.set_transaction_request_timeout(0.3)
    started = time.monotonic()
    assert producer.get_xa_resource().recover(jta.TMSTARTRSCAN) == [XID]
    assert time.monotonic() - started < WAIT_S


def test_recover_of_empty_lists_is_empty_and_bad_flags_are_invalid(producer):
    resource = producer.get_xa_resource()
    assert resource.recover(jta.TMNOFLAGS) == []
    with pytest.raises(XAError) as caught:
        resource.recover(jta.TMJOIN)
    assert caught.value.error_code == jta.XAER_INVAL


def test_recover_without_candidates_is_rmfail(producer, cluster):
    resource = producer.get_xa_resource()
    view, _pool = cluster
    view.snapshots.clear()
    with pytest.raises(XAError) as caught:
        resource.recover(jta.TMSTARTRSCAN)
    assert caught.value.error_code == jta.XAER_RMFAIL


@pytest.mark.parametrize("call", ["commit2", "commit1", "rollback", "forget", "prepare"])
def test_a_request_without_reply_is_rmfail_never_a_rollback_code(producer, brokers, call):
    """Goal: a late reply leaves the branch's outcome unknown, so the transaction manager must
    hear XAER_RMFAIL (it retries or recovers), never XA_RB* (which says "rolled back": after
    a two-phase commit that may have committed, the manager would not retry). Method: the
    pinned broker never answers; each completion call fails with XAER_RMFAIL in time."""
    producer.set_transaction_request_timeout(0.3)
    resource = producer.get_xa_resource()
    broker = broker_of(resource, brokers)
    for kind in ("PREPARE", "COMMIT_ONE_PHASE", "COMMIT_TWO_PHASE", "ROLLBACK", "FORGET"):
        broker.script[kind] = no_reply
    calls = {
        "commit2": lambda: resource.commit(XID, False),
        "commit1": lambda: resource.commit(XID, True),
        "rollback": lambda: resource.rollback(XID),
        "forget": lambda: resource.forget(XID),
        "prepare": lambda: resource.prepare(XID),
    }
    started = time.monotonic()
    with pytest.raises(XAError, match="outcome is unknown") as caught:
        calls[call]()
    assert caught.value.error_code == jta.XAER_RMFAIL
    assert time.monotonic() - started < WAIT_S


@pytest.mark.parametrize("finish", ["commit", "rollback", "forget"])
def test_a_recovered_branch_is_finished_on_the_broker_that_listed_it(producer, brokers, finish):
    """Goal: after recover, commit/rollback/forget of a listed xid go to the broker holding
    it, even when this resource is pinned to another one (else that broker answers
    XAER_NOTA and the branch stays prepared forever). Method: only a broker other than the
    pinned one lists XID; the completion must reach it and nothing else."""
    resource = producer.get_xa_resource()
    pinned = broker_of(resource, brokers)
    holder = next(b for b in brokers.values() if b is not pinned)
    holder.script["RECOVER"] = reply(200, KEY.encode())
    assert resource.recover(jta.TMSTARTRSCAN | jta.TMENDRSCAN) == [XID]
    {"commit": lambda: resource.commit(XID, False), "rollback": lambda: resource.rollback(XID),
     "forget": lambda: resource.forget(XID)}[finish]()  # fmt: skip
    kind = {"commit": "COMMIT_TWO_PHASE", "rollback": "ROLLBACK", "forget": "FORGET"}[finish]
    assert f" {kind} ".encode() in holder.frames()[-1]
    assert not any(b" RECOVER " not in frame for frame in pinned.frames())
    resource.rollback(XID)  # Finished: a second call goes to the pinned broker again.
    assert b" ROLLBACK " in pinned.frames()[-1]


def test_a_same_rm_resource_joins_a_branch_it_has_not_seen(producer, brokers):
    """Goal: when is_same_rm says two resources are one resource manager, TMJOIN on the
    second works (a transaction manager joins there instead of starting a new branch), and
    both threads' puts go to the one broker transaction. Method: two threads' resources on
    the same broker; the second joins XID with TMJOIN, which sends BEGIN for the same key."""
    resource = producer.get_xa_resource()
    broker = broker_of(resource, brokers)
    for _ in range(20):  # Each thread's resource is pinned at random among three brokers.
        other = run_in_thread(producer.get_xa_resource)
        if resource.is_same_rm(other):
            break
    assert resource.is_same_rm(other)
    resource.start(XID)

    def joined() -> bool:
        other.start(XID, jta.TMJOIN)
        producer.send_message(Message("t", b"joined"))
        other.end(XID, jta.TMSUCCESS)
        return True

    assert run_in_thread(joined)
    producer.send_message(Message("t", b"first"))
    resource.end(XID, jta.TMSUCCESS)
    puts = {c.data: c.tx_key for c, _ in broker.requests if isinstance(c, Put)}
    assert puts == {b"joined": KEY, b"first": KEY}
    begins = [frame for frame in transaction_frames(broker) if b" BEGIN " in frame]
    assert len(begins) == 2 and all(f" {KEY} ".encode() in frame for frame in begins)


def test_resume_and_completion_follow_the_branch_state(producer):
    """Goal: TMRESUME takes only a suspended branch, a suspended branch cannot be prepared
    or committed (XAER_PROTO), and a prepared branch cannot be resumed (XAER_NOTA)."""
    resource = producer.get_xa_resource()
    resource.start(XID)
    resource.end(XID, jta.TMSUSPEND)
    for call in (lambda: resource.prepare(XID), lambda: resource.commit(XID, True)):
        with pytest.raises(XAError) as caught:
            call()
        assert caught.value.error_code == jta.XAER_PROTO
    resource.start(XID, jta.TMRESUME)
    resource.end(XID, jta.TMSUCCESS)
    with pytest.raises(XAError) as caught:
        resource.start(XID, jta.TMRESUME)  # Ended, not suspended.
    assert caught.value.error_code == jta.XAER_NOTA
    assert resource.prepare(XID) == jta.XA_OK
    with pytest.raises(XAError) as caught:
        resource.start(XID, jta.TMRESUME)
    assert caught.value.error_code == jta.XAER_NOTA


def test_a_begin_without_reply_is_followed_by_a_one_way_rollback(producer, brokers):
    """Goal: a BEGIN whose reply never comes may still have opened an empty branch on the
    broker, which no transaction manager will finish (start failed: the resource is not
    enlisted). Method: the pinned broker never answers BEGIN; start fails with XAER_RMFAIL
    in time, and a ROLLBACK of the same key follows the BEGIN on the wire."""
    producer.set_transaction_request_timeout(0.3)
    resource = producer.get_xa_resource()
    broker, sid = broker_of(resource, brokers), producer.session_id
    broker.script["BEGIN"] = no_reply
    with pytest.raises(XAError) as caught:
        resource.start(XID, jta.TMNOFLAGS)
    assert caught.value.error_code == jta.XAER_RMFAIL
    assert resource.associated_xid is None
    wait_until(lambda: len(transaction_frames(broker)) == 2, what="the ROLLBACK")
    assert transaction_frames(broker)[1] == (
        f"transaction {KEY} {sid} ROLLBACK {QUALIFIER} 2\r\n".encode()
    )


def test_a_join_without_reply_rolls_nothing_back(producer, brokers):
    """A TMJOIN's branch may be another resource's: a BEGIN of it that gets no reply must
    not roll it back. Method: as above with TMJOIN; then a later request shows the wire."""
    producer.set_transaction_request_timeout(0.3)
    resource = producer.get_xa_resource()
    broker = broker_of(resource, brokers)
    broker.script["BEGIN"] = no_reply
    with pytest.raises(XAError):
        resource.start(XID, jta.TMJOIN)
    resource.forget(XID)  # answered: every frame sent before it has arrived
    kinds = [frame.split(b" ")[3] for frame in transaction_frames(broker)]
    assert kinds == [b"BEGIN", b"FORGET"]
