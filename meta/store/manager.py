"""The store of a broker: every partition log, the single flusher, the flush-interval timers.

What lives here: ``StoreManager`` (MetaQ's ``MessageStoreManager``): loading every partition
directory at start-up (docs/compatibility.md), ``get`` / ``get_or_create`` with the
topic and partition checks of a Java put, the background flush timers of threshold mode,
the retention schedule and the orderly close.

Retention: ONE reactor timer, armed with ``callLater`` for the earliest next fire time of every
distinct ``deleteWhen`` (``[system]`` and each ``[topic=NAME]``). When it fires, the partitions
whose topic's ``deleteWhen`` is due join a queue that one runner works through, a partition at
a time, with its topic's ``deletePolicy`` (``retention.retain_partition``); compression runs on
the background executor (the reactor's thread pool by default), never on the flusher thread. A
failed partition is logged (WARNING) and the runner goes on with the next one.

Invariants:
    * At most one ``PartitionLog`` per (topic, partition); all share one ``Flusher``, so one
      worker thread does every fsync of the store.
    * A partition created here was checked: its topic passes ``config.is_legal_topic`` and its
      number is in ``[0, num_partitions)``. Partitions found on disk are loaded whatever the
      configuration says (Java does the same), but ``get_or_create`` and ``accepting`` (the
      accessors for puts) return a partition only while the running configuration passes
      those checks, as Java's getOrCreateMessageStore makes them on every put.
    * After ``close`` no partition accepts appends and every file is closed; the retention
      timer is cancelled and a running archive is stopped before the files are closed.
    * A partition is in the retention queue at most once, and only one runner works on it.
    * The scrubber (``meta.store.scrub``) runs from ``start`` to ``close`` on the background
      executor, at ``scrubBytesPerSecond``.

Thread affinity: reactor thread only.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred, gatherResults
from twisted.internet.task import LoopingCall

from meta.config import BrokerConfig, FlushMode, TopicConfig
from meta.config.cron import CronError, QuartzCron
from meta.errors import DescriptorShortageError, InvalidTopicError, StoreError
from meta.store import retention
from meta.store.files import Files
from meta.store.group_commit import (
    Executor,
    Flusher,
    FlushPolicy,
    SynchronousExecutor,
    ThreadExecutor,
)
from meta.store.partition import PartitionLog
from meta.store.pending_truncation import PendingTruncations
from meta.store.recovery_point import RecoveryPoints
from meta.store.scrub import Scrubber
from meta.store.segment import Segment, segment_name
from meta.store.tail_cut import is_descriptor_shortage

logger = logging.getLogger("meta.store")

PARTITION_MAX = 2**31 - 1  # partitions are Java ints
# A cron time counts as due this early: a timer may fire a rounding error before its time.
CRON_DUE_SLACK_S = 0.001


class StoreManager:
    """Maps (topic, partition) to its ``PartitionLog``.

    Attributes:
        flusher: the single flusher of this store.
    """

    def __init__(
        self,
        config: BrokerConfig,
        reactor: Any,
        files: Files | None = None,
        executor: Executor | None = None,
        background: Executor | None = None,
    ) -> None:
        """Create an empty store; call ``load`` and then ``start``.

        Args:
            config: the broker configuration.
            reactor: provides ``seconds``/``callLater`` (and ``callFromThread`` for the default
                executor); ``task.Clock`` in tests.
            files: the file layer; the operating system by default.
            executor: runs flush batches off the reactor thread; one dedicated thread by default.
            background: runs slow file work off the reactor thread (archive compression,
                journal file deletion); the reactor's thread pool by default, inline when
                the reactor has none (a test clock).
        """
        self._config = config
        self._reactor = reactor
        self._files = files if files is not None else Files()
        self._own_executor: ThreadExecutor | None = None
        if executor is None:
            executor = self._own_executor = ThreadExecutor(reactor)
        self.flusher = Flusher(executor)
        # Appends that an fsync batch released (filled transaction batches) are written
        # after it; an owner that also writes other things then (the broker) replaces this.
        self.flusher.on_batch_done = self.commit_staged
        self._partitions: dict[tuple[str, int], PartitionLog] = {}
        self.truncations = PendingTruncations(self._files, self._truncation_roots)
        self.recovery_points = RecoveryPoints(
            self._files, reactor, config.recovery_point_interval_s
        )
        self._accepted: set[tuple[str, int]] = set()
        self._timers: dict[int, LoopingCall] = {}
        self._staged: list[PartitionLog] = []
        self._started = False
        self._closed = False
        if background is None:
            if hasattr(reactor, "getThreadPool"):
                background = retention.thread_pool_executor(reactor)
            else:
                background = SynchronousExecutor()
        self.background: Executor = background
        self._crons: dict[str, QuartzCron | None] = {}
        self._cron_next_s: dict[str, float | None] = {}  # deleteWhen -> next fire time
        self._retention_call: Any = None  # the one IDelayedCall
        self._retention_queue: dict[PartitionLog, None] = {}  # an ordered set
        self._retention_running = False
        self._retention_runner: Deferred | None = None  # while a runner waits on an archive
        self._retention_stop = threading.Event()  # set by close: stop an archive being written
        self.scrubber = Scrubber(self, reactor, background, config.scrub_bytes_per_s)

    @property
    def files(self) -> Files:
        """The file layer every partition (and the transaction journal) uses."""
        return self._files

    def set_config(self, config: BrokerConfig) -> None:
        """Use a reloaded configuration for partitions created from now on.

        Open partitions keep their files and flush settings; which topics and partition
        numbers new puts may create is decided by ``config`` from now on.
        """
        self._config = config
        self._accepted.clear()
        if self._started and not self._closed:
            self._cron_next_s.clear()  # deleteWhen may have changed: reschedule
            self._arm_retention()

    # -- loading -------------------------------------------------------------------------

    def load(self) -> None:
        """Open and recover every partition directory under every data path (compatibility.md).

        Raises:
            StoreError: a directory name has a non-numeric partition, the same partition was
                found under two data paths, or a partition fails to load (see
                ``PartitionLog.open``).
        """
        for root in self._data_roots():
            for topic, partition, directory in self._scan_root(root):
                key = (topic, partition)
                existing = self._partitions.get(key)
                if existing is not None:
                    raise StoreError(
                        f"partition {topic}-{partition} found twice: "
                        f"{existing.directory} and {directory}"
                    )
                self.truncations.apply_pending(directory, f"{topic}-{partition}")
                self._partitions[key] = self._open(topic, partition, directory)
        self.truncations.report_strays({log.name for log in self._partitions.values()})
        logger.info("store loaded %d partitions", len(self._partitions))

    def _data_roots(self) -> list[str]:
        """``[system] dataPath`` then every distinct topic ``dataPath``, in file order."""
        roots: list[str] = []
        for path in [self._config.data_path, *(topic.data_path for topic in self._config.topics)]:
            normal = os.path.normpath(path)
            if normal not in roots:
                roots.append(normal)
        return roots

    def _truncation_roots(self) -> list[str]:
        """Where a failed cut is recorded when its partition directory refuses the record."""
        return [self._config.data_log_path, *self._data_roots()]

    def _scan_root(self, root: str) -> list[tuple[str, int, str]]:
        """Return ``(topic, partition, directory)`` of each partition directory in ``root``."""
        if not self._files.is_directory(root):
            return []
        try:
            names = self._files.listdir(root)
        except OSError as error:
            raise StoreError(f"cannot list data path {root}: {error}") from error
        found = []
        for name in names:
            directory = os.path.join(root, name)
            if "-" not in name or not self._files.is_directory(directory):
                continue
            topic, _, text = name.rpartition("-")
            if not (text.isascii() and text.isdigit()) or int(text) > PARTITION_MAX:
                raise StoreError(
                    f"partition directory {directory}: {text!r} after the last "
                    "'-' is not a partition number"
                )
            found.append((topic, int(text), directory))
        return found

    def _open(
        self, topic: str, partition: int, directory: str, new_directories: tuple[str, ...] = ()
    ) -> PartitionLog:
        topic_config = self._config.topic_config(topic)
        point = self.recovery_points.entry(directory)
        log = PartitionLog.open(
            topic,
            partition,
            directory,
            files=self._files,
            flusher=self.flusher,
            clock=self._reactor,
            segment_bytes_max=self._config.segment_bytes_max,
            policy=FlushPolicy.from_topic(topic_config),
            new_directories=new_directories,
            recovery_point=point,
        )
        self.recovery_points.track(log, point)
        log.on_staged = self._partition_staged
        log.truncation = self.truncations.of(directory, f"{topic}-{partition}")
        if self._started:
            self._ensure_timer(log)
        return log

    # -- batched writes --------------------------------------------------------------------

    def _partition_staged(self, log: PartitionLog) -> None:
        """A partition staged its first record since its last commit."""
        self._staged.append(log)

    def commit_staged(self) -> None:
        """Write every partition's staged records (one write per partition) and ack them.

        Whoever stages records must call this at the end of its batch; the broker does after
        each read from a connection, so a burst of pipelined puts costs one write per
        partition instead of one per message. (No timer backs this up: a timer per batch
        cost a synchronous producer a measurable share of its round trip.)
        """
        if not self._staged:
            return
        staged, self._staged = self._staged, []
        for log in staged:
            log.commit()

    # -- lookup --------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        """Return the partition's log, or None when it does not exist (no check, no creation)."""
        return self._partitions.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, first_offset: int = 0) -> PartitionLog:
        """Return the partition's log, creating its directory and first segment if needed.

        A partition created here (new directory) has its first segment start at
        ``first_offset`` (an async slave copying a master whose data starts there, as
        in Java); an existing one is returned as is.

        Raises:
            InvalidTopicError: ``The server do not accept topic <topic>``.
            StoreError: ``wrong partition <p>``; the store is closed; or the directory or
                first segment cannot be created (``DescriptorShortageError`` when no file
                descriptor was free: the next call tries again).
        """
        key = (topic, partition)
        if key in self._accepted:
            return self._partitions[key]
        if self._closed:
            raise StoreError("the store is closed")
        topic_config = self._check(topic, partition)
        log = self._partitions.get(key)
        if log is None:
            log = self._create(topic, partition, topic_config.data_path, first_offset)
            self._partitions[key] = log
        self._accepted.add(key)
        return log

    def accepting(self, topic: str, partition: int) -> PartitionLog | None:
        """The partition's log when it exists and the running configuration takes puts to it
        (``get_or_create`` would return it as is); None otherwise. Creates nothing, raises
        nothing; the verdict is cached until the next ``set_config``."""
        key = (topic, partition)
        if key in self._accepted:
            return self._partitions[key]
        log = self._partitions.get(key)
        if log is None or self._closed:
            return None
        try:
            self._check(topic, partition)
        except (InvalidTopicError, StoreError):
            return None
        self._accepted.add(key)
        return log

    def _check(self, topic: str, partition: int) -> TopicConfig:
        """Java's getOrCreateMessageStore checks, made on every put (not only at creation)."""
        if not self._config.is_legal_topic(topic):
            raise InvalidTopicError(f"The server do not accept topic {topic}")
        topic_config = self._config.topic_config(topic)
        if not 0 <= partition < topic_config.num_partitions:
            raise StoreError(f"wrong partition {partition}")
        return topic_config

    def _create(self, topic: str, partition: int, root: str, first_offset: int = 0) -> PartitionLog:
        """Make the partition directory (single-level mkdir, as Java) and open it."""
        new_directories: list[str] = []
        directory = os.path.join(root, f"{topic}-{partition}")
        try:
            if not self._files.is_directory(root):
                self._files.mkdir(root)
                new_directories.append(os.path.dirname(os.path.normpath(root)))
            if not self._files.is_directory(directory):
                self._files.mkdir(directory)
                new_directories.append(root)
                if first_offset > 0:  # else PartitionLog.open creates the segment at 0
                    path = os.path.join(directory, segment_name(first_offset))
                    Segment.open(self._files, path, first_offset, create=True).close()
                    new_directories.append(directory)
        except OSError as error:
            raise StoreError(f"cannot create partition directory {directory}: {error}") from error
        logger.info("created partition %s-%d in %s", topic, partition, directory)
        self.truncations.settle(directory, f"{topic}-{partition}", created=root in new_directories)
        try:
            return self._open(topic, partition, directory, tuple(new_directories))
        except StoreError as error:
            if is_descriptor_shortage(error):  # transient: the next put tries again
                raise DescriptorShortageError(str(error)) from error
            raise

    def partitions(self) -> list[PartitionLog]:
        """Every open partition log."""
        return list(self._partitions.values())

    # -- timers and closing --------------------------------------------------------------

    def start(self) -> None:
        """Start the flush timers of threshold-mode partitions, retention's, the scrubber, and
        the recovery points' (written once now)."""
        self._started = True
        for log in self._partitions.values():
            self._ensure_timer(log)
        self._arm_retention()
        self.scrubber.start()
        self.recovery_points.start()

    def _ensure_timer(self, log: PartitionLog) -> None:
        policy = log.policy
        if policy.mode is not FlushMode.THRESHOLD or policy.interval_ms <= 0:
            return
        if policy.interval_ms in self._timers:
            return
        timer = LoopingCall(self._flush_interval, policy.interval_ms)
        timer.clock = self._reactor
        self._timers[policy.interval_ms] = timer
        timer.start(policy.interval_ms / 1000, now=False)

    def _flush_interval(self, interval_ms: int) -> None:
        """Timer: request a background flush of each dirty partition with this interval."""
        for log in self._partitions.values():
            policy = log.policy
            if (
                policy.mode is FlushMode.THRESHOLD
                and policy.interval_ms == interval_ms
                and log.failed is None
                and log.is_dirty
            ):
                log.request_flush()

    def flush_all(self) -> Deferred:
        """Request a flush of every dirty partition; fire once the flusher is idle.

        Start-up calls this before the transaction journal may let go of a COMMIT record:
        what the partitions loaded (``segment.SEGMENTS_UNSYNCED_AT_LOAD``) is then on disk,
        or its partition has failed; the recovery points then say so at once.
        """
        for log in self._partitions.values():
            if log.failed is None and log.is_dirty:
                log.request_flush()
        idle = self.flusher.wait_idle()
        return idle.addCallback(lambda result: self.recovery_points.write() or result)

    def close(self) -> Deferred:
        """Refuse new appends, flush everything, release waiters, then close every file.

        Returns:
            A Deferred fired once every file is closed.
        """
        self._closed = True
        self._accepted.clear()
        for timer in self._timers.values():
            if timer.running:
                timer.stop()
        self._timers.clear()
        self._stop_retention()
        self.scrubber.stop()
        self.recovery_points.stop_timer()
        for log in self._partitions.values():
            log.stop_appends()
            if log.failed is None and log.is_dirty:
                log.request_flush()
        waits = [self.flusher.wait_idle()]
        if self._retention_runner is not None:
            runner_done: Deferred = Deferred()
            self._retention_runner.addBoth(lambda result: runner_done.callback(None) or result)
            waits.append(runner_done)
        idle = gatherResults(waits)
        idle.addCallback(self._close_files)
        return idle

    def _close_files(self, _: object) -> None:
        self.recovery_points.stop()  # the flusher is idle: the points are the final ones
        for log in self._partitions.values():
            if log.truncation is not None:
                log.truncation.retry()  # a cut still owed: the disk may take its record now
            log.close()
        if self._own_executor is not None:
            self._own_executor.stop()
        logger.info("store closed")

    # -- retention ------------------------------------------------------------

    def _cron(self, expression: str) -> QuartzCron | None:
        """The parsed ``deleteWhen`` (validated at config load; None if it still fails)."""
        if expression not in self._crons:
            try:
                self._crons[expression] = QuartzCron(expression)
            except CronError as error:
                logger.error("retention disabled for deleteWhen %r: %s", expression, error)
                self._crons[expression] = None
        return self._crons[expression]

    def _arm_retention(self) -> None:
        """(Re)arm the one retention timer for the earliest next fire of any ``deleteWhen``."""
        config = self._config
        expressions = {config.delete_when}
        expressions.update(topic.delete_when for topic in config.topics if not topic.is_pattern)
        now_s = self._reactor.seconds()
        for expression in expressions - self._cron_next_s.keys():
            cron = self._cron(expression)
            next_s = cron.next_fire_s(now_s) if cron is not None else None
            if cron is not None and next_s is None:
                logger.warning("deleteWhen %r never fires again; no retention for it", expression)
            self._cron_next_s[expression] = next_s
        for expression in self._cron_next_s.keys() - expressions:
            del self._cron_next_s[expression]
        if self._retention_call is not None and self._retention_call.active():
            self._retention_call.cancel()
        self._retention_call = None
        times = [next_s for next_s in self._cron_next_s.values() if next_s is not None]
        if times:
            delay_s = max(0.0, min(times) - now_s)
            self._retention_call = self._reactor.callLater(delay_s, self._retention_fired)

    def _retention_fired(self) -> None:
        """Timer: queue every partition whose ``deleteWhen`` is due, re-arm, run the queue."""
        self._retention_call = None
        if self._closed:
            return
        now_s = self._reactor.seconds()
        due = set()
        for expression, next_s in list(self._cron_next_s.items()):
            if next_s is not None and next_s <= now_s + CRON_DUE_SLACK_S:
                due.add(expression)
                del self._cron_next_s[expression]  # recomputed from now by _arm_retention
        for log in self._partitions.values():
            if self._config.topic_config(log.topic).delete_when in due:
                self._retention_queue[log] = None
        self._arm_retention()
        if self._retention_queue and not self._retention_running:
            self._retention_running = True
            runner = ensureDeferred(self._run_retention())
            # Deletion alone (or a synchronous executor) finishes before ensureDeferred returns.
            self._retention_runner = None if runner.called else runner

    async def _run_retention(self) -> None:
        """Work through the retention queue one partition at a time."""
        try:
            while self._retention_queue and not self._closed:
                log = next(iter(self._retention_queue))
                del self._retention_queue[log]
                await self._retain(log)
        finally:
            self._retention_running = False
            self._retention_runner = None

    async def _retain(self, log: PartitionLog) -> None:
        """Apply the partition's topic ``deletePolicy``; log and swallow a failure."""
        policy = self._config.topic_config(log.topic).delete_policy
        try:
            await retention.retain_partition(
                log,
                self._config.topic_config(log.topic).delete_policy_spec,
                self._reactor.seconds(),
                self._files,
                self.background,
                self._retention_stop,
            )
        except retention.RetentionStopped:
            logger.info("retention of partition %s stopped: the store is closing", log.name)
        except Exception as error:
            logger.warning(
                "retention (%s) of partition %s failed: %s; continuing with the next partition",
                policy,
                log.name,
                error,
            )

    def _stop_retention(self) -> None:
        """Cancel the timer, drop the queue and stop an archive being written (close)."""
        if self._retention_call is not None and self._retention_call.active():
            self._retention_call.cancel()
        self._retention_call = None
        self._retention_queue.clear()
        self._retention_stop.set()
