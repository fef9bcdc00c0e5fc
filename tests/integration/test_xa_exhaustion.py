"""One client cannot take the broker-wide cap of open transactions (real broker process).

Method: a client pipelines 100,000 XA BEGINs without a timeout and never uses the branches,
then disconnects. The caps per qualifier and per connection stop it well before the
broker-wide cap, so another client's BEGIN succeeds at once; the unused-branch timeout then
frees the first client's qualifier. A prepared branch outlives that timeout.
"""

from __future__ import annotations

import time

import pytest

from meta.protocol.commands import Put, Transaction
from meta.protocol.message import checksum
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
        lambda: f"{unused} was begun and never used" in broker.log(),
        timeout_s=UNUSED_TIMEOUT_S + 20,
        what="the unused branch to time out",
    )
    assert key.encode() in recovered()
    with broker.connect() as connection:
        commit = Transaction(key, "s", "COMMIT_TWO_PHASE", connection.next_opaque(), 0, None)
        assert connection.request(commit).code == 200
