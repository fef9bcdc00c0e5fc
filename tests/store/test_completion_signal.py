"""``CompletionSignal``: the flusher thread's results reach the reactor thread through an
eventfd of the reactor's own poll, not Twisted's ``callFromThread`` queue.

Each test runs its own ``EPollReactor`` instance (never installed) with a deadline that stops
it; the test thread is the reactor thread.
"""

from __future__ import annotations

import logging
import threading

import pytest
from twisted.internet.task import Clock

from meta.store.group_commit import CompletionSignal, ThreadExecutor, completion_signal
from tests.descriptors import closing_reactor

epollreactor = pytest.importorskip("twisted.internet.epollreactor")

DEADLINE_S = 10.0


def no_thread_calls(*args: object) -> None:
    raise AssertionError("a result went through callFromThread")


def test_results_and_errors_reach_the_reactor_thread_through_the_eventfd():
    """Goal: a batch's result and a failed batch's error are delivered on the reactor thread,
    by the eventfd, once per submitted work, and the reactor's shutdown closes the eventfd.
    Method: a real epoll reactor whose ``callFromThread`` fails the test; it stops after the
    second result."""
    reactor = closing_reactor(epollreactor.EPollReactor())
    reactor.callFromThread = no_thread_calls
    executor = ThreadExecutor(reactor)
    delivered: list[tuple[object, str | None, str]] = []
    signals: list[object] = []

    def done(value: object, error: BaseException | None) -> None:
        name = None if error is None else type(error).__name__
        delivered.append((value, name, threading.current_thread().name))
        if len(delivered) == 2:
            reactor.stop()

    def start() -> None:
        executor.submit(lambda: 7, done)
        executor.submit(lambda: 1 / 0, done)
        signals.append(executor._signal)

    reactor.callWhenRunning(start)
    deadline = reactor.callLater(DEADLINE_S, reactor.stop)
    reactor.run(installSignalHandlers=False)
    assert deadline.active(), "the results did not wake the reactor"
    deadline.cancel()
    me = threading.current_thread().name
    assert delivered == [(7, None, me), (None, "ZeroDivisionError", me)]
    (signal,) = signals
    assert isinstance(signal, CompletionSignal)
    # The reactor's shutdown stopped the executor: the eventfd is closed and unregistered.
    assert signal.fileno() == -1 and signal not in reactor.getReaders()


def test_stop_delivers_the_results_left_and_closes_the_eventfd():
    """Goal: work finished after the reactor's last poll is still delivered, by ``stop``
    (on the reactor thread), before the eventfd is closed. Method: no poll runs at all."""
    reactor = closing_reactor(epollreactor.EPollReactor())
    executor = ThreadExecutor(reactor)
    delivered: list[object] = []
    executor.submit(lambda: "a", lambda value, error: delivered.append(value))
    executor.submit(lambda: "b", lambda value, error: delivered.append(value))
    executor.stop()
    assert delivered == ["a", "b"]
    assert not [r for r in reactor.getReaders() if isinstance(r, CompletionSignal)]


def test_a_raising_completion_is_logged_and_the_next_one_still_runs(caplog):
    reactor = closing_reactor(epollreactor.EPollReactor())
    signal = CompletionSignal(reactor)
    ran: list[int] = []

    def bad(value: object, error: BaseException | None) -> None:
        raise RuntimeError("a completion bug")

    signal.post(bad, None, None)
    signal.post(lambda value, error: ran.append(1), None, None)
    with caplog.at_level(logging.ERROR, logger="meta.store"):
        signal.doRead()
    signal.doRead()  # the eventfd was reset by the first read: nothing more, no error
    signal.close()
    assert ran == [1]
    assert any("flush completion" in r.getMessage() for r in caplog.records)


def test_a_reactor_without_descriptors_keeps_call_from_thread():
    assert completion_signal(Clock()) is None
