"""Long-polled gets woken in slices (meta.server.long_poll), on a ``task.Clock``."""

from __future__ import annotations

from twisted.internet.task import Clock

from meta.server import long_poll
from meta.server.long_poll import WAKE_SLICE, DataWaiters


class TurnClock(Clock):
    """A ``Clock`` whose ``turn`` runs only the calls due when it starts, as a reactor's
    iteration does (``Clock.advance`` also runs the calls those calls schedule for now)."""

    def turn(self, seconds: float = 0.0) -> None:
        self.rightNow += seconds
        due = [call for call in self.calls if call.getTime() <= self.seconds()]
        for call in due:
            if call not in self.calls:
                continue  # cancelled by a call before it in this turn
            self.calls.remove(call)
            call.called = 1
            call.func(*call.args, **call.kw)


class Log:
    """What the waiters use of a partition log."""

    on_visible = None


class Setup:
    def __init__(self) -> None:
        self.clock = TurnClock()
        self.flushes = 0
        self.waiters = DataWaiters(self.clock, self.flush)
        self.woken: list[int] = []

    def flush(self) -> None:
        self.flushes += 1

    def wait(self, log: Log, number: int, timeout_s: float = 10.0) -> None:
        self.waiters.wait(log, timeout_s, lambda: self.woken.append(number))


def test_a_wake_answers_nothing_at_once_and_one_slice_per_reactor_turn():
    setup, log = Setup(), Log()
    for number in range(2 * WAKE_SLICE + 1):
        setup.wait(log, number)
    log.on_visible(log)
    assert (setup.woken, setup.waiters.waiting, setup.waiters.queued) == ([], 0, 2 * WAKE_SLICE + 1)
    setup.clock.turn(0)
    assert setup.woken == list(range(WAKE_SLICE))
    setup.clock.turn(0)
    setup.clock.turn(0)
    assert setup.woken == list(range(2 * WAKE_SLICE + 1))
    assert (setup.flushes, log.on_visible, setup.clock.getDelayedCalls()) == (3, None, [])


def test_a_get_whose_timeout_fires_while_queued_is_answered_once():
    setup, log = Setup(), Log()
    setup.wait(log, 1, timeout_s=0.0)
    setup.wait(log, 2, timeout_s=0.0)
    log.on_visible(log)  # queued; their timeouts run before the slice, in the same turn
    setup.clock.turn()
    assert (setup.woken, setup.clock.getDelayedCalls()) == ([1, 2], [])


def test_a_timeout_answers_its_get_alone():
    setup, log = Setup(), Log()
    setup.wait(log, 1, timeout_s=1.0)
    setup.wait(log, 2, timeout_s=5.0)
    setup.clock.turn(1.0)
    assert (setup.woken, setup.waiters.waiting, log.on_visible is not None) == ([1], 1, True)
    setup.clock.turn(4.0)
    assert (setup.woken, log.on_visible) == ([1, 2], None)


def test_beyond_the_cap_and_after_release_all_a_get_is_answered_at_once(monkeypatch):
    monkeypatch.setattr(long_poll, "DATA_WAITERS_MAX", 1)
    setup, log = Setup(), Log()
    setup.wait(log, 1)
    setup.wait(log, 2)
    assert setup.woken == [2]
    setup.waiters.release_all()
    setup.wait(log, 3)
    assert (setup.woken, setup.clock.getDelayedCalls()) == ([2, 1, 3], [])
