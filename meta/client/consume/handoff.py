"""``Handoff``: the listener behind ``MessageConsumer.poll``, one message at a time.

The fetch loop calls listeners on its own threads and moves a partition's offset past a
message once its listener returned (``meta.client.fetch.manager``). ``Handoff`` is such a
listener: it offers the message to ``poll`` and returns only when a ``poll`` call took it.
So an offset (and the offset committed) never passes a message that ``poll`` did not return.
Nothing is buffered beyond the one message offered, so nothing fetched but not returned is
ever counted as consumed.

When no ``poll`` takes the message within ``wait_s`` (the application is busy, or a
rebalance or ``close`` needs the fetch thread), the listener raises ``StopBatch``: the batch
ends before that message, which neither counts as consumed nor as a failure, and the next
fetch delivers it again. ``wait_s`` therefore also bounds how long a rebalance or shutdown
waits for a fetch thread.

Invariants: at most one message is offered at a time; a message is returned by ``poll`` at
most once per delivery, in each partition's order.

Thread-safety: thread-safe; ``receive_messages`` runs on fetch threads, ``poll`` on any
thread.
"""

from __future__ import annotations

import threading
import time

from meta.client.fetch.received import ReceivedMessage, StopBatch

HANDOFF_WAIT_S = 1.0
"""How long a fetch thread waits for ``poll`` to take a message before stopping its batch."""


class Handoff:
    """Hands fetched messages from fetch threads to ``poll`` callers, one at a time.

    Args:
        wait_s: how long a fetch thread offers one message before ending its batch.
    """

    def __init__(self, wait_s: float = HANDOFF_WAIT_S) -> None:
        assert wait_s > 0
        self._wait_s = wait_s
        self._cond = threading.Condition()
        self._offered: ReceivedMessage | None = None
        self._closed = False

    def receive_messages(self, message: ReceivedMessage) -> None:
        """The listener (a fetch thread): return once ``poll`` took ``message``.

        Raises:
            StopBatch: no ``poll`` took it within ``wait_s``, or the handoff was closed.
        """
        deadline = time.monotonic() + self._wait_s
        with self._cond:
            while self._offered is not None:  # Another partition's message waits.
                self._wait_until(deadline)
            self._offered = message
            self._cond.notify_all()
            while self._offered is message:
                try:
                    self._wait_until(deadline)
                except StopBatch:
                    self._offered = None
                    raise

    def _wait_until(self, deadline: float) -> None:
        """Wait for a change (lock held); raise ``StopBatch`` once closed or past deadline."""
        remaining = deadline - time.monotonic()
        if self._closed or remaining <= 0:
            raise StopBatch
        self._cond.wait(remaining)

    def poll(self, timeout_s: float | None) -> ReceivedMessage | None:
        """Take the next message offered, waiting at most ``timeout_s`` (None: until closed).

        Returns:
            The message, or None when none came in time or the handoff is closed.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self._offered is None:
                if self._closed:
                    return None
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
            message, self._offered = self._offered, None
            self._cond.notify_all()
            return message

    def close(self) -> None:
        """Release every waiting fetch thread and ``poll`` call; later offers stop at once."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
