"""Shared helpers for the store tests: a recording, fault-injecting file layer (and one that
can lose power), a manual executor that runs flush batches only when a test steps it, and
configuration builders."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from meta.config import BrokerConfig, FlushMode, TopicConfig, ZkConfig
from meta.protocol.message import pack_message
from meta.store.files import Files
from meta.store.group_commit import Flusher, FlushPolicy, SynchronousExecutor
from meta.store.manager import StoreManager
from meta.store.partition import PartitionLog
from tests.descriptors import closers


def short_name(path: str) -> str:
    """``<parent directory>/<file name>`` of ``path``."""
    return os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))


class RecordingFiles(Files):
    """The OS file layer, recording events by file name and failing on request.

    ``events`` holds tuples such as ``("write", "test-0/00000000000000000000.meta")`` (parent
    directory and file name), ``("fsync", name)``, ``("fsync_directory", "test-0")``; tests
    append their own ``("ack", offset)``. ``fsync_error`` fails every fsync, or with
    ``fsync_error_only`` set, only the fsyncs of names starting with it.
    """

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.names: dict[int, str] = {}
        self.fsync_error: int | None = None  # errno to raise on the next fsyncs
        self.fsync_error_only: str | None = None
        self.write_error: int | None = None  # errno to raise on the next writes
        self.short_write_bytes: int | None = None  # cap on the bytes one write takes
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def _record(self, kind: str, name: Any) -> None:
        with self._lock:
            self.events.append((kind, name))

    def open(self, path: str, *, create: bool = False, writable: bool = True) -> int:
        fd = super().open(path, create=create, writable=writable)
        self.names[fd] = short_name(path)
        return fd

    def write(self, fd: int, data: bytes | memoryview, position: int) -> int:
        if self.write_error is not None:
            raise OSError(self.write_error, os.strerror(self.write_error))
        if self.short_write_bytes is not None:
            data = data[: self.short_write_bytes]
        self._record("write", self.names[fd])
        return super().write(fd, data, position)

    def truncate(self, fd: int, size: int) -> None:
        self._record("truncate", self.names[fd])
        super().truncate(fd, size)

    def fsync(self, fd: int) -> None:
        self.threads.add(threading.current_thread().name)
        if self.fsync_error is not None and self.names[fd].startswith(self.fsync_error_only or ""):
            self._record("fsync_failed", self.names[fd])
            raise OSError(self.fsync_error, os.strerror(self.fsync_error))
        self._record("fsync", self.names[fd])
        super().fsync(fd)

    def fsync_directory(self, path: str) -> None:
        self._record("fsync_directory", os.path.basename(path))
        super().fsync_directory(path)

    def count(self, kind: str) -> int:
        return sum(1 for event in self.events if event[0] == kind)


class PowerLossFiles(RecordingFiles):
    """``RecordingFiles`` that can lose power: ``power_loss`` drops every byte not fsynced.

    Each file opened through it keeps its contents as of its last fsync (or as found when
    first opened: what existed before the test is durable). ``power_loss`` puts every such
    file that still exists back to those contents, as a machine that lost power and
    rebooted would find it. Directory entries (creations, renames, removals) are kept.
    Call it only once every descriptor is closed (after a crash).
    """

    def __init__(self) -> None:
        super().__init__()
        self.paths: dict[int, str] = {}
        self.durable: dict[str, bytes] = {}

    def open(self, path: str, *, create: bool = False, writable: bool = True) -> int:
        if path not in self.durable:
            exists = os.path.exists(path)
            self.durable[path] = _contents(path) if exists else b""
        fd = super().open(path, create=create, writable=writable)
        self.paths[fd] = path
        return fd

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self.durable[self.paths[fd]] = _contents(self.paths[fd])

    def power_loss(self) -> None:
        """Put every file back to its durable contents."""
        for path, data in self.durable.items():
            if os.path.exists(path):
                with open(path, "wb") as handle:
                    handle.write(data)

    def power_loss_with_holes(
        self, holes: dict[str, tuple[int, int]], reached: tuple[str, ...] = ()
    ) -> None:
        """``power_loss``, except that the disk had written the unsynced end of each file of
        ``holes`` out of order: all of it reached the disk but its ``(start, end)``, a page
        never written, which reads as zeros (valid records may follow it). The files in
        ``reached`` keep every byte written to them."""
        kept = {other: _contents(other) for other in reached}
        for path, (start, end) in holes.items():
            assert len(self.durable[path]) <= start < end
            data = bytearray(_contents(path))
            assert end <= len(data)
            data[start:end] = bytes(end - start)
            kept[path] = bytes(data)
        self.power_loss()
        for path, contents in kept.items():
            with open(path, "wb") as handle:
                handle.write(contents)


def _contents(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


class ManualExecutor:
    """Queues flush batches; the test runs them with ``run_next`` / ``run_all``."""

    def __init__(self) -> None:
        self.queue: list[tuple[Callable[[], Any], Deferred]] = []

    def __call__(self, work: Callable[[], Any]) -> Deferred:
        result: Deferred = Deferred()
        self.queue.append((work, result))
        return result

    def run_next(self) -> None:
        work, result = self.queue.pop(0)
        try:
            value = work()
        except Exception:
            result.errback(Failure())
        else:
            result.callback(value)

    def run_all(self) -> int:
        """Run batches until none is queued; return how many ran."""
        ran = 0
        while self.queue:
            self.run_next()
            ran += 1
        return ran


EIO = errno.EIO
ENOSPC = errno.ENOSPC


def record(payload: bytes, msg_id: int = 1, flag: int = 0) -> bytes:
    """A stored record with ``payload``."""
    return pack_message(msg_id, flag, payload)


def policy(threshold: int, interval_ms: int = 10000) -> FlushPolicy:
    """The flush policy ``unflushThreshold=threshold``, ``unflushInterval=interval_ms``."""
    mode = FlushMode.GROUP_COMMIT if threshold <= 0 else FlushMode.THRESHOLD
    return FlushPolicy(mode, threshold, interval_ms)


def open_partition(
    directory: str,
    *,
    files: Files | None = None,
    executor: Any = None,
    clock: Clock | None = None,
    threshold: int = 0,
    interval_ms: int = 10000,
    segment_bytes_max: int = 1024 * 1024,
    flusher: Flusher | None = None,
) -> PartitionLog:
    """Open ``directory`` (created when missing) as partition ``test-0``, closed after the
    test (``tests.descriptors.closers``)."""
    os.makedirs(directory, exist_ok=True)
    if flusher is None:
        flusher = Flusher(executor if executor is not None else SynchronousExecutor())
    log = PartitionLog.open(
        "test",
        0,
        directory,
        files=files if files is not None else Files(),
        flusher=flusher,
        clock=clock if clock is not None else Clock(),
        segment_bytes_max=segment_bytes_max,
        policy=policy(threshold, interval_ms),
    )
    closers.add(log.close)
    return log


def collect(deferred: Deferred) -> list[Any]:
    """Return a list that receives the Deferred's result (value or Failure) when it fires."""
    box: list[Any] = []
    deferred.addBoth(box.append)
    return box


def close_store(store: StoreManager, *executors: ManualExecutor) -> None:
    """Close ``store`` by its own ``close``, stepping the manual ``executors`` that run its
    last flush. A store the test made fail may refuse that flush: its partitions' files are
    then closed directly, as ``close`` would have once its flusher was idle."""
    closed = collect(store.close())
    for executor in executors:
        executor.run_all()
    if closed != [None]:
        for log in store.partitions():
            log.close()


def closing_store(store: StoreManager, *executors: ManualExecutor) -> StoreManager:
    """``store``, closed (``close_store``) after the running test."""
    closers.add(lambda: close_store(store, *executors))
    return store


def topic_config(name: str, data_path: str, **fields: Any) -> TopicConfig:
    values: dict[str, Any] = {
        "num_partitions": 4,
        "unflush_threshold": 0,
        "unflush_interval_ms": 10000,
        "delete_policy": "delete,168",
        "delete_when": "0 0 6,18 * * ?",
        "accept_publish": True,
        "accept_subscribe": True,
        "stat": False,
    }
    values.update(fields)
    return TopicConfig(name=name, data_path=data_path, **values)


def broker_config(
    data_path: str, topics: tuple[TopicConfig, ...] = (), **fields: Any
) -> BrokerConfig:
    values: dict[str, Any] = {
        "path": os.path.join(data_path, "server.ini"),
        "checksum": 0,
        "broker_id": 0,
        "data_log_path": data_path,
        "num_partitions": 2,
        "unflush_threshold": 0,
        "unflush_interval_ms": 10000,
        "segment_bytes_max": 1024 * 1024,
        "transfer_bytes_max": 1024 * 1024,
        "message_bytes_max": 1024 * 1024,
        "get_process_thread_count": 1,
        "put_process_thread_count": 1,
        "zookeeper": ZkConfig(connect="localhost:2181"),
    }
    values.update(fields)
    return BrokerConfig(data_path=data_path, topics=topics, **values)


@pytest.fixture
def files() -> RecordingFiles:
    return RecordingFiles()


@pytest.fixture
def clock() -> Clock:
    return Clock()
