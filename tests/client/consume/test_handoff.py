"""``Handoff``, the listener behind ``poll``: one message at a time, bounded waits.

Fetch threads are plain threads here; every wait has a deadline.
"""

from __future__ import annotations

import threading

import pytest

from meta.client.consume.handoff import Handoff
from meta.client.fetch.received import StopBatch

DEADLINE_S = 10.0


def offer(handoff: Handoff, message) -> tuple[threading.Thread, list]:
    """Offer ``message`` on a thread of its own; the list gets "taken" or "stopped"."""
    outcome: list = []

    def run() -> None:
        try:
            handoff.receive_messages(message)
            outcome.append("taken")
        except StopBatch:
            outcome.append("stopped")

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_poll_returns_none_when_nothing_is_offered_in_time():
    assert Handoff().poll(0.01) is None


def test_the_offer_returns_once_poll_took_the_message():
    handoff = Handoff(wait_s=DEADLINE_S)
    thread, outcome = offer(handoff, "m1")
    assert handoff.poll(DEADLINE_S) == "m1"
    thread.join(DEADLINE_S)
    assert outcome == ["taken"]


def test_an_offer_nobody_takes_stops_the_batch_and_is_withdrawn():
    handoff = Handoff(wait_s=0.05)
    with pytest.raises(StopBatch):
        handoff.receive_messages("m1")
    assert handoff.poll(0.01) is None


def test_offers_from_two_threads_are_taken_one_at_a_time():
    handoff = Handoff(wait_s=DEADLINE_S)
    first, first_outcome = offer(handoff, "a")
    second, second_outcome = offer(handoff, "b")
    taken = {handoff.poll(DEADLINE_S), handoff.poll(DEADLINE_S)}
    first.join(DEADLINE_S)
    second.join(DEADLINE_S)
    assert taken == {"a", "b"}
    assert first_outcome == second_outcome == ["taken"]


def test_close_stops_a_waiting_offer_and_ends_a_waiting_poll():
    handoff = Handoff(wait_s=DEADLINE_S)
    thread, outcome = offer(handoff, "m1")
    polled: list = []
    closed = Handoff(wait_s=DEADLINE_S)
    poller = threading.Thread(target=lambda: polled.append(closed.poll(None)))
    poller.start()
    handoff.close()
    closed.close()
    thread.join(DEADLINE_S)
    poller.join(DEADLINE_S)
    assert outcome == ["stopped"] and polled == [None]
    with pytest.raises(StopBatch):
        handoff.receive_messages("m2")
