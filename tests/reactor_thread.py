"""A real Twisted reactor running in a daemon thread, for integration tests.

Integration tests (real ZooKeeper, real sockets) need a running reactor, but pytest owns the
main thread. ``reactor_thread()`` starts the global reactor once per process with
``installSignalHandlers=False`` in a daemon thread; tests then run code on it with
``ReactorThread.call``, which waits for the result (Deferreds included) with a timeout.

The reactor cannot be restarted, so it is stopped only at the end of the process: by
``stop_reactor_thread()`` (call it from a ``pytest_sessionfinish`` hook) or, failing that, by
an ``atexit`` handler.

Thread affinity: ``call`` and ``stop`` are for any thread except the reactor thread.
"""

from __future__ import annotations

import atexit
import queue
import threading
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

CALL_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0

_lock = threading.Lock()
_instance: ReactorThread | None = None


class ReactorThread:
    """The global reactor, running in a daemon thread. Build it with ``reactor_thread()``."""

    def __init__(self) -> None:
        from twisted.internet import reactor

        self.reactor = reactor
        self._thread = threading.Thread(
            target=reactor.run,
            kwargs={"installSignalHandlers": False},
            name="twisted-reactor",
            daemon=True,
        )

    def start(self) -> None:
        """Start the reactor thread and wait until the reactor runs."""
        self._thread.start()
        running = threading.Event()
        self.reactor.callFromThread(running.set)
        if not running.wait(CALL_TIMEOUT_S):
            raise TimeoutError(f"the reactor did not start within {CALL_TIMEOUT_S} s")

    @property
    def running(self) -> bool:
        """True while the reactor thread is alive."""
        return self._thread.is_alive()

    def call(
        self, function: Callable[..., Any], *args: Any, timeout_s: float = CALL_TIMEOUT_S, **kwargs
    ) -> Any:
        """Run ``function(*args, **kwargs)`` on the reactor thread and return its result.

        A returned Deferred is waited for. An exception (or failed Deferred) is raised here.

        Raises:
            TimeoutError: no result within ``timeout_s``; the call keeps running.
        """
        assert threading.current_thread() is not self._thread, "would deadlock"
        results: queue.Queue[Any] = queue.Queue(maxsize=1)

        def run() -> None:
            # addBoth consumes a failure, so Twisted does not log it as unhandled.
            defer.maybeDeferred(function, *args, **kwargs).addBoth(results.put)

        self.reactor.callFromThread(run)
        try:
            result = results.get(timeout=timeout_s)
        except queue.Empty:
            name = getattr(function, "__qualname__", repr(function))
            raise TimeoutError(f"{name} did not finish within {timeout_s} s") from None
        if isinstance(result, Failure):
            result.raiseException()
        return result

    def stop(self) -> None:
        """Stop the reactor (running its shutdown triggers) and join the thread."""
        if self.running:
            self.reactor.callFromThread(self.reactor.stop)
            self._thread.join(STOP_TIMEOUT_S)


def reactor_thread() -> ReactorThread:
    """Return the process-wide running ``ReactorThread``, starting it on the first call."""
    global _instance
    with _lock:
        if _instance is None:
            _instance = ReactorThread()
            _instance.start()
            atexit.register(stop_reactor_thread)
        return _instance


def stop_reactor_thread() -> None:
    """Stop the reactor thread if it was started. After this no test can use a reactor."""
    with _lock:
        if _instance is not None:
            _instance.stop()
