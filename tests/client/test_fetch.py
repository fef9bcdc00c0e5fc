"""Pure tests of the fetch loop's batch processing (``meta.client.fetch``), with no broker."""

from __future__ import annotations

from meta.client.cluster import Partition
from meta.client.fetch import FetchManager, FetchRequest, FetchSettings, call_listener
from meta.protocol.message import pack_message


def manager(listener, offset_reset: str = "follow-broker") -> FetchManager:
    settings = FetchSettings("g", 1.0, 5000, 0, offset_reset, 1)
    return FetchManager(pool=None, pool_user="<test>", settings=settings, listeners={"t": listener})


def request(offset: int = 100) -> FetchRequest:
    return FetchRequest("t", Partition(0, 1), None, offset)


def test_call_listener_accepts_a_callable_or_a_receive_messages_object():
    seen = []

    class Listener:
        def receive_messages(self, message):
            seen.append(("object", message))

    call_listener(lambda message: seen.append(("callable", message)), 1)
    call_listener(Listener(), 2)
    assert seen == [("callable", 1), ("object", 2)]


def test_a_batch_advances_by_the_bytes_of_complete_messages_only():
    received = []
    first, second = pack_message(7, 0, b"one"), pack_message(8, 0, b"two")
    fetch = request()
    manager(received.append)._process(fetch, first + second + second[:10])
    assert [(m.id, m.offset, m.data) for m in received] == [(7, 100, b"one"), (8, 123, b"two")]
    assert (fetch.offset, fetch.msg_id, fetch.modified) == (146, 8, True)


def test_a_listener_failure_stops_the_batch_at_that_message():
    def listener(message):
        if message.data == b"two":
            raise RuntimeError("no")

    fetch = request()
    manager(listener)._process(fetch, pack_message(7, 0, b"one") + pack_message(8, 0, b"two"))
    assert (fetch.offset, fetch.msg_id) == (123, 7)


def test_empty_batches_back_off_by_a_tenth_of_the_maximum_up_to_it():
    fetch = request()
    fetches = manager(lambda message: None)
    delays = []
    for _ in range(12):
        fetches._process(fetch, b"")
        delays.append(fetch.delay_ms)
    assert delays[:3] == [500, 1000, 1500] and delays[-1] == 5000
    fetches._process(fetch, pack_message(1, 0, b"x"))
    assert fetch.delay_ms == 0 and fetch.retries == 0


def test_a_301_is_adopted_by_follow_broker_and_stops_the_partition_under_error():
    fetch = request()
    assert manager(print)._moved(fetch, 4096) is True
    assert (fetch.offset, fetch.modified) == (4096, True)
    stuck = request()
    assert manager(print, "error")._moved(stuck, 4096) is False
    assert stuck.offset == 100
