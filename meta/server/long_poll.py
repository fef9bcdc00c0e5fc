"""``DataWaiters``: the gets that wait for data (long polling), woken in slices.

What lives here: the long-polled gets held per partition log, each with its timeout, and
how they are woken when the log's visible end moves. One put can wake a great many of them
(up to ``DATA_WAITERS_MAX``); answering them all in one go would stall the
reactor for seconds: the put that woke them, and every other client, would wait. So a wake
only moves the log's waiters to a queue, and the queue is served ``WAKE_SLICE`` gets per
reactor turn (``callLater(0, ...)``), the replies of each slice written together; between
slices the reactor serves everyone else. The put is acknowledged before the first slice.

Invariants:
    * a waiter is in exactly one place: waiting on its log, or in the wake queue;
    * ``woken`` is called exactly once per waiter: by a slice (its timeout cancelled if it
      had not fired), by its timeout while still waiting, or at once when refused;
    * at most ``DATA_WAITERS_MAX`` gets wait on logs at once; beyond that, and while the
      broker stops, a get is answered at once (as if its wait ended).

Reactor thread only; the reactor (``callLater``) is injected (STYLE 11).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["DATA_WAITERS_MAX", "WAKE_SLICE", "DataWaiters"]

DATA_WAITERS_MAX = 100_000
WAKE_SLICE = 256
"""Gets answered per reactor turn when a put wakes many (about 2-5 ms of work)."""


class DataWaiters:
    """The long-polled gets of a broker.

    Args:
        reactor: provides ``callLater``.
        flush_output: writes the replies the woken gets gathered (``Broker.flush_output``).
    """

    def __init__(self, reactor: Any, flush_output: Callable[[], None]) -> None:
        self._reactor = reactor
        self._flush_output = flush_output
        self._waiting: dict[Any, dict[object, tuple[Callable[[], None], Any]]] = {}
        self._count = 0
        self._queue: deque[tuple[Callable[[], None], Any]] = deque()
        self._slice_call: Any = None
        self._stopping = False

    @property
    def waiting(self) -> int:
        """Gets waiting on a log (not counting those queued to be woken)."""
        return self._count

    @property
    def queued(self) -> int:
        """Gets woken but not answered yet (served in slices)."""
        return len(self._queue)

    def wait(self, partition_log: Any, timeout_s: float, woken: Callable[[], None]) -> None:
        """Call ``woken()`` once ``partition_log``'s visible end moves, or after ``timeout_s``.

        Beyond ``DATA_WAITERS_MAX`` waiting gets, and once ``release_all`` ran, ``woken`` is
        called at once.
        """
        if self._count >= DATA_WAITERS_MAX or self._stopping:
            woken()
            return
        waiters = self._waiting.get(partition_log)
        if waiters is None:
            waiters = self._waiting[partition_log] = {}
            partition_log.on_visible = self._visible
        key = object()
        call = self._reactor.callLater(timeout_s, self._timed_out, partition_log, key)
        waiters[key] = (woken, call)
        self._count += 1

    def release_all(self) -> None:
        """The broker stops: answer every waiting and queued get now, refuse new waits."""
        self._stopping = True
        for partition_log in list(self._waiting):
            self._visible(partition_log)
        if self._slice_call is not None and self._slice_call.active():
            self._slice_call.cancel()
        self._slice_call = None
        self._wake(len(self._queue))

    def _visible(self, partition_log: Any) -> None:
        """``partition_log``'s visible end moved: queue its waiters, wake them in slices."""
        waiters = self._waiting.pop(partition_log, {})
        partition_log.on_visible = None
        self._count -= len(waiters)
        self._queue.extend(waiters.values())
        if self._queue and self._slice_call is None and not self._stopping:
            self._slice_call = self._reactor.callLater(0, self._wake_slice)

    def _wake_slice(self) -> None:
        self._slice_call = None
        self._wake(WAKE_SLICE)
        if self._queue:
            self._slice_call = self._reactor.callLater(0, self._wake_slice)

    def _wake(self, count: int) -> None:
        """Answer up to ``count`` queued gets, then write their replies."""
        queue = self._queue
        for _ in range(min(count, len(queue))):
            woken, call = queue.popleft()
            if call.active():  # its timeout may have fired while it was queued
                call.cancel()
            woken()
        self._flush_output()

    def _timed_out(self, partition_log: Any, key: object) -> None:
        waiters = self._waiting.get(partition_log)
        entry = waiters.pop(key, None) if waiters is not None else None
        if entry is None:
            return  # already queued to be woken: its slice answers it
        self._count -= 1
        if not waiters:
            del self._waiting[partition_log]
            partition_log.on_visible = None
        entry[0]()
        self._flush_output()
