"""``PendingFuture``: a light ``concurrent.futures.Future`` for pipelined requests, batch-completed.

A ``PipelinedConnection`` creates one ``PendingFuture`` per request. It is a real
``concurrent.futures.Future`` (``wait``, ``as_completed``, ``add_done_callback``, ``cancel``
all work), but cheaper in the two places that cost most per message:

* Creation: ``Future.__init__`` builds a ``threading.Condition`` per future. Every future of
  one connection shares the connection's condition instead (over an ``RLock``, so
  ``concurrent.futures.wait``, which acquires the condition of each future it is given, may
  hold it several times). ``result()`` and ``exception()`` wait on it in a loop, as a wake-up
  may be for another future of the same connection.
* Completion: ``complete_batch`` completes a whole run of replies under one acquisition of
  that condition and one ``notify_all``, then runs done-callbacks outside it.

Invariants: a future leaves PENDING at most once (a reply, a deadline, ``cancel()`` or the
connection failing), always under its condition; result and exception are set before the
state becomes FINISHED, so a thread that reads FINISHED without the lock sees them. A future
cancelled while its reply was being converted stays cancelled and its ``wait()`` callers
hear (as ``set_running_or_notify_cancel`` does). Waiters installed by ``wait()`` are notified
under the condition, like ``Future.set_result`` does.

Relies on the attributes ``Future.__init__`` sets (``_condition``, ``_state``, ``_result``,
``_exception``, ``_waiters``, ``_done_callbacks``), stable since Python 3.2; the tests check
that a ``PendingFuture`` has every attribute a plain ``Future`` has.

Threads: created on the requesting thread; completed on the connection's reader thread
(replies, deadlines) or on whichever thread fails or closes the connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING
from typing import Any

Outcome = tuple["PendingFuture", Any, BaseException | None]
"""``(future, value, error)``: what ``complete_batch`` sets; ``error`` wins when not None."""


class PendingFuture(Future):
    """A request's future: shares its connection's condition; cancelling forgets the request.

    Args:
        owner: has ``forget(opaque) -> bool``, called when the future is cancelled; True
            when it removed the request, which then will never complete the future.
        deadline: ``time.monotonic()`` value after which the request has timed out.
        timeout_s: the request's timeout, for error texts.
        convert: applied to the reply before it completes the future, or None.
        condition: shared by every future of the owner; a fresh one when None.
    """

    def __init__(  # Deliberately not calling Future.__init__: no Condition per future.
        self,
        owner: Any,
        deadline: float,
        timeout_s: float,
        convert: Callable[[Any], Any] | None,
        condition: threading.Condition | None = None,
    ) -> None:
        self._condition = condition if condition is not None else threading.Condition()
        self._state = PENDING
        self._result = None
        self._exception = None
        self._waiters: list = []
        self._done_callbacks: list = []
        self.owner = owner
        self.opaque = 0
        self.deadline = deadline
        self.timeout_s = timeout_s
        self.convert = convert

    def cancel(self) -> bool:
        cancelled = super().cancel()
        if cancelled and self.owner.forget(self.opaque):
            # Nobody else holds the request now: tell wait() callers, as an executor would.
            self.set_running_or_notify_cancel()
        return cancelled

    def result(self, timeout: float | None = None) -> Any:
        """As ``Future.result``; the shared condition may wake it for other futures."""
        if self._state == FINISHED and self._exception is None:
            return self._result  # Fast path, no lock: FINISHED never changes back.
        self._wait_done(timeout)
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """As ``Future.exception``; the shared condition may wake it for other futures."""
        self._wait_done(timeout)
        return self._exception

    def _wait_done(self, timeout: float | None) -> None:
        """Return once FINISHED; raise CancelledError, or TimeoutError after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while True:
                state = self._state
                if state == FINISHED:
                    return
                if state in (CANCELLED, CANCELLED_AND_NOTIFIED):
                    raise CancelledError()
                if deadline is None:
                    self._condition.wait()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise FutureTimeoutError()
                self._condition.wait(remaining)


def complete_batch(condition: threading.Condition, outcomes: Iterable[Outcome]) -> None:
    """Complete every future of ``outcomes`` (all sharing ``condition``) in one acquisition.

    A future no longer PENDING is skipped, except that one cancelled meanwhile is moved on the
    way ``set_running_or_notify_cancel`` does, so ``wait()`` callers hear. Done-callbacks run
    after the condition is released, on the calling thread.
    """
    with_callbacks: list[PendingFuture] = []
    with condition:
        for future, value, error in outcomes:
            state = future._state
            if state != PENDING:
                if state == CANCELLED:
                    future._state = CANCELLED_AND_NOTIFIED
                    for waiter in future._waiters:
                        waiter.add_cancelled(future)
                continue
            if error is None:
                future._result = value
                future._state = FINISHED
                for waiter in future._waiters:
                    waiter.add_result(future)
            else:
                future._exception = error
                future._state = FINISHED
                for waiter in future._waiters:
                    waiter.add_exception(future)
            if future._done_callbacks:
                with_callbacks.append(future)
        condition.notify_all()
    for future in with_callbacks:
        future._invoke_callbacks()


def convert_reply(future: PendingFuture, reply: Any) -> Outcome:
    """``(future, convert(reply), None)``, or ``(future, None, error)`` if ``convert`` raised."""
    convert = future.convert
    if convert is None:
        return (future, reply, None)
    try:
        return (future, convert(reply), None)
    except Exception as error:  # Handed to the caller through the future.
        return (future, None, error)
