"""``meta.server.reactor``: the lean epoll reactor behaves as Twisted's, minus the log context.

Each test runs its own ``LeanEPollReactor`` instance (never installed as the global reactor)
over real 127.0.0.1 sockets, with a deadline that stops it; ``install`` is checked in a
subprocess, where no reactor was imported yet.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from twisted.internet import main, protocol
from twisted.internet.epollreactor import EPollReactor
from twisted.internet.interfaces import IHalfCloseableDescriptor
from twisted.logger import globalLogPublisher
from zope.interface import directlyProvides

from meta.server import reactor as lean
from meta.server.reply_batch import AfterEvents
from tests.descriptors import closing_reactor
from tests.integration.broker_process import run_python

pytestmark = pytest.mark.skipif(lean.EPollReactor is None, reason="Linux only (epoll)")

DEADLINE_S = 10.0


class Echo(protocol.Protocol):
    def dataReceived(self, data: bytes) -> None:
        if data.startswith(b"boom"):
            raise ValueError("a protocol bug")
        self.transport.write(data)


class Probe(protocol.Protocol):
    """Client side: sends ``message`` and records what comes back and how the connection ends."""

    def __init__(self, message: bytes, done) -> None:
        self.message = message
        self.received = b""
        self.lost = None
        self.done = done

    def connectionMade(self) -> None:
        self.transport.write(self.message)

    def dataReceived(self, data: bytes) -> None:
        self.received += data
        if len(self.received) >= len(self.message):
            self.transport.loseConnection()

    def connectionLost(self, reason) -> None:
        self.lost = reason
        self.done(self)


def run_probes(reactor, messages: list[bytes]) -> list[Probe]:
    """Connect one ``Probe`` per message to an ``Echo`` server; run until all have ended."""
    factory = protocol.Factory.forProtocol(Echo)
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    finished: list[Probe] = []

    def done(probe: Probe) -> None:
        finished.append(probe)
        if len(finished) == len(messages):
            reactor.stop()

    probes = []
    for message in messages:
        probe = Probe(message, done)
        probes.append(probe)
        creator = protocol.ClientCreator(reactor, lambda probe=probe: probe)
        creator.connectTCP("127.0.0.1", port.getHost().port)
    deadline = reactor.callLater(DEADLINE_S, reactor.stop)
    reactor.run(installSignalHandlers=False)
    assert deadline.active(), "the reactor ran into the test's deadline"
    deadline.cancel()
    return probes


def test_echo_over_real_tcp():
    reactor = closing_reactor(lean.LeanEPollReactor())
    payload = bytes(range(256)) * 400  # > one read: several events per connection
    (probe,) = run_probes(reactor, [payload])
    assert probe.received == payload


def test_a_protocol_exception_closes_only_its_connection_and_is_logged():
    """Goal: Twisted's per-event error handling (in ``_doReadOrWrite``) is kept. Method: one
    connection's ``dataReceived`` raises; it is closed, the other echoes, the error is logged."""
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    try:
        reactor = closing_reactor(lean.LeanEPollReactor())
        bad, good = run_probes(reactor, [b"boom", b"hello"])
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert good.received == b"hello"
    assert bad.received == b""
    # Twisted logs it through its legacy ``log.err``: the failure is under "failure".
    failures = [event.get("log_failure") or event.get("failure") for event in events]
    assert any(failure is not None and failure.check(ValueError) for failure in failures)


class BrokenReader:
    """A selectable whose read fails and whose ``connectionLost`` raises too: the second
    error escapes ``_doReadOrWrite`` and reaches ``doPoll``'s own handler."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lost = 0

    def fileno(self) -> int:
        return self.fd

    def logPrefix(self) -> str:
        return "BrokenReader"

    def doRead(self):
        raise ValueError("read failed")

    def connectionLost(self, reason) -> None:
        self.lost += 1
        raise RuntimeError("connectionLost failed")


def test_an_error_escaping_the_dispatch_is_logged_and_the_loop_goes_on():
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    read_end, write_end = os.pipe()
    try:
        reactor = closing_reactor(lean.LeanEPollReactor())
        broken = BrokenReader(read_end)
        reactor.addReader(broken)
        os.write(write_end, b"x")
        ticks = []
        reactor.callLater(0.05, lambda: (ticks.append(1), reactor.stop()))
        reactor.callLater(DEADLINE_S, reactor.stop)
        reactor.run(installSignalHandlers=False)
    finally:
        globalLogPublisher.removeObserver(events.append)
        os.close(read_end)
        os.close(write_end)
    assert ticks == [1]  # the loop ran on after the error
    assert broken.lost == 1
    escaped = [e for e in events if "while handling an event" in e.get("log_format", "")]
    assert len(escaped) == 1
    assert isinstance(escaped[0]["log_failure"].value, RuntimeError)


def test_install_makes_it_the_global_reactor():
    out = run_python(
        "-c",
        "from meta.server.reactor import install; print(install());"
        "from twisted.internet import reactor; print(type(reactor).__name__)",
    ).stdout
    assert out.split() == ["LeanEPollReactor", "LeanEPollReactor"]


def test_install_keeps_a_reactor_imported_before_it():
    out = run_python(
        "-c",
        "from twisted.internet import reactor; from meta.server.reactor import install;"
        "print(install())",
    ).stdout
    assert out.split() == ["EPollReactor"]


def test_twisted_errors_reach_the_broker_log_with_time_and_level():
    """``configure_logging`` routes Twisted's own events (here an unhandled error in a
    Deferred) to the standard log format; Twisted's INFO chatter is left out."""
    done = run_python(
        "-c",
        "import gc; from meta.server.main import configure_logging;"
        "configure_logging('INFO');"
        "from twisted.logger import Logger; Logger().info('chatter');"
        "from twisted.internet.defer import Deferred;"
        "d = Deferred(); d.errback(ValueError('lost in a deferred')); del d; gc.collect()",
    )
    lines = done.stderr.splitlines()
    assert any(" CRITICAL twisted" in line for line in lines), done.stderr
    assert "ValueError: lost in a deferred" in done.stderr
    assert "chatter" not in done.stderr


class Recorder:
    """A selectable on a pipe's read end: each read records itself and asks for an
    after-events call that records its end."""

    def __init__(self, reactor, fd: int, name: str, log: list) -> None:
        self.reactor, self.fd, self.name, self.log = reactor, fd, name, log

    def fileno(self) -> int:
        return self.fd

    def logPrefix(self) -> str:
        return self.name

    def doRead(self) -> None:
        os.read(self.fd, 100)
        self.log.append(f"read {self.name}")
        self.reactor.call_after_events(lambda: self.log.append(f"after {self.name}"))
        self.log.append(f"read {self.name} returns")

    def connectionLost(self, reason) -> None:
        pass


def poll_once(reactor, names: list[str]) -> tuple[list[str], list[Recorder]]:
    """Make one pipe readable per name, then run one ``doPoll`` over all of them."""
    log: list[str] = []
    pipes = [os.pipe() for _ in names]
    recorders = [
        Recorder(reactor, r, name, log) for (r, _w), name in zip(pipes, names, strict=True)
    ]
    try:
        for recorder, (_r, write_end) in zip(recorders, pipes, strict=True):
            reactor.addReader(recorder)
            os.write(write_end, b"x")
        reactor.doPoll(1.0)
    finally:
        for recorder in recorders:
            reactor.removeReader(recorder)
        for pipe in pipes:
            os.close(pipe[0])
            os.close(pipe[1])
    return log, recorders


def test_calls_after_events_run_once_every_ready_descriptor_of_the_poll_was_handled():
    reactor = closing_reactor(lean.LeanEPollReactor())
    log, _recorders = poll_once(reactor, ["a", "b"])
    first, second = log[0][5:], log[2][5:]
    assert {first, second} == {"a", "b"}
    assert log == [
        f"read {first}",
        f"read {first} returns",
        f"read {second}",
        f"read {second} returns",
        f"after {first}",
        f"after {second}",
    ]


def test_outside_a_poll_or_in_a_poll_of_one_event_a_call_after_events_runs_at_once():
    reactor = closing_reactor(lean.LeanEPollReactor())
    ran: list[int] = []
    reactor.call_after_events(lambda: ran.append(1))
    assert ran == [1]
    log, _recorders = poll_once(reactor, ["a"])
    assert log == ["read a", "after a", "read a returns"]


def test_a_call_after_events_is_the_batch_modules_after_events_call():
    """The broker asks for its end of batch after every read: the compiled build runs that
    ask natively (``reply_batch`` is compiled, this module is not)."""
    reactor = closing_reactor(lean.LeanEPollReactor())
    caller = lean.after_events_caller(reactor)
    assert isinstance(caller.__self__, AfterEvents)
    assert caller.__self__.pending is None  # between polls


def test_a_reactor_without_call_after_events_gets_a_caller_that_calls_at_once():
    ran: list[int] = []
    lean.after_events_caller(object())(lambda: ran.append(1))
    assert ran == [1]
    reactor = closing_reactor(lean.LeanEPollReactor())
    assert lean.after_events_caller(reactor) == reactor.call_after_events


def test_a_failing_call_after_events_is_logged_and_the_others_still_run(monkeypatch):
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    reactor = closing_reactor(lean.LeanEPollReactor())
    ran: list[str] = []

    def fail() -> None:
        raise ZeroDivisionError("after")

    def read_both(selectable: Recorder) -> None:
        os.read(selectable.fd, 100)
        reactor.call_after_events(fail)  # asked for twice in the poll: runs once
        reactor.call_after_events(lambda: ran.append(selectable.name))

    monkeypatch.setattr(Recorder, "doRead", read_both)
    try:
        poll_once(reactor, ["a", "b"])
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert sorted(ran) == ["a", "b"]
    failed = [e for e in events if "after a poll" in e.get("log_format", "")]
    assert len(failed) == 1
    assert isinstance(failed[0]["log_failure"].value, ZeroDivisionError)


def test_a_call_from_another_thread_wakes_the_reactor_through_the_lean_waker():
    """Goal: ``LeanWaker`` wakes a reactor blocked in its poll. Method: the reactor polls
    with no timer due for far longer than the test waits; a thread's ``callFromThread``
    must run promptly, and a full pipe (many wake-ups) must not raise."""
    reactor = closing_reactor(lean.LeanEPollReactor())
    assert isinstance(reactor.waker, lean.LeanWaker)
    ran: list[float] = []

    def from_thread() -> None:
        for _ in range(100_000):  # fills the pipe: the extra wake-ups are dropped
            reactor.waker.wakeUp()
        reactor.callFromThread(lambda: (ran.append(time.monotonic()), reactor.stop()))

    reactor.callWhenRunning(threading.Thread(target=from_thread).start)
    deadline = reactor.callLater(DEADLINE_S, reactor.stop)
    started = time.monotonic()
    reactor.run(installSignalHandlers=False)
    assert deadline.active(), "the thread's call did not wake the reactor"
    deadline.cancel()
    assert len(ran) == 1 and ran[0] - started < DEADLINE_S


class Readable:
    """A selectable on a pipe whose ``doRead`` returns ``why`` (or raises it), recording how
    the reactor ends it; ``fd`` -1 makes its ``fileno`` say it is closed."""

    def __init__(self, fd: int, why: object = None) -> None:
        self.fd, self.why = fd, why
        self.calls: list[str] = []

    def fileno(self) -> int:
        return self.fd

    def logPrefix(self) -> str:
        return "Readable"

    def doRead(self):
        self.calls.append("doRead")
        if isinstance(self.why, BaseException):
            raise self.why
        return self.why

    def readConnectionLost(self, reason) -> None:
        self.calls.append(f"readConnectionLost {reason.type.__name__}")

    def connectionLost(self, reason) -> None:
        self.calls.append(f"connectionLost {reason.type.__name__}")


@pytest.mark.parametrize(
    "why", [None, main.CONNECTION_DONE, main.CONNECTION_LOST, ValueError("read failed"), "closed"]
)
def test_an_input_event_ends_a_selectable_as_twisteds_reactor_does(why):
    """Goal: the lean loop's inlined read handles what ``doRead`` returns or raises, and a
    closed descriptor, as ``EPollReactor._doReadOrWrite`` does. Method: the same readable
    pipe under each reactor for one poll; the calls each selectable got are the same."""
    calls = []
    for reactor_class in (EPollReactor, lean.LeanEPollReactor):
        read_end, write_end = os.pipe()
        try:
            reactor = closing_reactor(reactor_class())
            selectable = Readable(read_end, None if why == "closed" else why)
            if why != "closed":
                directlyProvides(selectable, IHalfCloseableDescriptor)
            reactor.addReader(selectable)
            os.write(write_end, b"x")
            if why == "closed":
                selectable.fd = -1
            reactor.doPoll(DEADLINE_S)
            calls.append(selectable.calls)
            reactor.removeAll()
        finally:
            os.close(read_end)
            os.close(write_end)
    assert calls[1] == calls[0]
    assert calls[0]  # the reactor acted on the event


def test_the_poll_timeout_is_twisteds_for_no_call_a_far_one_a_later_one_and_a_due_one():
    """Goal: the lean ``timeout`` answers as ``ReactorBase.timeout``. Method: a reactor on a
    frozen clock, timed calls added one by one, sooner each time; both answers compared."""
    reactor = closing_reactor(lean.LeanEPollReactor())
    reactor.seconds = lambda: 1000.0
    twisted_timeout = lean.EPollReactor.timeout
    answers = [(reactor.timeout(), twisted_timeout(reactor))]
    for delay_s in (10**8, 2.5, 0.0):
        reactor.callLater(delay_s, lambda: None)
        answers.append((reactor.timeout(), twisted_timeout(reactor)))
    assert [lean_answer for lean_answer, _ in answers] == [None, lean.TIMEOUT_MAX_S, 2.5, 0]
    for lean_answer, twisted_answer in answers:
        assert lean_answer == twisted_answer


def test_timed_calls_run_when_due_and_not_before_with_the_lean_pass():
    reactor = closing_reactor(lean.LeanEPollReactor())
    now = [1000.0]
    reactor.seconds = lambda: now[0]
    ran: list[str] = []
    reactor.callLater(1.0, ran.append, "later")
    reactor.runUntilCurrent()  # adds it; not due
    reactor.runUntilCurrent()  # the lean pass: nothing due
    assert ran == []
    assert reactor.timeout() == 1.0
    now[0] += 1.0
    reactor.runUntilCurrent()
    assert ran == ["later"]
    assert reactor.timeout() is None
