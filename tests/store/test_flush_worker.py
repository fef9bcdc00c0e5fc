"""The flusher's C thread (``meta.store._flush_worker``, which every install builds when it
can) and its fallback, the Python thread: the same batches give the same results and the
same errors.

The C tests run where the extension was built and skip where the install could not build it
(no C compiler); the fallback tests run in both. Each reactor test runs its own
``EPollReactor`` instance (never installed) with a deadline that stops it; the test thread is
the reactor thread.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from meta.store import group_commit, native_flush
from meta.store.files import CHECK_LENGTH, CHECK_OFFSET, UNCHECKABLE, Files, run_syncs
from meta.store.group_commit import Flusher, ThreadExecutor, run_batch
from meta.store.native_flush import native_errors, native_plans
from tests.descriptors import closing_reactor

epollreactor = pytest.importorskip("twisted.internet.epollreactor")

DEADLINE_S = 10.0
native = pytest.mark.skipif(native_flush.NATIVE is None, reason="the install built no extension")


class PlanTask:
    """A flush task over a plan of syncs, as ``PartitionFlushTask`` and ``RedoSyncTask``."""

    def __init__(self, files: Files, plan: tuple[str | int, ...]) -> None:
        self.files = files
        self.plan = plan
        self.threads: list[str] = []

    def syncs(self) -> tuple[str | int, ...]:
        return self.plan

    def run(self) -> None:
        self.threads.append(threading.current_thread().name)
        run_syncs(self.files, self.plan)


class Client:
    """A flush client with one task; records its result."""

    def __init__(self, task: PlanTask) -> None:
        self.task = task
        self.results: list[str | None] = []

    def flush_snapshot(self) -> PlanTask | None:
        return self.task if not self.results else None

    def flush_done(self, task: PlanTask) -> None:
        self.results.append(None)

    def flush_failed(self, task: PlanTask, error: BaseException) -> None:
        self.results.append(str(error))


class CountingFiles(Files):
    """A test's ``Files``: the operating system's calls, counted."""

    def __init__(self) -> None:
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        super().fsync(fd)


@pytest.fixture
def plans(tmp_path: Path):
    """Three plans: a good file with its new directory, a pipe (fdatasync: EINVAL) after a
    good file, a directory that does not exist; and what ``Files`` raises for each."""
    descriptors: list[int] = []

    def opened(path: Path) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        descriptors.append(fd)
        os.write(fd, b"x" * 100)
        return fd

    read_end, write_end = os.pipe()
    descriptors += [read_end, write_end]
    good = (str(tmp_path), opened(tmp_path / "a"))
    pipe = (opened(tmp_path / "b"), read_end)
    missing = (str(tmp_path / "missing"), opened(tmp_path / "c"))
    yield [good, pipe, missing]
    for fd in descriptors:
        os.close(fd)


def python_errors(batch: list[tuple[str | int, ...]]) -> list[str | None]:
    errors = run_batch([PlanTask(Files(), plan) for plan in batch])
    return [None if error is None else str(error) for error in errors]


def run_flusher(executor_of, clients: list[Client]) -> str:
    """Flush ``clients`` (in two batches: the first request starts one at once) through a
    ThreadExecutor on a real epoll reactor; return the thread that delivered the results."""
    reactor = closing_reactor(epollreactor.EPollReactor())
    executor = executor_of(reactor)
    flusher = Flusher(executor)
    delivered: list[str] = []

    def batch_done() -> None:
        delivered.append(threading.current_thread().name)
        if all(client.results for client in clients):
            reactor.stop()

    flusher.on_batch_done = batch_done

    def start() -> None:
        for client in clients:
            flusher.request(client)

    reactor.callWhenRunning(start)
    deadline = reactor.callLater(DEADLINE_S, reactor.stop)
    reactor.run(installSignalHandlers=False)
    assert deadline.active(), "the batch's results did not wake the reactor"
    deadline.cancel()
    assert len(delivered) == 2
    assert delivered[0] == delivered[1]
    return delivered[0]


def test_the_python_errors_of_the_plans(plans):
    """The fallback's results, which the C thread must give too."""
    good, pipe, missing = python_errors(plans)
    assert good is None
    assert pipe == str(OSError(errno.EINVAL, os.strerror(errno.EINVAL)))
    assert missing is not None and missing.startswith(f"[Errno {errno.ENOENT}]")


def test_a_test_files_batch_goes_to_the_python_thread(plans):
    """Goal: tasks that sync through a test's ``Files`` (injected failures, recorded events)
    never reach the C thread. Method: ``native_plans`` refuses them, and a real reactor's
    executor runs them on its Python thread."""
    files = CountingFiles()
    assert native_plans([PlanTask(files, plans[0])]) is None
    assert native_plans([PlanTask(Files(), plans[0]), PlanTask(files, plans[0])]) is None
    assert native_plans([object()]) is None  # type: ignore[list-item]
    clients = [Client(PlanTask(files, plan)) for plan in plans]
    me = run_flusher(ThreadExecutor, clients)
    assert me == threading.current_thread().name
    assert [client.results for client in clients] == [[error] for error in python_errors(plans)]
    assert files.fsyncs == 3  # good, the file before the pipe, the pipe
    assert [client.task.threads for client in clients] == [["meta-store-flusher"]] * 3


def test_without_the_extension_the_python_thread_runs_every_batch(plans, monkeypatch):
    """Goal: the pure build (no extension) flushes the operating system's files on the
    Python thread with the same results. Method: ``NATIVE`` removed."""
    monkeypatch.setattr(group_commit, "NATIVE", None)
    clients = [Client(PlanTask(Files(), plan)) for plan in plans]
    run_flusher(ThreadExecutor, clients)
    assert [client.results for client in clients] == [[error] for error in python_errors(plans)]
    assert [client.task.threads for client in clients] == [["meta-store-flusher"]] * 3


class RefusingWorker:
    """A C thread that cannot take a batch (its copy of the plans ran out of memory)."""

    def submit(self, plans: list[tuple[str | int, ...]]) -> None:
        raise MemoryError("no memory for the batch's plans")

    def take(self) -> None:
        return None

    def stop(self) -> None:
        pass


def test_a_batch_the_c_thread_cannot_take_fails_its_tasks_and_frees_the_flusher(plans, monkeypatch):
    """Goal: a batch the C thread refuses fails its tasks at once, as a lost batch (their
    puts get 500, never a hang), and the flusher takes the next request. Method: a worker
    whose submit raises, on a real (not running) epoll reactor."""
    monkeypatch.setattr(group_commit, "NATIVE", object())
    monkeypatch.setattr(group_commit, "native_worker", lambda eventfd: RefusingWorker())
    executor = ThreadExecutor(closing_reactor(epollreactor.EPollReactor()))
    flusher = Flusher(executor)
    first, second = (Client(PlanTask(Files(), plans[0])) for _ in range(2))
    try:
        flusher.request(first)
        assert first.results == ["no memory for the batch's plans"]
        flusher.request(second)
        assert second.results == ["no memory for the batch's plans"]
        assert flusher.batch_count == 2
    finally:
        executor.stop()


@native
def test_the_c_thread_fails_exactly_the_tasks_whose_sync_failed(plans):
    """Goal: a batch on the C thread gives each task the result and the error text the Python
    thread gives: a failed fdatasync or directory fsync fails its task only. Method: the
    three plans through a Flusher on a real reactor; no task's ``run`` is called."""
    clients = [Client(PlanTask(Files(), plan)) for plan in plans]
    me = run_flusher(ThreadExecutor, clients)
    assert me == threading.current_thread().name
    assert [client.results for client in clients] == [[error] for error in python_errors(plans)]
    assert [client.task.threads for client in clients] == [[], [], []]


def worker(fd: int, uncheckable: tuple[int, ...] = tuple(UNCHECKABLE)):
    return native_flush.NATIVE.Worker(fd, CHECK_OFFSET, CHECK_LENGTH, uncheckable)


def take(worker_, signal_fd: int) -> list:
    """Wait (bounded) for the eventfd, then take the batch's results."""
    import select

    readable, _, _ = select.select([signal_fd], [], [], DEADLINE_S)
    assert readable, "the C thread did not write the eventfd"
    assert os.eventfd_read(signal_fd) == 1
    results = worker_.take()
    assert results is not None
    return results


@native
def test_a_failed_journal_check_fails_its_task_with_the_journal_error(tmp_path):
    """Goal: the check after the fdatasync (``confirm_journal``) runs on the C thread, and a
    failure that is not in the uncheckable set fails the task with ``journal_error``'s
    text. Method: a read-only descriptor (fallocate: EBADF) and a worker for which nothing
    is uncheckable; with the real set, EBADF passes, as in ``confirm_journal``."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    fd = os.open(path, os.O_RDONLY)
    signal_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    strict, lenient = worker(signal_fd, ()), worker(signal_fd)
    try:
        strict.submit([(fd,)])
        (result,) = take(strict, signal_fd)
        assert result == (errno.EBADF, native_flush.NATIVE.STAGE_CHECK, fd)
        (error,) = native_errors([result])
        assert str(error) == f"[Errno {errno.EBADF}] {os.strerror(errno.EBADF)} " + (
            "(the file system failed after an fsync)"
        )
        lenient.submit([(fd,)])
        assert take(lenient, signal_fd) == [None]
    finally:
        strict.stop()
        lenient.stop()
        os.close(fd)
        os.close(signal_fd)


@native
def test_one_batch_at_a_time_and_stop_finishes_the_batch_in_hand(tmp_path):
    """Goal: a second batch before the first one's results were taken is refused (the
    Flusher's rule, checked); ``stop`` lets the batch in hand finish, whose results stay
    to be taken; a stopped worker takes no batch. Method: a worker without a reactor."""
    signal_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    flush = worker(signal_fd)
    try:
        flush.submit([(str(tmp_path), fd), ()])
        with pytest.raises(RuntimeError):
            flush.submit([(fd,)])
        flush.stop()
        assert flush.take() == [None, None]
        assert flush.take() is None
        with pytest.raises(RuntimeError):
            flush.submit([(fd,)])
        with pytest.raises(TypeError):
            worker(signal_fd).submit([[fd]])  # a plan is a tuple
    finally:
        flush.stop()
        os.close(fd)
        os.close(signal_fd)


@native
def test_the_executor_stop_delivers_a_batch_of_the_c_thread(plans):
    """Goal: a batch the C thread finished after the reactor's last poll is delivered by the
    executor's ``stop``, on the calling thread. Method: no poll runs at all."""
    reactor = closing_reactor(epollreactor.EPollReactor())
    executor = ThreadExecutor(reactor)
    delivered: list[object] = []
    tasks = [PlanTask(Files(), plan) for plan in plans]
    executor.submit_batch(tasks, lambda value, error: delivered.append((value, error)))
    executor.stop()
    ((errors, error),) = delivered
    assert error is None
    assert [None if e is None else str(e) for e in errors] == python_errors(plans)
    assert [task.threads for task in tasks] == [[], [], []]
