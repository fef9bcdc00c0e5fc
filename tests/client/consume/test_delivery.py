"""Unit tests of ``meta.client.consume.delivery``: the processed-ids LRU and the message filter."""

from __future__ import annotations

from meta.client.consume.delivery import ProcessedIds, Subscription
from meta.client.fetch.manager import PartitionControl, ReceivedMessage


def message(msg_id: int, data: bytes = b"d") -> ReceivedMessage:
    received = ReceivedMessage("t", data, id=msg_id)
    received.partition_control = PartitionControl()
    return received


def test_the_cache_forgets_the_least_recently_added_entry():
    processed = ProcessedIds(2)
    processed.add(("g", 1))
    processed.add(("g", 2))
    processed.add(("g", 1))  # added again: now the newest
    processed.add(("g", 3))
    assert ("g", 2) not in processed
    assert ("g", 1) in processed and ("g", 3) in processed and len(processed) == 2


def test_a_processed_message_is_not_given_to_the_listener_again():
    seen = []
    subscription = Subscription("g", seen.append, processed=ProcessedIds())
    subscription(message(7))
    subscription(message(7))
    assert [m.id for m in seen] == [7]


def test_processed_ids_are_kept_per_group():
    processed = ProcessedIds()
    first, second = [], []
    Subscription("a", first.append, processed=processed)(message(7))
    Subscription("b", second.append, processed=processed)(message(7))
    assert len(first) == len(second) == 1


def test_a_failed_message_is_not_remembered_and_comes_again():
    calls = []

    def flaky(received):
        calls.append(received.id)
        if len(calls) == 1:
            raise ValueError("first try fails")

    subscription = Subscription("g", flaky, processed=ProcessedIds())
    try:
        subscription(message(9))
    except ValueError:
        pass
    subscription(message(9))
    assert calls == [9, 9]


def test_a_message_marked_rollback_only_is_not_remembered():
    calls = []

    def fails_once(received):
        calls.append(received.id)
        if len(calls) == 1:
            received.set_rollback_only()

    subscription = Subscription("g", fails_once, processed=ProcessedIds())
    subscription(message(3))
    subscription(message(3))
    assert calls == [3, 3]


def test_in_manual_mode_only_an_ack_would_make_a_message_processed():
    processed = ProcessedIds()
    received = message(4)
    received.partition_control.set_auto_ack(False)
    Subscription("g", lambda m: None, processed=processed)(received)
    assert ("g", 4) not in processed


def test_the_filter_gets_the_group_and_the_message_and_rejects_skip_the_listener():
    seen, asked = [], []

    def only_even(group, received):
        asked.append((group, received.id))
        return received.id % 2 == 0

    subscription = Subscription("g", seen.append, only_even, ProcessedIds())
    for msg_id in (1, 2, 3, 4):
        subscription(message(msg_id))
    assert [m.id for m in seen] == [2, 4]
    assert asked == [("g", 1), ("g", 2), ("g", 3), ("g", 4)]


def test_a_filter_object_with_accept_works_and_a_raising_filter_rejects():
    class Filter:
        def accept(self, group, received):
            if received.id == 2:
                raise RuntimeError("broken filter")
            return True

    seen = []
    subscription = Subscription("g", seen.append, Filter(), ProcessedIds())
    for msg_id in (1, 2, 3):
        subscription(message(msg_id))
    assert [m.id for m in seen] == [1, 3]


def test_a_listener_object_uses_receive_messages_and_exposes_its_executor():
    class Listener:
        executor = object()

        def __init__(self):
            self.seen = []

        def receive_messages(self, received):
            self.seen.append(received.id)

    listener = Listener()
    subscription = Subscription("g", listener, processed=ProcessedIds())
    subscription(message(5))
    assert listener.seen == [5]
    assert subscription.executor is Listener.executor
    assert Subscription("g", print).executor is None
