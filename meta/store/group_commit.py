"""Flush policy (pure) and the single flusher that makes appends durable (STYLE 10).

What lives here:
    * ``should_flush``: the pure rule deciding whether an append must wait for an fsync.
    * ``FlushPolicy``: one partition's flush settings, fixed when the partition opens.
    * ``Flusher``: ONE per ``StoreManager``. Clients (partition logs) ask it for a flush; it
      collects a snapshot from every client that asked, hands the whole batch to one worker
      thread, which fsyncs each file once, and completes every client on the reactor thread.
      Requests that arrive while a batch runs are coalesced into the next batch, so many
      concurrent appends share few fsyncs.
    * Executors: ``ThreadExecutor`` (production: one dedicated thread) and ``SynchronousExecutor``
      (tests). An executor is any ``callable(work) -> Deferred`` that runs ``work`` off the
      reactor thread and fires the Deferred on the reactor thread. One that also has
      ``submit(work, done)`` (``ThreadExecutor``) is driven through it: ``done(value, error)``
      on the reactor thread, without a Deferred, whose callback chain costs more than the rest
      of a completion's hand-off (a synchronous producer in group commit pays it per put).
      One that has ``submit_batch(tasks, done)`` (``ThreadExecutor``) is given the tasks
      themselves, so that it may run their plans of syncs without Python.
    * The C thread (``meta.store.native_flush``, built by every install that can): where it was
      built, ``ThreadExecutor`` hands a batch whose tasks all sync through the operating
      system's ``Files`` to a C thread that runs every fdatasync, directory fsync and journal
      check of the batch and writes the completion eventfd without ever taking the GIL. The
      Python thread, which takes the GIL back after each of those calls and so wakes and
      waits for the reactor thread several times per batch, runs only other batches (tests'
      ``Files``, the pure build), with the same results and errors.

Invariants: at most one batch runs at a time; a client's flush result (done or failed) is
delivered exactly once per snapshot it gave; a failure of one client's fsync never fails another
client. fsync never runs on the reactor thread unless a test injects ``SynchronousExecutor``.

Thread affinity: ``Flusher`` is reactor thread only; ``FlushTask.run`` runs on the worker thread.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.posixbase import PosixReactorBase
from twisted.python.failure import Failure

from meta.config import FlushMode, TopicConfig
from meta.errors import StoreError
from meta.store.native_flush import NATIVE, native_errors, native_plans, native_worker

logger = logging.getLogger("meta.store")

# Bound once: ``should_flush`` runs per append, and a member looked up on its enum class
# costs the compiled build a generic attribute lookup on the class each time.
_GROUP_COMMIT: Final = FlushMode.GROUP_COMMIT

Executor = Callable[[Callable[[], Any]], Deferred]
Completion = Callable[[Any, BaseException | None], None]
"""``done(value, error)`` of ``ThreadExecutor.submit``: ``work``'s result, or what it raised."""


def should_flush(
    mode: FlushMode,
    unflushed_count: int,
    elapsed_ms: float,
    threshold: int,
    interval_ms: int,
) -> bool:
    """Return whether the append just written must wait for the fsync that covers it.

    Group commit: always. Threshold mode N >= 1: when this append
    makes ``unflushed_count >= N`` (so N = 1 syncs every message, unlike Java's ``> N``), or
    when ``elapsed_ms >= interval_ms`` since the last flush request. An interval <= 0 makes the
    time test always true, the nearest safe reading of Java's "whenever the clock moved".

    Args:
        mode: the partition's flush mode.
        unflushed_count: appends since the last flush request, this one included.
        elapsed_ms: milliseconds since the last flush request (or since the partition opened).
        threshold: ``unflushThreshold``.
        interval_ms: ``unflushInterval``.
    """
    if mode is _GROUP_COMMIT:
        return True
    assert threshold >= 1
    return unflushed_count >= threshold or elapsed_ms >= interval_ms


@dataclass(frozen=True)
class FlushPolicy:
    """A partition's flush settings (from its topic's configuration)."""

    mode: FlushMode
    threshold: int  # unflushThreshold
    interval_ms: int  # unflushInterval

    @classmethod
    def from_topic(cls, topic_config: TopicConfig) -> FlushPolicy:
        """Build the policy of a ``meta.config.TopicConfig``."""
        return cls(
            topic_config.flush_mode,
            topic_config.unflush_threshold,
            topic_config.unflush_interval_ms,
        )


class FlushTask(Protocol):
    """One client's share of a batch."""

    def run(self) -> None:
        """Fsync everything the snapshot covers. Worker thread; raises on failure."""


class FlushClient(Protocol):
    """What the flusher needs from a partition log (or any other durable log)."""

    def flush_snapshot(self) -> FlushTask | None:
        """Reactor thread: capture what a flush must cover now; None when nothing is dirty."""

    def flush_done(self, task: FlushTask) -> None:
        """Reactor thread: ``task`` is on disk."""

    def flush_failed(self, task: FlushTask, error: BaseException) -> None:
        """Reactor thread: ``task`` failed; nothing it covered may be trusted to be on disk."""


def run_batch(tasks: list[FlushTask]) -> list[BaseException | None]:
    """Run every task of a batch; return each one's error or None. Worker thread."""
    errors: list[BaseException | None] = []
    for task in tasks:
        try:
            task.run()
        except Exception as error:  # any failure to sync means "not durable"
            errors.append(error)
        else:
            errors.append(None)
    return errors


class Flusher:
    """The single flusher of a store: batches flush requests and drives the executor.

    Attributes:
        batch_count: batches run so far (one fsync per dirty file per batch); for tests/stats.
    """

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._submit: Callable[[Callable[[], Any], Completion], None] | None = getattr(
            executor, "submit", None
        )
        self._submit_batch: Callable[[list[FlushTask], Completion], None] | None = getattr(
            executor, "submit_batch", None
        )
        self._requested: dict[FlushClient, None] = {}
        self._running = False
        self._idle_waiters: list[Deferred] = []
        self.batch_count = 0
        # Called on the reactor thread after each batch's acks were released (the broker
        # sends the resulting replies then).
        self.on_batch_done: Callable[[], None] | None = None
        # Called on the reactor thread with each batch's duration in seconds (the dashboard's
        # fsync histogram); the clock is read twice per batch, never per append.
        self.on_batch_seconds: Callable[[float], None] | None = None
        self._batch_started_s = 0.0

    def request(self, client: FlushClient) -> None:
        """Ask for ``client`` to be flushed in the current or the next batch."""
        self._requested[client] = None
        if not self._running:
            self._start_batch()

    def wait_idle(self) -> Deferred:
        """Return a Deferred fired once no batch runs and no request is pending."""
        if not self._running and not self._requested:
            return succeed(None)
        waiter: Deferred = Deferred()
        self._idle_waiters.append(waiter)
        return waiter

    def _start_batch(self) -> None:
        """Snapshot every requesting client and hand the batch to the executor."""
        requested, self._requested = self._requested, {}
        clients: list[FlushClient] = []
        tasks: list[FlushTask] = []
        for client in requested:
            task = client.flush_snapshot()
            if task is not None:
                clients.append(client)
                tasks.append(task)
        if not tasks:
            self._notify_idle()
            return
        self._running = True
        self.batch_count += 1
        self._batch_started_s = time.monotonic()
        if self._submit is not None or self._submit_batch is not None:

            def done(errors: Any, error: BaseException | None) -> None:
                if error is None:
                    self._batch_done(errors, clients, tasks)
                else:
                    self._batch_lost(Failure(error), clients, tasks)

            if self._submit_batch is not None:
                self._submit_batch(tasks, done)
            else:
                assert self._submit is not None
                self._submit(lambda: run_batch(tasks), done)
            return
        try:
            result = self._executor(lambda: run_batch(tasks))
        except Exception:
            result = fail()
        result.addCallbacks(
            self._batch_done,
            self._batch_lost,
            callbackArgs=(clients, tasks),
            errbackArgs=(clients, tasks),
        )

    def _batch_done(
        self, errors: list[BaseException | None], clients: list[FlushClient], tasks: list[FlushTask]
    ) -> None:
        """Reactor thread: deliver each client's result, then start the next batch if asked."""
        for client, task, error in zip(clients, tasks, errors, strict=True):
            try:
                if error is None:
                    client.flush_done(task)
                else:
                    client.flush_failed(task, error)
            except Exception:
                logger.exception("flush completion of %r raised", client)
        if self.on_batch_seconds is not None:
            self.on_batch_seconds(time.monotonic() - self._batch_started_s)
        if self.on_batch_done is not None:
            self.on_batch_done()
        self._running = False
        if self._requested:
            self._start_batch()
        else:
            self._notify_idle()

    def _batch_lost(
        self, failure: Failure, clients: list[FlushClient], tasks: list[FlushTask]
    ) -> None:
        """The executor itself failed: every task of the batch counts as failed."""
        logger.error("flush executor failed: %s", failure.getErrorMessage())
        self._batch_done([failure.value] * len(tasks), clients, tasks)

    def _notify_idle(self) -> None:
        waiters, self._idle_waiters = self._idle_waiters, []
        for waiter in waiters:
            waiter.callback(None)


class SynchronousExecutor:
    """Runs the work at once on the calling thread. For tests only: fsync on the caller."""

    def __call__(self, work: Callable[[], Any]) -> Deferred:
        try:
            return succeed(work())
        except Exception:
            return fail()


class CompletionSignal:
    """The worker's results and the eventfd that wakes the reactor thread to deliver them.

    A read descriptor of the reactor's own poll: the worker appends ``(done, value, error)``
    and adds 1 to the eventfd; the reactor's ``doRead`` resets the eventfd first, then runs
    every result queued (one appended after the reset makes the eventfd readable again, so
    none is left behind). One write and one read per batch, and no pass through Twisted's
    ``callFromThread`` queue, its waker and its ``runUntilCurrent`` for threads' calls.

    The C thread writes the same eventfd and keeps its results itself: ``expect(take,
    finish)`` makes each delivery call ``take()`` until it returns the batch's results, then
    ``finish(results)``.
    """

    def __init__(self, reactor: Any) -> None:
        self._reactor = reactor
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._results: deque[tuple[Completion, Any, BaseException | None]] = deque()
        self._take: Callable[[], Any] | None = None
        self._finish: Callable[[Any], None] | None = None
        reactor.addReader(self)

    def post(self, done: Completion, value: Any, error: BaseException | None) -> None:
        """Worker thread: queue ``done(value, error)`` for the reactor thread and wake it."""
        self._results.append((done, value, error))
        os.eventfd_write(self._fd, 1)

    def fileno(self) -> int:
        return self._fd

    def doRead(self) -> None:  # noqa: N802 - Twisted's spelling
        """Reactor thread: reset the eventfd, then deliver every queued result."""
        try:
            os.eventfd_read(self._fd)
        except BlockingIOError:
            pass  # read already by an earlier pass that delivered its results
        self.deliver()

    def expect(self, take: Callable[[], Any], finish: Callable[[Any], None]) -> None:
        """Reactor thread: a batch of the C thread runs; deliver ``finish(take())`` once
        ``take()`` returns something else than None."""
        assert self._take is None  # one batch at a time
        self._take = take
        self._finish = finish

    def deliver(self) -> None:
        """Reactor thread: run every queued ``done`` and the C thread's finished batch; one
        that raises is logged."""
        results = self._results
        while results:
            done, value, error = results.popleft()
            try:
                done(value, error)
            except Exception:
                logger.exception("flush completion %r raised", done)
        take = self._take
        if take is not None:
            outcome = take()
            if outcome is not None:
                finish = self._finish
                assert finish is not None
                self._take = self._finish = None
                try:
                    finish(outcome)
                except Exception:
                    logger.exception("flush completion %r raised", finish)

    def close(self) -> None:
        """Reactor thread, worker stopped: deliver what is left, stop reading, close."""
        self.deliver()
        if self._fd >= 0:
            self._reactor.removeReader(self)
            os.close(self._fd)
            self._fd = -1

    def connectionLost(self, reason: Any) -> None:  # noqa: N802 - Twisted's spelling
        """Twisted's call when the reactor drops this descriptor (nothing to undo)."""

    def logPrefix(self) -> str:  # noqa: N802 - Twisted's spelling
        return "flusher-completion"


def completion_signal(reactor: Any) -> CompletionSignal | None:
    """A ``CompletionSignal`` on ``reactor`` where it polls descriptors and Linux has eventfd;
    None elsewhere (a test's clock, another platform), where results go by ``callFromThread``."""
    if not isinstance(reactor, PosixReactorBase) or not hasattr(os, "eventfd"):
        return None
    return CompletionSignal(reactor)


class ThreadExecutor:
    """Runs work on one dedicated worker thread; results come back to the reactor thread.

    A plain thread fed by a ``SimpleQueue``: every group commit crosses to it and back, so the
    hand-off is kept to one queue put, one wake-up and one eventfd write (``CompletionSignal``;
    ``callFromThread`` on a reactor without descriptors). The thread starts on first use and
    stops in ``stop`` (also at reactor shutdown), after finishing queued work.

    With the optional build (``NATIVE``) and a ``CompletionSignal``, ``submit_batch`` hands
    the batches that ``native_plans`` can describe to the C thread instead, which started
    with the Python thread and stops before it.
    """

    def __init__(self, reactor: Any, name: str = "meta-store-flusher") -> None:
        self._reactor = reactor
        self._name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._signal: CompletionSignal | None = None
        self._native: Any = None
        self._stopped = False

    def __call__(self, work: Callable[[], Any]) -> Deferred:
        result: Deferred = Deferred()

        def done(value: Any, error: BaseException | None) -> None:
            if error is None:
                result.callback(value)
            else:
                result.errback(Failure(error))

        self.submit(work, done)
        return result

    def submit(self, work: Callable[[], Any], done: Completion) -> None:
        """Run ``work`` on the worker thread; then ``done(value, None)``, or ``done(None,
        error)`` when it raised, on the reactor thread (at once when the thread has stopped)."""
        if self._stopped:
            done(None, StoreError("the flusher thread has stopped"))
            return
        if self._worker is None:
            self._start()
        self._queue.put((work, done))

    def submit_batch(self, tasks: list[FlushTask], done: Completion) -> None:
        """Run the batch's tasks off the reactor thread; then ``done(errors, None)`` with
        ``run_batch``'s errors, or ``done(None, error)``, on the reactor thread: by the C
        thread when it is there and ``native_plans`` describes the batch, else as ``submit``."""
        if self._stopped:
            done(None, StoreError("the flusher thread has stopped"))
            return
        if self._worker is None:
            self._start()
        native = self._native
        plans = native_plans(tasks) if native is not None else None
        signal = self._signal
        if plans is None or signal is None:
            self._queue.put((lambda: run_batch(tasks), done))
            return
        try:
            native.submit(plans)
        except Exception as error:  # no memory for its copy of the plans: the batch is lost
            done(None, error)
            return
        # After the submit: its results are delivered on this thread's next eventfd read.
        signal.expect(native.take, lambda results: done(native_errors(results), None))

    def _start(self) -> None:
        self._signal = completion_signal(self._reactor)
        if self._signal is not None and NATIVE is not None:
            self._native = native_worker(self._signal.fileno())
        self._worker = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._worker.start()
        add_trigger = getattr(self._reactor, "addSystemEventTrigger", None)
        if add_trigger is not None:
            add_trigger("during", "shutdown", self.stop)

    def _run(self) -> None:
        """Worker thread: run each job, hand its result to the reactor thread."""
        signal = self._signal
        post = self._reactor.callFromThread if signal is None else signal.post
        get = self._queue.get
        while True:
            job = get()
            if job is None:
                return
            work, done = job
            try:
                value = work()
            except BaseException as error:
                post(done, None, error)
            else:
                post(done, value, None)

    def stop(self) -> None:
        """Finish queued work and stop the worker thread (blocks until it exits); then, on
        the reactor thread, deliver the results it left."""
        self._stopped = True
        thread, self._worker = self._worker, None
        if thread is not None:
            self._queue.put(None)
            thread.join()
        native, self._native = self._native, None
        if native is not None:
            native.stop()  # finishes the batch in hand, whose results ``close`` delivers
        signal, self._signal = self._signal, None
        if signal is not None:
            signal.close()
