"""One client cannot take the broker-wide caps of open transactions (real broker processes).

Method, caps per connection and qualifier: a client pipelines 100,000 XA BEGINs without a
timeout and never uses the branches, then disconnects. The caps per qualifier and per
connection stop it well before the broker-wide cap, so another client's BEGIN succeeds at
once; the unused-branch timeout then frees the first client's qualifier. A prepared branch
outlives that timeout.

Method, caps per client address (brokers with the default limits): ten connections from
127.0.0.1, each rotating its XA qualifier, open branches and put into each until refused;
then a client from 127.0.0.2 (another address) begins and puts, XA and local. The byte
variant puts 1 MB into each branch. Then, with a short ``txActiveTimeoutInSeconds``, the
active branches that took puts are rolled back and their bytes released, while a prepared
branch survives.
"""

from __future__ import annotations

import socket
import time

import pytest

from meta.protocol.codec import NEED_DATA, Decoder, encode
from meta.protocol.commands import Put, Result, Transaction
from meta.protocol.message import checksum
from meta.protocol.xa import XA_RBTIMEOUT, parse_xa_error
from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import wait_for

TOPIC = "xa"
BEGINS = 100_000
BATCH = 500
QUALIFIER_MAX = 2000
CONNECTION_MAX = 3000
UNUSED_TIMEOUT_S = 3


def start_broker(directory, unused_timeout_s: int) -> BrokerProcess:
    return BrokerProcess(
        directory,
        system={
            "maxXaTxPerQualifier": QUALIFIER_MAX,
            "maxTxPerConnection": CONNECTION_MAX,
            "txUnusedTimeoutInSeconds": unused_timeout_s,
        },
        topics={TOPIC: {}},
    ).start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """Unused branches outlive every test here (the default timeout is long)."""
    process = start_broker(tmp_path_factory.mktemp("xa-caps"), 3600)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def quick_broker(tmp_path_factory):
    """Unused branches time out after ``UNUSED_TIMEOUT_S``."""
    process = start_broker(tmp_path_factory.mktemp("xa-timeout"), UNUSED_TIMEOUT_S)
    yield process
    process.stop()


def begin(connection, key: str, timeout_s: int = 0):
    opaque = connection.next_opaque()
    return connection.request(Transaction(key, "s", "BEGIN", opaque, timeout_s, None))


def pipelined_begins(connection, keys: list[str]) -> list[int]:
    """Send BEGINs in batches (bounded socket buffers); the reply codes in order."""
    codes = []
    for start in range(0, len(keys), BATCH):
        batch = keys[start : start + BATCH]
        data = b"".join(
            f"transaction {key} s BEGIN {start + index}\r\n".encode()
            for index, key in enumerate(batch)
        )
        connection.send_bytes(data)
        codes += [connection.receive().code for _ in batch]
    return codes


def test_many_unused_xa_begins_from_one_client_leave_room_for_others(broker):
    qualifier = f"flood{time.monotonic_ns()}"
    keys = [f"XID:1:{n:08x}:01:{qualifier}" for n in range(1, BEGINS + 1)]
    with broker.connect(timeout_s=60) as flood:
        codes = pipelined_begins(flood, keys)
        assert codes.count(200) == QUALIFIER_MAX
        assert codes[:QUALIFIER_MAX] == [200] * QUALIFIER_MAX
        assert begin(flood, f"XID:1:01:01:other{qualifier}").code == 200
    with broker.connect() as other:
        reply = begin(other, f"XID:1:02:02:victim{qualifier}")
        assert reply.code == 200, reply
        reply = begin(other, f"XID:1:{BEGINS + 1:08x}:01:{qualifier}")
        assert reply.code == 500
        assert b"maxXaTxPerQualifier" in reply.body


def test_unused_branches_time_out_and_free_their_qualifier(quick_broker):
    qualifier = f"idle{time.monotonic_ns()}"
    keys = [f"XID:1:{n:08x}:01:{qualifier}" for n in range(QUALIFIER_MAX + 1)]
    with quick_broker.connect(timeout_s=60) as connection:
        codes = pipelined_begins(connection, keys)
    assert codes[:QUALIFIER_MAX] == [200] * QUALIFIER_MAX
    assert codes[QUALIFIER_MAX] == 500
    with quick_broker.connect() as later:
        wait_for(
            lambda: begin(later, f"XID:1:{time.monotonic_ns():016x}:01:{qualifier}").code == 200,
            timeout_s=UNUSED_TIMEOUT_S + 20,
            what="the unused branches to time out",
        )


def test_one_connection_cannot_hold_more_than_its_cap(broker):
    with broker.connect(timeout_s=60) as connection:
        keys = [f"XID:1:{n:08x}:02:q{n % 10}c{time.monotonic_ns()}" for n in range(CONNECTION_MAX)]
        assert pipelined_begins(connection, keys) == [200] * CONNECTION_MAX
        reply = begin(connection, f"TX:local{time.monotonic_ns()}:1")
        assert reply.code == 500
        assert b"maxTxPerConnection" in reply.body
    with broker.connect() as other:
        assert begin(other, f"TX:other{time.monotonic_ns()}:1").code == 200


def test_a_prepared_branch_is_never_timed_out(quick_broker):
    broker = quick_broker
    key = f"XID:1:0a:0b:prepared{time.monotonic_ns()}"
    unused = f"XID:1:0c:0d:prepared{time.monotonic_ns()}"
    with broker.connect() as connection:
        assert begin(connection, key).code == 200
        assert begin(connection, unused).code == 200
        data = b"kept"
        put = Put(TOPIC, 0, data, 0, connection.next_opaque(), checksum(data), key)
        assert connection.request(put).code == 200
        prepare = Transaction(key, "s", "PREPARE", connection.next_opaque(), 0, None)
        assert connection.request(prepare).body == b"0"

    def recovered() -> bytes:
        with broker.connect() as connection:
            command = Transaction("null", "s", "RECOVER", connection.next_opaque(), 0, None)
            return connection.request(command).body

    wait_for(
        lambda: f"'{unused}' was rolled back: it took no message" in broker.log(),
        timeout_s=UNUSED_TIMEOUT_S + 20,
        what="the unused branch to time out",
    )
    assert key.encode() in recovered()
    with broker.connect() as connection:
        commit = Transaction(key, "s", "COMMIT_TWO_PHASE", connection.next_opaque(), 0, None)
        assert connection.request(commit).code == 200


# -- caps per client address ----------------------------------------------------------------

ATTACK_CONNECTIONS = 10
ATTACK_ROUND = 500  # branches per connection and turn (bounded socket buffers)
ATTACK_BRANCHES_MAX = 110_000  # more than the broker-wide cap: the loop always ends
OTHER_ADDRESS = "127.0.0.2"
BIG = b"x" * 1_000_000


class SourceConnection:
    """A connection to the broker from a chosen loopback source address."""

    def __init__(self, broker: BrokerProcess, source: str, timeout_s: float = 60) -> None:
        self.sock = socket.create_connection(
            ("127.0.0.1", broker.port), timeout=timeout_s, source_address=(source, 0)
        )
        self.decoder = Decoder()
        self.opaque = 0

    def __enter__(self) -> SourceConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.sock.close()

    def next_opaque(self) -> int:
        self.opaque += 1
        return self.opaque

    def send(self, *commands) -> None:
        self.sock.sendall(b"".join(encode(command) for command in commands))

    def receive(self) -> Result:
        while (reply := self.decoder.next_command()) is NEED_DATA:
            data = self.sock.recv(65536)
            assert data, "the broker closed the connection"
            self.decoder.receive_data(data)
        return reply

    def request(self, command) -> Result:
        self.send(command)
        return self.receive()

    def tx(self, key: str, type_: str) -> Result:
        return self.request(Transaction(key, "s", type_, self.next_opaque(), 0, None))

    def put(self, key: str, data: bytes) -> Result:
        return self.request(put_command(self, key, data))


def put_command(connection, key: str, data: bytes) -> Put:
    return Put(TOPIC, 0, data, 0, connection.next_opaque(), checksum(data), key)


def default_broker(directory, **system) -> BrokerProcess:
    """A broker with the default transaction limits (``system`` adds keys)."""
    return BrokerProcess(directory, system=system, topics={TOPIC: {}}).start()


def branch_round(connection, keys: list[str], data: bytes) -> Result | None:
    """BEGIN each key and put ``data`` into it, pipelined; the first refusal, or None."""
    commands = []
    for key in keys:
        commands.append(Transaction(key, "s", "BEGIN", connection.next_opaque(), 0, None))
        commands.append(put_command(connection, key, data))
    connection.send(*commands)
    replies = [connection.receive() for _ in commands]
    return next((reply for reply in replies if reply.code != 200), None)


def rotating_attack(broker: BrokerProcess, data: bytes, per_round: int, stamp: str) -> Result:
    """Ten connections from 127.0.0.1 open branches (a new qualifier every round) and put
    ``data`` into each, in turns, until the broker refuses one; that refusal. The
    connections stay open."""
    connections = [SourceConnection(broker, "127.0.0.1") for _ in range(ATTACK_CONNECTIONS)]
    try:
        for round_number in range(ATTACK_BRANCHES_MAX // (per_round * ATTACK_CONNECTIONS)):
            for index, connection in enumerate(connections):
                qualifier = f"{stamp}c{index}r{round_number}"
                keys = [f"XID:1:{n:08x}:01:{qualifier}" for n in range(1, per_round + 1)]
                refused = branch_round(connection, keys, data)
                if refused is not None:
                    return refused
        raise AssertionError("the broker took every branch")
    finally:
        for connection in connections:
            connection.sock.close()


def assert_another_address_gets_transactions(broker: BrokerProcess, data: bytes) -> None:
    """A client on another address begins and puts, XA and local, and commits."""
    stamp = time.monotonic_ns()
    with SourceConnection(broker, OTHER_ADDRESS) as victim:
        xa_key = f"XID:1:0a:0b:victim{stamp}"
        reply = victim.tx(xa_key, "BEGIN")
        assert reply.code == 200, reply
        reply = victim.put(xa_key, data)
        assert reply.code == 200, reply
        assert victim.tx(xa_key, "COMMIT_ONE_PHASE").code == 200
        local_key = f"TX:victim{stamp}:1"
        assert victim.tx(local_key, "BEGIN").code == 200
        assert victim.put(local_key, data).code == 200
        assert victim.tx(local_key, "COMMIT_ONE_PHASE").code == 200


def test_rotating_connections_and_qualifiers_from_one_address_leaves_room_for_others(
    tmp_path,
):
    broker = default_broker(tmp_path)
    try:
        refused = rotating_attack(broker, b"x", ATTACK_ROUND, "rotate")
        assert_another_address_gets_transactions(broker, b"victim")
        assert refused.code == 500
        assert b"maxTxPerAddress" in refused.body, refused.body
        assert b"the most are held by 127.0.0.1 (10000 transactions, 210000 bytes)" in (
            refused.body
        )
        with SourceConnection(broker, "127.0.0.1") as again:  # local ones count too
            reply = again.tx(f"TX:again{time.monotonic_ns()}:1", "BEGIN")
            assert reply.code == 500
            assert b"maxTxPerAddress" in reply.body
        assert "refused a transaction of 127.0.0.1" in broker.log()
    finally:
        broker.stop()


def test_one_address_filling_branches_with_megabytes_leaves_room_for_others(tmp_path):
    broker = default_broker(tmp_path)
    try:
        refused = rotating_attack(broker, BIG, 1, "bytes")
        assert_another_address_gets_transactions(broker, BIG)
        assert refused.code == 500
        assert b"maxTxBytesPerAddress" in refused.body, refused.body
        assert b"the most are held by 127.0.0.1 (" in refused.body
    finally:
        broker.stop()


ACTIVE_TIMEOUT_S = 3


def test_active_branches_time_out_release_their_bytes_and_prepared_ones_survive(tmp_path):
    """Goal: branches that took puts and were never prepared go after the active timeout,
    with their bytes; a prepared branch stays for its transaction manager.

    Method: with a 3 MB share per address, one prepared branch and three active ones (XA
    and local) holding 1 MB each fill it; after the timeout (waited for in the log) the same
    address puts again, the active ones answer with the timeout, and the prepared branch is
    still recovered and commits.
    """
    system = {"txActiveTimeoutInSeconds": ACTIVE_TIMEOUT_S, "maxTxBytesPerAddress": 3_500_000}
    broker = default_broker(tmp_path, **system)
    try:
        stamp = time.monotonic_ns()
        prepared, active = f"XID:1:01:01:kept{stamp}", f"XID:1:02:01:gone{stamp}"
        with SourceConnection(broker, "127.0.0.1") as client:
            for key in (prepared, active, f"TX:gone{stamp}:1"):
                assert client.tx(key, "BEGIN").code == 200
                assert client.put(key, BIG).code == 200
            assert client.tx(prepared, "PREPARE").body == b"0"
            assert client.tx(f"TX:full{stamp}:1", "BEGIN").code == 200
            refused = client.put(f"TX:full{stamp}:1", BIG)
            assert b"maxTxBytesPerAddress" in refused.body, refused
            wait_for(
                lambda: f"'{active}' was rolled back: it was still active" in broker.log(),
                timeout_s=ACTIVE_TIMEOUT_S + 60,
                what="the active branch to time out",
            )
            wait_for(
                lambda: f"'TX:full{stamp}:1' was rolled back" in broker.log(),
                timeout_s=ACTIVE_TIMEOUT_S + 60,
                what="the local transaction to time out",
            )
            reply = client.tx(active, "PREPARE")
            error = parse_xa_error(reply.body)
            assert error is not None and error.error_code == XA_RBTIMEOUT, reply
            assert "txActiveTimeoutInSeconds" in error.message
            reply = client.tx(f"TX:gone{stamp}:1", "COMMIT_ONE_PHASE")
            assert b"txActiveTimeoutInSeconds" in reply.body, reply
            assert client.tx(f"TX:after{stamp}:1", "BEGIN").code == 200
            assert client.put(f"TX:after{stamp}:1", BIG).code == 200  # the bytes are free
            recover = Transaction("null", "s", "RECOVER", client.next_opaque(), 0, None)
            assert client.request(recover).body == prepared.encode()
            assert client.tx(prepared, "COMMIT_TWO_PHASE").code == 200
    finally:
        broker.stop()
