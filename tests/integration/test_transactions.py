"""Transactions against real broker processes: golden replies, atomicity, bad input, drops.

One module broker (no ZooKeeper needed) serves the tests that do not restart it; the
crash matrix lives in ``test_transaction_crashes.py``. Replies are compared byte for byte
with the wire spec §2.7.2 where the spec fixes them.
"""

from __future__ import annotations

import socket
import time

import pytest

from meta.client.net.connection import BrokerConnection, ConnectionClosedError
from meta.protocol.commands import Get, Put, Result, Transaction, Version
from meta.protocol.message import checksum, iter_messages
from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import wait_for

TOPIC = "tx"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(
        tmp_path_factory.mktemp("tx-broker"),
        system={"numPartitions": 2},
        topics={TOPIC: {}, "other": {}},
    ).start()
    yield process
    process.stop()


@pytest.fixture
def wire(broker):
    with broker.connect() as connection:
        yield Wire(connection)


class Wire:
    """Transaction commands and puts on one raw connection."""

    def __init__(self, connection: BrokerConnection, session: str = "sid") -> None:
        self.connection = connection
        self.session = session

    def tx(self, key: str, type_: str, timeout: int = 0, qualifier: str | None = None):
        command = Transaction(
            key, self.session, type_, self.connection.next_opaque(), timeout, qualifier
        )
        return self.connection.request(command)

    def put(self, key: str | None, partition: int, data: bytes, topic: str = TOPIC):
        command = Put(topic, partition, data, 0, self.connection.next_opaque(), checksum(data), key)
        return self.connection.request(command)

    def messages(self, partition: int, topic: str = TOPIC) -> list[bytes]:
        reply = self.connection.request(
            Get(topic, "g", partition, 0, 1 << 20, self.connection.next_opaque())
        )
        if isinstance(reply, Result):
            assert reply.code == 404, reply
            return []
        return [record.payload for record in iter_messages(reply.data)]


def unique(prefix: str) -> str:
    return f"{prefix}{time.monotonic_ns()}"


def raw_exchange(broker, request: bytes, expected: bytes) -> bytes:
    """Send raw bytes; read exactly ``len(expected)`` bytes back (bounded wait)."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as raw:
        raw.sendall(request)
        received = b""
        while len(received) < len(expected):
            chunk = raw.recv(len(expected) - len(received))
            if not chunk:
                break
            received += chunk
        return received


# --- golden replies -------------------------------------------------------------------------


def test_begin_answers_200_with_an_empty_body(broker):
    request = b"transaction TX:gold:1 gold BEGIN 7\r\n"
    assert raw_exchange(broker, request, b"result 200 0 7\r\n") == b"result 200 0 7\r\n"


def test_end_gets_no_reply_at_all(broker):
    """END is one-way: the next reply on the connection is the version's."""
    request = b"transaction XID:1:0a:0b:q gold END 8\r\nversion 9\r\n"
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as raw:
        raw.sendall(request)
        assert raw.recv(64).startswith(b"result 200 ")
    with broker.connect() as connection:
        connection.send_bytes(request)
        assert connection.receive().opaque == 9


def test_prepare_answers_0_and_a_read_only_branch_3(broker):
    key = "XID:1:01:02:gold"
    with broker.connect() as connection:
        wire = Wire(connection)
        assert wire.tx(key, "BEGIN").code == 200
        assert wire.put(key, 0, b"m").code == 200
    expected = b"result 200 1 11\r\n0"
    assert (
        raw_exchange(broker, f"transaction {key} s PREPARE 11\r\n".encode(), expected) == expected
    )
    empty = "XID:1:03:04:gold"
    raw_exchange(broker, f"transaction {empty} s BEGIN 1\r\n".encode(), b"result 200 0 1\r\n")
    expected = b"result 200 1 12\r\n3"
    assert (
        raw_exchange(broker, f"transaction {empty} s PREPARE 12\r\n".encode(), expected) == expected
    )
    with broker.connect() as connection:
        assert Wire(connection).tx(key, "ROLLBACK").code == 200


def test_an_xa_error_arrives_as_xaexception_code_and_message(broker):
    key = "XID:5:aa:bb:gold"
    body = f"XAException:code=-4,msg=XA transaction '{key}' has not been started.".encode()
    expected = b"result 500 %d 13\r\n" % len(body) + body
    request = f"transaction {key} s COMMIT_TWO_PHASE 13\r\n".encode()
    assert raw_exchange(broker, request, expected) == expected


def test_recover_joins_prepared_keys_with_crlf_and_filters_by_qualifier(wire):
    qualifier = unique("q")
    keys = [f"XID:1:0{n}:0{n}:{qualifier}" for n in (1, 2)]
    for key in keys:
        assert wire.tx(key, "BEGIN").code == 200
        assert wire.put(key, 1, b"r").code == 200
        assert wire.tx(key, "PREPARE").body == b"0"
    reply = wire.tx("null", "RECOVER", qualifier=qualifier)
    assert reply.code == 200
    assert sorted(reply.body.split(b"\r\n")) == sorted(k.encode() for k in keys)
    assert wire.tx("null", "RECOVER", qualifier=unique("none")).body == b""
    for key in keys:
        assert wire.tx(key, "ROLLBACK").code == 200


# --- atomicity --------------------------------------------------------------------------------


def test_a_local_transaction_is_invisible_until_commit_then_contiguous(wire, broker):
    """Goal: consumers see none, then all, contiguous and in put order.

    Method: interleave non-transactional puts on the same partition while the transaction is
    open; after commit the batch must appear as one run after them.
    """
    key = f"TX:{wire.session}:{time.monotonic_ns() % 2**31}"
    before = len(wire.messages(0))
    assert wire.tx(key, "BEGIN").code == 200
    for n in range(5):
        assert wire.put(key, 0, b"tx-%d" % n).body.endswith(b" 0 -1")
        assert wire.put(None, 0, b"plain-%d" % n).code == 200
    seen = wire.messages(0)[before:]
    assert not any(payload.startswith(b"tx-") for payload in seen)
    assert wire.tx(key, "COMMIT_ONE_PHASE").code == 200
    seen = wire.messages(0)[before:]
    assert seen == [b"plain-%d" % n for n in range(5)] + [b"tx-%d" % n for n in range(5)]


def test_a_rolled_back_transaction_leaves_nothing(wire):
    key = f"TX:{wire.session}:{time.monotonic_ns() % 2**31}"
    before = wire.messages(1, topic="other")
    assert wire.tx(key, "BEGIN").code == 200
    assert wire.put(key, 1, b"never", topic="other").code == 200
    assert wire.tx(key, "ROLLBACK").code == 200
    assert wire.messages(1, topic="other") == before


def test_a_transaction_over_two_partitions_commits_both(wire):
    key = f"XID:7:{time.monotonic_ns():x}:01:both"
    counts = [len(wire.messages(p)) for p in (0, 1)]
    assert wire.tx(key, "BEGIN").code == 200
    assert wire.put(key, 0, b"p0").code == 200
    assert wire.put(key, 1, b"p1").code == 200
    assert wire.tx(key, "PREPARE").body == b"0"
    assert wire.messages(0)[counts[0] :] == []
    assert wire.tx(key, "COMMIT_TWO_PHASE").code == 200
    assert wire.messages(0)[counts[0] :] == [b"p0"]
    assert wire.messages(1)[counts[1] :] == [b"p1"]


# --- dropped connection (DECISIONS 7) ----------------------------------------------------------


def test_closing_a_connection_rolls_back_its_open_local_transaction(broker):
    key = f"TX:drop:{time.monotonic_ns() % 2**31}"
    with broker.connect() as connection:
        wire = Wire(connection, "drop")
        before = len(wire.messages(0, topic="other"))
        assert wire.tx(key, "BEGIN").code == 200
        assert wire.put(key, 0, b"orphan", topic="other").code == 200
    wait_for(lambda: "rolled back 1 open local transactions" in broker.log(), what="rollback")
    with broker.connect() as connection:
        wire = Wire(connection, "drop")
        assert wire.tx(key, "BEGIN").code == 200
        assert wire.tx(key, "COMMIT_ONE_PHASE").code == 200
        assert len(wire.messages(0, topic="other")) == before


# --- bad input -------------------------------------------------------------------------------


def test_commit_of_an_unknown_xid_is_xaer_nota(wire):
    reply = wire.tx("XID:1:ff:ff:bad", "COMMIT_ONE_PHASE")
    assert reply.code == 500
    assert reply.body.startswith(b"XAException:code=-4,msg=")


def test_two_phase_commit_without_prepare_is_xaer_proto(wire):
    key = f"XID:2:{time.monotonic_ns():x}:00:bad"
    wire.tx(key, "BEGIN")
    wire.put(key, 0, b"x")
    reply = wire.tx(key, "COMMIT_TWO_PHASE")
    assert (reply.code, reply.body) == (
        500,
        b"XAException:code=-6,msg=Cannot do 2 phase commit if the transaction has not been "
        b"prepared.",
    )
    assert wire.tx(key, "ROLLBACK").code == 200


def test_prepare_of_a_local_transaction_is_xaer_rmerr(wire):
    key = f"TX:{wire.session}:5"
    wire.tx(key, "BEGIN")
    reply = wire.tx(key, "PREPARE")
    assert reply.body == b"XAException:code=-3,msg=Prepare not implemented on Local Transactions."
    assert wire.tx(key, "ROLLBACK").code == 200


def test_a_put_to_a_transaction_that_does_not_exist_is_500_plain_text(wire):
    reply = wire.put("TX:sid:424242", 0, b"x")
    assert (reply.code, reply.body) == (
        500,
        b"Local transaction 'TX:sid:424242' has not been started.",
    )
    reply = wire.put("XID:1:0e:0e:nobody", 0, b"x")
    assert reply.body == b"XA transaction 'XID:1:0e:0e:nobody' has not been started."


def test_a_transactional_put_without_a_partition_is_refused(wire):
    key = f"TX:{wire.session}:6"
    wire.tx(key, "BEGIN")
    reply = wire.put(key, -1, b"x")
    assert (reply.code, reply.body) == (500, b"Invalid partition for transaction command:-1")
    assert wire.tx(key, "ROLLBACK").code == 200


@pytest.mark.parametrize(
    "line",
    [
        b"transaction TX:a:b:c:d s BEGIN 1\r\n",
        b"transaction XID:1:zz:00:q s BEGIN 1\r\n",
        b"transaction TX:s:1 s begin 1\r\n",
        b"put tx 0 1 0 0 NOTAKEY 1\r\nx",
    ],
)
def test_a_malformed_key_or_type_closes_only_that_connection(broker, line):
    with broker.connect() as bad, broker.connect() as good:
        bad.send_bytes(line)
        with pytest.raises(ConnectionClosedError):
            bad.receive()
        assert good.request(Version(3)).code == 200


def test_keys_are_compared_and_written_back_as_java_parses_them(wire):
    """Upper-case hex (and an odd trailing digit) name the same branch; RECOVER answers the
    canonical spelling, lower case, as Java writes it back."""
    qualifier = unique("canon")
    assert wire.tx(f"XID:1:0A0:0B:{qualifier}", "BEGIN").code == 200
    assert wire.put(f"XID:1:0a:0b:{qualifier}", 0, b"c").code == 200
    assert wire.tx(f"XID:1:0a:0B:{qualifier}", "PREPARE").body == b"0"
    assert (
        wire.tx("null", "RECOVER", qualifier=qualifier).body == f"XID:1:0a:0b:{qualifier}".encode()
    )
    assert wire.tx(f"XID:1:0a:0b:{qualifier}", "ROLLBACK").code == 200
