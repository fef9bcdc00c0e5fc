"""The broker's reactor: Twisted's epoll reactor without the per-event logging context.

What lives here: ``LeanEPollReactor`` and ``install``. Twisted's ``EPollReactor.doPoll`` wraps
every ready descriptor's read or write in ``log.callWithLogger``, which builds a logging
context (a dict and four nested calls) only so that legacy ``twisted.python.log`` messages
carry the selectable's prefix. The broker logs through the standard ``logging`` module, so
that context buys nothing, and it costs microseconds per event: a synchronous producer makes
one event per put (tools/bench, the ``sync`` scenario). ``doPoll`` here dispatches straight to
``_doReadOrWrite``, which keeps all of Twisted's handling of reads, writes, disconnects and
exceptions raised by protocols; an exception escaping it is logged, as ``callWithLogger``
does, and the loop goes on. The usual event, input alone on a valid descriptor, runs
``_doReadOrWrite``'s steps for that case in the loop itself (``doRead``; a disconnect it
returns, or an exception it raises, goes to ``_disconnectSelectable`` as there), saving a
call per read: with many connections each read carries one request.

It also offers ``call_after_events``: work to do once every ready descriptor of the current
poll was handled. The broker writes what the reads of one poll staged, and sends the replies
that became ready, there: with many connections each holding one request, one poll's puts
share one write per partition (and one flush request) instead of one per connection.

Its waker (``LeanWaker``, what ``callFromThread`` writes to) writes its byte with a plain
``os.write``. Twisted's ``_UnixWaker`` reaches ``untilConcludes`` through
``twisted.python.util``, a module wrapped by a deprecation proxy whose Python
``__getattribute__`` costs more than the rest of a thread's hand-off; the group-commit flusher
pays it on its thread, holding the GIL, between an fsync and the replies it releases. Python
retries a write interrupted by a signal itself (PEP 475), which is all ``untilConcludes`` adds.

Each pass of Twisted's loop also asks ``runUntilCurrent`` and ``timeout`` about timed calls,
which between puts are neither due nor new; both answer that case here with a few attribute
reads (Twisted's then runs two list checks, ``min`` and ``max`` and a clock read more), and
leave every other case to Twisted's code.

Invariant: behaviour is ``EPollReactor``'s in all but the logging context, the waker's write,
the calls asked for with ``call_after_events`` (the inlined read does what
``_doReadOrWrite`` does) and the cost of a pass with no timed call due. ``install`` falls
back to Twisted's default reactor where epoll is missing or Twisted's internals differ
(checked once, at install time); ``after_events_caller`` then calls at once. Where
Twisted has no ``_UnixWaker``, the reactor keeps Twisted's waker.

Thread affinity: ``doPoll`` runs on the reactor thread (it *is* the reactor's loop);
``install`` runs on the main thread before anything imports ``twisted.internet.reactor``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

from twisted.logger import Logger
from twisted.python import log as legacy_log

from meta.server.reply_batch import AfterEvents

log = logging.getLogger("meta.server")
_twisted_log = Logger(namespace="meta.server.reactor")

try:
    from select import EPOLLIN as _EPOLLIN

    from twisted.internet.epollreactor import EPollReactor
except ImportError:  # no epoll on this platform
    EPollReactor = None  # type: ignore[assignment,misc]

try:
    from twisted.internet._signals import _UnixWaker
except ImportError:  # another Twisted: its own waker is kept
    _UnixWaker = None  # type: ignore[assignment,misc]


if _UnixWaker is not None:

    class LeanWaker(_UnixWaker):  # type: ignore[misc,valid-type]
        """Twisted's self-pipe waker, writing its byte without ``untilConcludes`` (see the
        module doc); any thread may call ``wakeUp``."""

        def wakeUp(self) -> None:
            if self.o is not None:
                try:
                    os.write(self.o, b"x")
                except BlockingIOError:
                    pass  # the pipe is full: the reactor is woken already


_NEEDED = (
    "_poller",
    "_selectables",
    "_doReadOrWrite",
    "_disconnectSelectable",
    "_cancellations",
    "_insertNewDelayedCalls",
    "_justStopped",
    "_newTimedCalls",
    "_pendingTimedCalls",
    "threadCallQueue",
)
TIMEOUT_MAX_S = 2147483
"""The longest poll (Twisted's bound: epoll_wait takes milliseconds as a C int)."""
CANCELLATIONS_MAX = 50
"""Twisted rebuilds its timed-call heap past this many cancelled calls (``runUntilCurrent``)."""


if EPollReactor is not None:

    class LeanEPollReactor(EPollReactor):  # type: ignore[misc,valid-type]
        """``EPollReactor`` whose ``doPoll`` skips ``log.callWithLogger`` and runs the calls
        of ``call_after_events`` (see module doc)."""

        def __init__(self) -> None:
            super().__init__()
            # Calls asked for while the events of a poll are dispatched (its ``pending``).
            self._after_events = AfterEvents()
            # Call ``function()`` once the events of the current poll are handled. A
            # function asked for several times in one poll runs once, in the order of its
            # first asking. It runs at once when no poll's events are being dispatched (a
            # timed call, a thread's call) or the poll found one ready descriptor only.
            # Reactor thread only. ``AfterEvents.call``: compiled in the compiled build,
            # where the broker asks for its end of batch after every read.
            self.call_after_events: Callable[[Callable[[], object]], None] = self._after_events.call

        def _wakerFactory(self):  # noqa: N802 - Twisted's spelling
            """``LeanWaker`` where this Twisted has the waker it derives from."""
            if _UnixWaker is None:
                return super()._wakerFactory()
            return LeanWaker()

        def runUntilCurrent(self) -> None:  # noqa: N802 - Twisted's spelling
            """Twisted's, after a check that ends the usual pass at once: no call from a
            thread, no timed call added, none due, few cancelled and no ``stop`` to act on
            (nothing to do)."""
            if (
                not self.threadCallQueue
                and not self._newTimedCalls
                and self._cancellations <= CANCELLATIONS_MAX
                and not self._justStopped
            ):
                pending = self._pendingTimedCalls
                if not pending or pending[0].time > self.seconds():
                    return
            super().runUntilCurrent()

        def timeout(self) -> float | None:
            """Twisted's: how long the poll may wait for the first timed call, from 0 to
            ``TIMEOUT_MAX_S``, or None when there is none."""
            if self._newTimedCalls:
                self._insertNewDelayedCalls()
            pending = self._pendingTimedCalls
            if not pending:
                return None
            delay = pending[0].time - self.seconds()
            if delay <= 0:
                return 0
            return delay if delay < TIMEOUT_MAX_S else TIMEOUT_MAX_S

        def doPoll(self, timeout: float | None) -> None:
            if timeout is None:
                timeout = -1  # wait indefinitely
            # EINTR is retried by Python itself (PEP 475); other errors are bugs: raise.
            events = self._poller.poll(timeout, len(self._selectables))
            selectables = self._selectables
            dispatch = self._doReadOrWrite
            # A poll with one ready descriptor has nothing to share: its work is done at once.
            after: dict[Callable[[], object], None] | None = {} if len(events) > 1 else None
            after_events = self._after_events
            after_events.pending = after
            try:
                for fd, event in events:
                    selectable = selectables.get(fd)
                    if selectable is None:
                        continue  # removed by an earlier event of this poll
                    try:
                        if event != _EPOLLIN or selectable.fileno() == -1:
                            dispatch(selectable, fd, event)
                            continue
                        # Input only, the usual event: ``_doReadOrWrite``'s read, inlined.
                        try:
                            why = selectable.doRead()
                        except BaseException:
                            self._read_failed(selectable)
                            continue
                        if why:
                            self._disconnectSelectable(selectable, why, True)
                    except KeyboardInterrupt:
                        raise
                    except BaseException:
                        _twisted_log.failure(
                            "while handling an event of {selectable}", None, selectable=selectable
                        )
            finally:
                # Also after a KeyboardInterrupt: work asked for is never left undone.
                if after is not None:
                    after_events.pending = None
                    self._run_after_events(after)

        def _read_failed(self, selectable: object) -> None:
            """``doRead`` raised: log it and disconnect, as ``_doReadOrWrite`` does."""
            why = sys.exc_info()[1]
            legacy_log.err()
            self._disconnectSelectable(selectable, why, False)

        def _run_after_events(self, after: dict[Callable[[], object], None]) -> None:
            for function in after:
                try:
                    function()
                except KeyboardInterrupt:
                    raise
                except BaseException:
                    _twisted_log.failure(
                        "while running {function} after a poll", None, function=function
                    )

        doIteration = doPoll


def after_events_caller(reactor: object) -> Callable[[Callable[[], object]], None]:
    """``reactor.call_after_events`` (``LeanEPollReactor``), or, for a reactor without it
    (another reactor, a test's clock), a caller that calls its function at once."""
    return getattr(reactor, "call_after_events", _call_now)


def _call_now(function: Callable[[], object]) -> None:
    function()


def install() -> str:
    """Install the lean reactor as Twisted's global reactor; return the installed class name.

    Keeps (and logs) a reactor that is already installed. Falls back to Twisted's default
    (logged) when epoll is missing or ``EPollReactor`` lacks an internal this module relies on.
    """
    from twisted.internet.main import installReactor

    if "twisted.internet.reactor" in sys.modules:
        log.warning("a reactor was installed before the broker's: keeping it")
        return _default_name()
    if EPollReactor is None:
        log.info("no epoll here: using Twisted's default reactor")
        return _default_name()
    reactor = LeanEPollReactor()
    missing = [name for name in _NEEDED if not hasattr(reactor, name)]
    if missing:
        log.warning(
            "Twisted's EPollReactor lacks %s: using Twisted's default reactor", ", ".join(missing)
        )
        return _default_name()
    installReactor(reactor)
    return type(reactor).__name__


def _default_name() -> str:
    from twisted.internet import reactor

    return type(reactor).__name__
