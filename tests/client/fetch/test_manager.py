"""Pure tests of the fetch loop's batch processing (``meta.client.fetch.manager``), no broker."""

from __future__ import annotations

import pytest

from meta.client.cluster import Partition
from meta.client.fetch.manager import (
    FetchManager,
    FetchRequest,
    FetchSettings,
    PartitionControl,
)
from meta.client.fetch.received import StopBatch, call_listener
from meta.errors import ClientError
from meta.protocol.message import pack_message

ONE, TWO, THREE = (pack_message(n, 0, f"m{n}".encode()) for n in (1, 2, 3))


def manager(listener, offset_reset: str = "follow-broker", reject=None) -> FetchManager:
    settings = FetchSettings("g", 1.0, 5000, 0, offset_reset, 1, max_fetch_retries=2)
    return FetchManager(
        pool=None, pool_user="<test>", settings=settings, listeners={"t": listener}, reject=reject
    )


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
    manager(received.append).process_batch(fetch, first + second + second[:10])
    assert [(m.id, m.offset, m.data) for m in received] == [(7, 100, b"one"), (8, 123, b"two")]
    assert (fetch.offset, fetch.msg_id, fetch.modified) == (146, 8, True)


def test_a_listener_failure_stops_the_batch_at_that_message():
    def listener(message):
        if message.data == b"two":
            raise RuntimeError("no")

    fetch = request()
    manager(listener).process_batch(fetch, pack_message(7, 0, b"one") + pack_message(8, 0, b"two"))
    assert (fetch.offset, fetch.msg_id) == (123, 7)


def test_empty_batches_back_off_by_a_tenth_of_the_maximum_up_to_it():
    fetch = request()
    fetches = manager(lambda message: None)
    delays = []
    for _ in range(12):
        fetches.process_batch(fetch, b"")
        delays.append(fetch.delay_ms)
    assert delays[:3] == [500, 1000, 1500] and delays[-1] == 5000
    fetches.process_batch(fetch, pack_message(1, 0, b"x"))
    assert fetch.delay_ms == 0 and fetch.retries == 0


def test_a_301_is_adopted_by_follow_broker_and_stops_the_partition_under_error():
    fetch = request()
    assert manager(print).handle_moved(fetch, 4096) is True
    assert (fetch.offset, fetch.modified) == (4096, True)
    stuck = request()
    assert manager(print, "error").handle_moved(stuck, 4096) is False
    assert stuck.offset == 100


def test_a_head_that_fails_more_than_max_fetch_retries_times_goes_to_the_reject_handler():
    """max_fetch_retries=2: m2 is tried 3 times, then rejected; m3 then flows normally."""
    calls, rejected = [], []

    def listener(message):
        calls.append(message.id)
        if message.id == 2:
            raise RuntimeError("poison")

    fetches, fetch = manager(listener, reject=rejected.append), request()
    fetches.process_batch(fetch, ONE + TWO + THREE)
    assert (fetch.offset, fetch.retries, fetch.delay_ms) == (100 + len(ONE), 1, 0)
    for _ in range(2):
        fetches.process_batch(fetch, TWO + THREE)
    assert calls == [1, 2, 2, 2] and fetch.retries == 3 and rejected == []
    fetches.process_batch(fetch, TWO + THREE)
    assert [m.id for m in rejected] == [2] and calls == [1, 2, 2, 2]
    assert (fetch.offset, fetch.msg_id, fetch.retries, fetch.delay_ms) == (
        100 + len(ONE) + len(TWO), 2, 0, 0)  # fmt: skip
    fetches.process_batch(fetch, THREE)
    assert calls[-1] == 3 and fetch.offset == 100 + len(ONE + TWO + THREE)


def test_a_failing_reject_handler_is_logged_and_the_partition_still_moves_on():
    def reject(message):
        raise OSError("disk full")

    fetch = request()
    fetch.retries = 3
    manager(print, reject=reject).process_batch(fetch, ONE)
    assert fetch.offset == 100 + len(ONE) and fetch.retries == 0


def test_empty_or_incomplete_data_does_not_count_as_a_failure():
    fetch, fetches = request(), manager(lambda message: None)
    fetches.process_batch(fetch, b"")
    fetches.process_batch(fetch, ONE[:10])
    assert fetch.retries == 0 and fetch.offset == 100


def test_set_rollback_only_fails_the_message_without_raising():
    fetch = request()
    manager(lambda m: m.id == 2 and m.set_rollback_only()).process_batch(fetch, ONE + TWO)
    assert (fetch.offset, fetch.retries) == (100 + len(ONE), 1)


def manual(decide):
    """A listener in manual mode that calls ``decide(message, control)``."""

    def listener(message):
        message.partition_control.set_auto_ack(False)
        decide(message, message.partition_control)

    return listener


def test_manual_mode_reads_on_without_moving_the_stored_offset_until_ack():
    fetch = request()
    fetches = manager(manual(lambda m, c: m.id == 3 and c.ack()))
    fetches.process_batch(fetch, ONE + TWO)
    assert (fetch.offset, fetch.tmp_offset, fetch.modified) == (100, 100 + len(ONE + TWO), False)
    assert fetch.next_offset == 100 + len(ONE + TWO)
    fetches.process_batch(fetch, THREE)
    assert (fetch.offset, fetch.tmp_offset, fetch.msg_id) == (100 + len(ONE + TWO + THREE), -1, 3)
    assert fetch.modified and not fetch.control.acked


def test_ack_ends_the_batch_after_the_acked_message():
    seen, fetch = [], request()
    manager(manual(lambda m, c: (seen.append(m.id), c.ack()))).process_batch(fetch, ONE + TWO)
    assert seen == [1] and fetch.offset == 100 + len(ONE)


def test_rollback_re_delivers_everything_since_the_last_ack():
    fetch = request()
    fetches = manager(manual(lambda m, c: m.id == 2 and c.rollback()))
    fetches.process_batch(fetch, ONE)
    fetches.process_batch(fetch, TWO)
    assert (fetch.offset, fetch.tmp_offset, fetch.next_offset) == (100, -1, 100)
    assert not fetch.control.rolled_back and fetch.control.auto_ack is False


def test_ack_in_auto_mode_and_ack_after_rollback_raise_client_error():
    control = PartitionControl()
    with pytest.raises(ClientError):
        control.ack()
    with pytest.raises(ClientError):
        control.rollback()
    control.set_auto_ack(False)
    control.rollback()
    with pytest.raises(ClientError):
        control.ack()
    control.reset()
    control.ack()
    with pytest.raises(ClientError):
        control.rollback()


def test_listeners_get_a_message_with_the_requests_partition_control():
    seen, fetch = [], request()
    manager(seen.append).process_batch(fetch, ONE)
    assert seen[0].partition_control is fetch.control and seen[0].data == b"m1"


def test_stop_batch_ends_the_batch_before_its_message_without_a_failure():
    def listener(message):
        if message.data == b"m2":
            raise StopBatch

    fetch = request()
    manager(listener).process_batch(fetch, ONE + TWO + THREE)
    assert (fetch.offset, fetch.msg_id, fetch.retries, fetch.delay_ms) == (100 + len(ONE), 1, 0, 0)


def test_stop_batch_on_the_head_counts_no_retry_and_fetches_again_at_once():
    def listener(message):
        raise StopBatch

    fetch = request()
    fetches = manager(listener)
    for _ in range(5):  # More than max_fetch_retries: a failure would reject the head.
        fetches.process_batch(fetch, ONE + TWO)
    assert (fetch.offset, fetch.modified, fetch.retries, fetch.delay_ms) == (100, False, 0, 0)
