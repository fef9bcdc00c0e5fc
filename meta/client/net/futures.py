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

The fast ``FastPendingFuture`` and ``complete_batch_fast`` rely on private details of
``concurrent.futures``: the attributes ``Future.__init__`` sets (``_condition``, ``_state``,
``_result``, ``_exception``, ``_waiters``, ``_done_callbacks``), ``Future._invoke_callbacks``
and the state constants of ``concurrent.futures._base``, stable from Python 3.8 to 3.13.
``INTERNALS_FIT`` checks, once at import, that the Python version is one of those and that a
plain ``Future`` has exactly what they use; if not, ``PendingFuture`` and ``complete_batch``
are the public-API fallback (``PublicPendingFuture``, ``complete_batch_public``): a
``Condition`` per future and one ``set_result`` per reply, slower but the same behaviour.
The tests run both.

Threads: created on the requesting thread; completed on the connection's reader thread
(replies, deadlines) or on whichever thread fails or closes the connection.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any

try:
    from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING
except ImportError:  # A Python whose internals moved: the public fallback is used.
    CANCELLED = CANCELLED_AND_NOTIFIED = FINISHED = PENDING = None

Outcome = tuple[Any, Any, BaseException | None]
"""``(future, value, error)``: what ``complete_batch`` sets; ``error`` wins when not None."""

TESTED_VERSIONS = ((3, 8), (3, 14))
"""``[first, end)`` of the Python versions whose ``Future`` internals the fast path knows."""
FUTURE_ATTRIBUTES = {"_condition", "_state", "_result", "_exception", "_waiters",
                     "_done_callbacks"}  # fmt: skip
"""What ``Future.__init__`` sets and the fast path sets and reads itself."""


def internals_fit(version: tuple[int, ...] = sys.version_info[:2]) -> bool:
    """Whether the fast path may use ``concurrent.futures`` internals on this Python."""
    first, end = TESTED_VERSIONS
    if not first <= tuple(version[:2]) < end or PENDING is None:
        return False
    plain = Future()
    return set(vars(plain)) == FUTURE_ATTRIBUTES and callable(
        getattr(plain, "_invoke_callbacks", None)
    )


class FastPendingFuture(Future):
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


def complete_batch_fast(condition: threading.Condition, outcomes: Iterable[Outcome]) -> None:
    """Complete every future of ``outcomes`` (all sharing ``condition``) in one acquisition.

    A future no longer PENDING is skipped, except that one cancelled meanwhile is moved on the
    way ``set_running_or_notify_cancel`` does, so ``wait()`` callers hear. Done-callbacks run
    after the condition is released, on the calling thread.
    """
    with_callbacks: list[FastPendingFuture] = []
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


class PublicPendingFuture(Future):
    """``FastPendingFuture`` on ``Future``'s public API only (a ``Condition`` of its own).

    Args: as ``FastPendingFuture``; ``condition`` is not used.
    """

    def __init__(
        self,
        owner: Any,
        deadline: float,
        timeout_s: float,
        convert: Callable[[Any], Any] | None,
        condition: threading.Condition | None = None,
    ) -> None:
        super().__init__()
        self.owner = owner
        self.opaque = 0
        self.deadline = deadline
        self.timeout_s = timeout_s
        self.convert = convert

    def cancel(self) -> bool:
        cancelled = super().cancel()
        if cancelled and self.owner.forget(self.opaque):
            self.set_running_or_notify_cancel()  # As FastPendingFuture.cancel.
        return cancelled


def complete_batch_public(condition: threading.Condition, outcomes: Iterable[Outcome]) -> None:
    """``complete_batch_fast`` on ``Future``'s public API.

    Each future is claimed (``set_running_or_notify_cancel``) under ``condition``, so two
    threads completing the same future cannot both set it; a cancelled one is notified there.
    Results are set after the condition is released (done-callbacks run then, on this thread).
    """
    claimed: list[Outcome] = []
    with condition:
        for outcome in outcomes:
            try:
                if outcome[0].set_running_or_notify_cancel():
                    claimed.append(outcome)
            except RuntimeError:
                pass  # Already completed (or its cancellation already notified).
    for future, value, error in claimed:
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)


INTERNALS_FIT = internals_fit()
"""True: ``PendingFuture`` and ``complete_batch`` are the fast pair; False: the public one."""

PendingFuture: type[FastPendingFuture] | type[PublicPendingFuture]
if INTERNALS_FIT:
    PendingFuture, complete_batch = FastPendingFuture, complete_batch_fast
else:
    PendingFuture, complete_batch = PublicPendingFuture, complete_batch_public


def convert_reply(future: Any, reply: Any) -> Outcome:
    """``(future, convert(reply), None)``, or ``(future, None, error)`` if ``convert`` raised."""
    convert = future.convert
    if convert is None:
        return (future, reply, None)
    try:
        return (future, convert(reply), None)
    except Exception as error:  # Handed to the caller through the future.
        return (future, None, error)
