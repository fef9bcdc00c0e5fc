"""The fetch loop's batch decoder, pause/resume and stop, with fake connections (no broker).

Every wait is bounded; the fake connection records the commands it was given.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future

import pytest

from meta.client.cluster import BrokerAddress, Partition
from meta.client.fetch.manager import FetchManager, FetchRequest, FetchSettings
from meta.client.fetch.received import PartitionControl, ReceivedMessage, decode_batch
from meta.client.message import Message
from meta.errors import InvalidRecordError
from meta.protocol.commands import Data
from meta.protocol.message import encode_payload, iter_messages, pack_message

WAIT_S = 5.0


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def records(count: int, seed: int) -> bytes:
    rng = random.Random(seed)
    out = b""
    for _ in range(count):
        attribute = rng.choice([None, "", "attr-é", "k=v"])
        payload, flag = encode_payload(rng.randbytes(rng.randrange(0, 300)), attribute)
        out += pack_message(rng.randrange(-(2**63), 2**63), flag, payload)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_decode_batch_matches_iter_messages_and_from_record(seed):
    data = records(40, seed)
    data += data[:37]  # a trailing partial record is not yielded
    partition, control = Partition(2, 3), PartitionControl()
    expected = [
        (Message.from_record("t", record, partition), record.size)
        for record in iter_messages(data, 1000)
    ]
    got = list(decode_batch(data, 1000, "t", partition, control))
    assert len(got) == len(expected) == 40
    for (message, size), (reference, reference_size) in zip(got, expected, strict=True):
        assert isinstance(message, ReceivedMessage) and message.partition_control is control
        assert size == reference_size
        fields = ("topic", "data", "attribute", "key", "id", "partition", "offset")
        assert [getattr(message, f) for f in fields] == [getattr(reference, f) for f in fields]


def test_decode_batch_yields_the_good_records_then_raises_on_a_bad_checksum():
    good = pack_message(1, 0, b"one")
    bad = bytearray(pack_message(2, 0, b"two"))
    bad[-1] ^= 0xFF
    decoded = decode_batch(good + bytes(bad), 0, "t", Partition(0, 0), None)
    assert next(decoded)[0].data == b"one"
    with pytest.raises(InvalidRecordError, match="checksum mismatch at offset 23"):
        next(decoded)


class FakeConnection:
    """``request`` returns a future the test completes (or never completes)."""

    def __init__(self, answer=None) -> None:
        self.answer = answer  # None: leave the future pending (a parked long poll)
        self.futures: list[Future] = []
        self.lock = threading.Lock()

    def request(self, command, timeout_s):
        future: Future = Future()
        if self.answer is not None:
            future.set_result(self.answer(command))
        with self.lock:
            self.futures.append(future)
        return future


class FakePool:
    def __init__(self, connection: FakeConnection) -> None:
        self.connection = connection

    def set_brokers(self, user, addresses) -> None:
        pass

    def get(self, address):
        return self.connection


def fetch_manager(connection: FakeConnection, received: list) -> FetchManager:
    settings = FetchSettings("g", 1.0, 100, 1000, "follow-broker", 1)
    return FetchManager(FakePool(connection), "<test>", settings, {"t": received.append})


def fetch_request() -> FetchRequest:
    return FetchRequest("t", Partition(0, 0), BrokerAddress("127.0.0.1", 1), 0)


def test_stop_cancels_a_parked_get_instead_of_waiting_for_it():
    connection = FakeConnection(answer=None)
    manager = fetch_manager(connection, [])
    manager.start([fetch_request()])
    wait_for(lambda: connection.futures, "the get")
    stopper = threading.Thread(target=manager.stop)
    started = time.monotonic()
    stopper.start()
    stopper.join(WAIT_S)
    assert not stopper.is_alive(), "stop() waited for the parked get"
    assert time.monotonic() - started < 1.0
    assert connection.futures[0].cancelled()
    assert manager.requests()[("t", "0-0")].offset == 0  # the request kept its state


def test_a_paused_manager_sends_nothing_until_resumed():
    data = pack_message(5, 0, b"hello")
    connection = FakeConnection(answer=lambda command: Data(data, 0))
    received: list = []
    manager = fetch_manager(connection, received)
    manager.pause()
    manager.start([fetch_request()])
    try:
        time.sleep(0.2)  # a running manager would have fetched within milliseconds
        assert connection.futures == [] and manager.paused
        manager.resume()
        wait_for(lambda: received, "the message after resume")
        assert received[0].data == b"hello"
    finally:
        manager.stop()


def test_a_reply_that_arrives_while_paused_is_dropped_and_the_offset_kept():
    data = pack_message(5, 0, b"late")
    connection = FakeConnection(answer=None)
    received: list = []
    manager = fetch_manager(connection, received)
    manager.start([fetch_request()])
    try:
        wait_for(lambda: connection.futures, "the get")
        manager.pause()
        connection.futures[0].set_result(Data(data, 0))
        time.sleep(0.2)  # the fetch thread handles the reply within milliseconds
        assert received == []
        assert manager.requests()[("t", "0-0")].offset == 0
    finally:
        manager.stop()
