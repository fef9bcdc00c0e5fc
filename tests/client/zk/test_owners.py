"""``PendingOwners``: when a partition whose owner node is still held is tried again."""

from __future__ import annotations

import pytest

from meta.client.zk.owners import RETRY_DELAY_FIRST_S, PendingOwners

KEY = ("topic", "0-1")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_nothing_waiting_means_no_retry_time():
    pending = PendingOwners(2.0, Clock())

    assert pending.wait_s() is None
    assert not pending.is_due()
    assert not pending


def test_a_waiting_partition_is_due_after_the_first_delay():
    clock = Clock()
    pending = PendingOwners(2.0, clock)

    pending.replace([KEY])

    assert pending.wait_s() == pytest.approx(RETRY_DELAY_FIRST_S)
    assert not pending.is_due()
    clock.now += RETRY_DELAY_FIRST_S
    assert pending.is_due()
    assert pending.wait_s() == 0.0


def test_the_backoff_doubles_up_to_the_maximum():
    clock = Clock()
    pending = PendingOwners(0.5, clock)
    pending.replace([KEY])

    delays = []
    for _ in range(5):
        pending.still_held()
        delays.append(round(pending.wait_s(), 6))

    assert delays == [0.2, 0.4, 0.5, 0.5, 0.5]


def test_a_new_assignment_starts_the_backoff_again():
    clock = Clock()
    pending = PendingOwners(2.0, clock)
    pending.replace([KEY])
    pending.still_held()
    pending.still_held()

    pending.replace([KEY, ("topic", "0-2")])

    assert pending.wait_s() == pytest.approx(RETRY_DELAY_FIRST_S)
    assert pending.keys == {KEY, ("topic", "0-2")}


def test_a_taken_partition_waits_no_more():
    pending = PendingOwners(2.0, Clock())
    pending.replace([KEY, ("topic", "0-2")])

    pending.taken([KEY])

    assert pending.keys == {("topic", "0-2")}
    pending.clear()
    assert pending.wait_s() is None
