"""``ZooKeeperReads``: the dashboard's own ZooKeeper worker, so pages never delay registration.

A broker registers its nodes on the registry's one worker thread (``meta.server.registry``);
the dashboard's reads, which any HTTP client can ask for, run here instead: at most
``READ_THREADS`` threads and ``READS_QUEUED_MAX`` distinct reads waiting (one more gets
``ZooKeeperBusy``, 503, at once). Identical reads asked while one is running share it, and
a result is reused for ``READ_CACHE_S``; a caller whose read is not done within
``READ_WAIT_S`` gets ``ZooKeeperSlow`` (504), while the read goes on and its result is
cached for the next caller.

Reactor thread only, but the worker's threads, which run the read functions (given by
``meta.dashboard.zookeeper``; they touch no shared state) and hand each result back with
``callFromThread``.
"""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from meta.errors import MetaError

READ_THREADS = 2
"""Threads of the dashboard's ZooKeeper worker."""
READS_QUEUED_MAX = 32
"""Distinct reads waiting for a thread; one more gets 503 at once."""
READ_CACHE_S = 2.0
"""How long a read's result is reused for the same read."""
READS_CACHED_MAX = 256
READ_WAIT_S = 10.0
"""Longest wait of a page for its read; then 504 (the read goes on, and is cached)."""


class ZooKeeperBusy(MetaError):
    """The dashboard's ZooKeeper worker has ``READS_QUEUED_MAX`` reads waiting (503)."""


class ZooKeeperSlow(MetaError):
    """A dashboard read of ZooKeeper was not done within ``READ_WAIT_S`` (504)."""


class ZooKeeperReads:
    """The dashboard's own ZooKeeper worker: bounded, coalescing, with a short cache.

    Args:
        reactor: where results are delivered (``callFromThread``, ``callLater``).
        threads: worker threads, started when first needed (daemons: a read stuck in
            ZooKeeper never holds the process at exit).
        queued_max: distinct reads waiting for a thread before new ones are refused.
        cache_s: how long the result of a keyed read is reused.
        wait_s: how long a caller waits for its result.
    """

    def __init__(
        self,
        reactor: Any,
        threads: int = READ_THREADS,
        queued_max: int = READS_QUEUED_MAX,
        cache_s: float = READ_CACHE_S,
        wait_s: float = READ_WAIT_S,
    ) -> None:
        self._reactor = reactor
        self._threads_max = threads
        self._queued_max = queued_max
        self._cache_s = cache_s
        self._wait_s = wait_s
        self._threads: list[threading.Thread] = []
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._waiters: dict[Hashable, list[defer.Deferred]] = {}  # read in work -> callers
        self._cache: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()
        self._stopped = False

    @property
    def in_work(self) -> int:
        """Reads queued or running."""
        return len(self._waiters)

    def read(self, key: Hashable | None, function: Callable[[], Any]) -> defer.Deferred:
        """A Deferred of ``function()``, run on a worker thread. Callers of the same ``key``
        share one run and, for ``READ_CACHE_S``, its result; None: never shared (a write).
        Fails with ``ZooKeeperBusy`` at once when the worker is full, ``ZooKeeperSlow`` after
        ``wait_s`` without a result."""
        if key is not None:
            cached = self._cache.get(key)
            if cached is not None and self._reactor.seconds() - cached[0] < self._cache_s:
                return defer.succeed(cached[1])
            waiting = self._waiters.get(key)
            if waiting is not None:
                return self._waiter(waiting)
        if self._stopped or len(self._waiters) >= self._threads_max + self._queued_max:
            return defer.fail(
                ZooKeeperBusy(
                    f"ZooKeeper reads of the dashboard are busy ({len(self._waiters)} in work):"
                    " try again (the broker's registration is not affected)"
                )
            )
        if key is None:
            key = object()  # its own entry: never shared
        waiting = self._waiters[key] = []
        self._queue.put((key, function))
        if len(self._threads) < min(self._threads_max, len(self._waiters)):
            self._start_thread()
        return self._waiter(waiting)

    def forget(self) -> None:
        """Drop the cached results (after a write)."""
        self._cache.clear()

    def stop(self) -> None:
        """End the threads once their current read is done; later reads get 503."""
        self._stopped = True
        for _thread in self._threads:
            self._queue.put(None)

    def _waiter(self, waiting: list[defer.Deferred]) -> defer.Deferred:
        waiter: defer.Deferred = defer.Deferred()
        waiting.append(waiter)
        waiter.addTimeout(self._wait_s, self._reactor, self._timed_out)
        return waiter

    def _timed_out(self, result: Any, timeout: float) -> Any:
        if isinstance(result, Failure) and result.check(defer.CancelledError):
            return Failure(
                ZooKeeperSlow(
                    f"ZooKeeper did not answer the dashboard's read within {timeout:g} s: "
                    "try again (the broker's registration is not affected)"
                )
            )
        return result

    def _start_thread(self) -> None:
        if not self._threads:
            self._reactor.addSystemEventTrigger("before", "shutdown", self.stop)
        thread = threading.Thread(
            target=self._work, name=f"meta-dashboard-zk-{len(self._threads)}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _work(self) -> None:
        """A worker thread: run reads until ``stop``."""
        while True:
            item = self._queue.get()
            if item is None:
                return
            key, function = item
            try:
                result = function()
            except Exception:
                result = Failure()
            self._reactor.callFromThread(self._done, key, result)

    def _done(self, key: Hashable, result: Any) -> None:
        waiting = self._waiters.pop(key, [])
        if not isinstance(result, Failure) and type(key) is not object:
            self._cache[key] = (self._reactor.seconds(), result)
            self._cache.move_to_end(key)
            while len(self._cache) > READS_CACHED_MAX:
                self._cache.popitem(last=False)
        for waiter in waiting:
            if not waiter.called:
                if isinstance(result, Failure):
                    waiter.errback(result)
                else:
                    waiter.callback(result)
