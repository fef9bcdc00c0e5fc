"""Ordered producer with local failover, plus the local message storage.

``OrderedMessageProducer`` chooses a message's partition over the topic's **configured**
partitions (``parse_partitions_info``: Java's ``topic.num.<topic>`` -> ``"B:count;..."``,
expanded to ``B-0 .. B-(count-1)`` and sorted numerically), so a key keeps its partition even
while that partition's broker is down. Messages that cannot be sent go to a per-partition
backlog in ``LocalMessageStorage`` (``<local_path>/<topic>@<B-P>``, a ``RecoverFile`` of
``meta.client.local.message_file``: per-record CRC, fsync per append, torn-tail truncation,
atomic compaction) and a queued result is returned (``queued`` True, ``success`` False,
``error_message`` Java's ``"send to local"``; Java says success, though nothing is stored). A
``PeriodicWorker`` thread re-sends each backlog in order through the normal synchronous path.

Invariants:

* While a partition has a backlog, every new message for it is appended to the backlog too,
  so one sending thread's messages reach the broker in send order.
* The backlog is drained oldest first; the drain of a partition stops at its first failure,
  and a message is removed only after the broker acknowledged it (at-least-once: a message
  whose send timed out is kept and may arrive twice).
* A backlog holds at most ``messages_max`` messages; beyond that the message is dropped with
  an ERROR log and a failed ``SendResult`` (``RecoverFile.append``).
* Only the recovery thread removes records (``RecoverFile.remove`` needs one remover).

Differences from Java: a 403 or a connection failure stores the message under its own
partition (not ``-1--1``), and a send that meets a backlog appends at once instead of waiting
up to 300 ms for the recovery.

Thread-safety: ``OrderedMessageProducer``, ``LocalMessageStorage`` and ``SteeringSelector``
are thread-safe; the drain runs on the worker thread ``meta-ordered-recover``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from meta.client.cluster import Partition, validate_topic
from meta.client.local.message_file import RecoverFile
from meta.client.message import Message, SendResult, as_message, check_message
from meta.client.produce.producer import DEFAULT_TIMEOUT_S, MessageProducer
from meta.client.produce.selectors import PartitionSelector
from meta.errors import ClientClosedError, ClientError, MessageTooLargeError, NoPartitionError

log = logging.getLogger("meta.client")

PARTITIONS_INFO_PREFIX = "topic.num."
DEFAULT_LOCAL_PATH = "~/.meta_localmessage"
DEFAULT_RECOVER_INTERVAL_MS = 300_000
"""Java's ``recoverMessageIntervalInMills`` (5 minutes)."""
BACKLOG_MESSAGES_MAX = 500_000
"""Java's per ``topic@partition`` bound of the local store."""
TICK_S_MAX = 0.2
"""How often the recovery thread looks for a partition that came back."""
SENT_TO_LOCAL = "send to local"


def expand_partitions(topic: str, value: str) -> list[Partition]:
    """Expand ``"B:count;B:count..."`` into its partitions, sorted numerically.

    Raises:
        ClientError: a malformed entry, a negative id or a count below 1.
    """
    partitions: set[Partition] = set()
    for entry in (part.strip() for part in value.split(";")):
        if not entry:
            continue
        broker, sep, count = entry.partition(":")
        try:
            broker_id, number = int(broker), int(count)
        except ValueError:
            broker_id = number = -1
        if not sep or broker_id < 0 or number < 1:
            raise ClientError(
                f"partitions info of topic {topic}: bad entry {entry!r}, expected "
                "<brokerId>:<count> with count >= 1"
            )
        partitions.update(Partition(broker_id, index) for index in range(number))
    return sorted(partitions)


def parse_partitions_info(info: Mapping[str, str]) -> dict[str, tuple[Partition, ...]]:
    """Read Java's ``partitionsInfo`` properties (``DiamondUtils.getPartitions``).

    Args:
        info: ``topic.num.<topic>`` -> ``"<brokerId>:<count>;..."``; other keys are ignored.

    Returns:
        topic -> its configured partitions in numeric order (topics without any are left out).

    Raises:
        ClientError: a malformed value; InvalidTopicError: a bad topic name.
    """
    configured: dict[str, tuple[Partition, ...]] = {}
    for key, value in info.items():
        if not key.startswith(PARTITIONS_INFO_PREFIX):
            continue
        topic = key[len(PARTITIONS_INFO_PREFIX) :]
        validate_topic(topic)
        partitions = expand_partitions(topic, str(value))
        if partitions:
            configured[topic] = tuple(partitions)
    return configured


class LocalMessageStorage:
    """Backlog files ``<directory>/<topic>@<B-P>`` (``RecoverFile`` format), opened lazily.

    Files left by an earlier run are opened (and their torn tails cut) at construction.

    Args:
        directory: where the files live (``~`` expanded; created on first append).
        messages_max: the bound of each file.
    """

    def __init__(self, directory: str | os.PathLike[str], messages_max: int) -> None:
        self.directory = Path(directory).expanduser()
        self.messages_max = messages_max
        self._lock = threading.Lock()
        self._files: dict[tuple[str, Partition], RecoverFile] = {}
        self._closed = False
        if self.directory.is_dir():
            for path in sorted(self.directory.iterdir()):
                topic, sep, text = path.name.rpartition("@")
                if sep and path.is_file() and not text.endswith(".tmp"):
                    self.file(topic, Partition.parse(text))

    def file(self, topic: str, partition: Partition, create: bool = True) -> RecoverFile | None:
        """The file of ``topic@partition``; None if missing and ``create`` is False.

        Raises:
            ClientClosedError: the storage was closed.
        """
        key = (topic, partition)
        with self._lock:
            if self._closed:
                raise ClientClosedError(f"local message storage {self.directory} is closed")
            if key not in self._files:
                if not create:
                    return None
                self.directory.mkdir(parents=True, exist_ok=True)
                path = self.directory / f"{topic}@{partition}"
                self._files[key] = RecoverFile(path, topic, self.messages_max)
            return self._files[key]

    def count(self, topic: str, partition: Partition) -> int:
        """How many messages wait for ``topic@partition``."""
        recover_file = self.file(topic, partition, create=False)
        return 0 if recover_file is None else len(recover_file)

    def append(self, message: Message, partition: Partition) -> bool:
        """Append and fsync ``message`` to its partition's backlog; False if full (dropped)."""
        recover_file = self.file(message.topic, partition)
        assert recover_file is not None
        return recover_file.append(message)

    def backlogs(self) -> list[tuple[str, Partition]]:
        """The ``(topic, partition)`` pairs that have messages waiting, sorted."""
        with self._lock:
            files = list(self._files.items())
        return sorted(key for key, recover_file in files if len(recover_file) > 0)

    def close(self) -> None:
        """Close every file; later use raises ``ClientClosedError``. Idempotent."""
        with self._lock:
            self._closed = True
            files, self._files = list(self._files.values()), {}
        for recover_file in files:
            recover_file.close()


def drain(recover_file: RecoverFile, send: Callable[[Message], bool], stop: threading.Event) -> int:
    """Re-send a backlog oldest first; remove what was acknowledged; stop at the first failure.

    Args:
        recover_file: the backlog (only this thread removes from it).
        send: sends one stored message; True once the broker acknowledged it.
        stop: checked between messages.

    Returns:
        How many messages were acknowledged and removed.
    """
    done: list[int] = []
    try:
        for stored in recover_file.pending():
            if stop.is_set():
                break
            fresh = Message(stored.message.topic, stored.message.data, stored.message.attribute)
            if not send(fresh):
                break
            done.append(stored.position)
    finally:
        recover_file.remove(done)
    return len(done)


class PeriodicWorker:
    """Runs ``round_fn`` on its own daemon thread every ``tick_s``, or sooner after ``wake``.

    Args:
        name: the thread name.
        round_fn: one round; an exception is logged and the next tick tries again.
        tick_s: the pause between rounds.
    """

    def __init__(self, name: str, round_fn: Callable[[], object], tick_s: float) -> None:
        self._round_fn = round_fn
        self._tick_s = tick_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def stopping(self) -> threading.Event:
        """Set once ``stop`` was called."""
        return self._stop

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def wake(self) -> None:
        """Run a round now instead of at the next tick."""
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread; a round in progress ends after its current send."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._round_fn()
            except Exception:  # The next round tries again; the thread must not die.
                log.exception("round of %s failed", self._thread.name)
            self._wake.wait(self._tick_s)
            self._wake.clear()


class SteeringSelector:
    """A selector that obeys a per-thread pinned partition, else delegates to ``base``.

    ``pinned(p)`` makes the producer's route in this thread pick exactly ``p`` if it is among
    the live partitions, and raise ``NoPartitionError`` otherwise (the partition is down).
    """

    def __init__(self, base: PartitionSelector) -> None:
        self._base = base
        self._local = threading.local()

    @contextmanager
    def pinned(self, partition: Partition) -> Iterator[None]:
        """Pin ``partition`` for selections made by this thread inside the block."""
        self._local.partition = partition
        try:
            yield
        finally:
            self._local.partition = None

    def get_partition(
        self, topic: str, partitions: Sequence[Partition], message: Message
    ) -> Partition:
        pinned = getattr(self._local, "partition", None)
        if pinned is None:
            return self._base.get_partition(topic, partitions, message)
        if pinned not in partitions:
            raise NoPartitionError(f"selected partition[{pinned}] of topic {topic} is not writable")
        return pinned


def check_for_local(message: Message, max_message_bytes: int) -> None:
    """The checks a producer applies before sending, applied before storing locally.

    Raises:
        ClientError, InvalidTopicError, MessageTooLargeError: as ``MessageProducer``.
    """
    if not isinstance(message, Message):
        raise ClientError(f"expected a Message, got {type(message).__name__}")
    check_message(message)
    validate_topic(message.topic)
    size = len(message.payload_and_flag()[0])
    if size > max_message_bytes:
        raise MessageTooLargeError(
            f"message payload of {size} bytes for topic {message.topic} is larger than "
            f"max_message_bytes {max_message_bytes}"
        )


class OrderedMessageProducer:
    """Sends each key's messages in order to one configured partition, with a local backlog.

    Created by ``MetaMessageSessionFactory.create_ordered_producer``.

    Args:
        inner: a producer whose selector is ``steering`` (it does the real sends).
        steering: the inner producer's selector.
        selector: chooses among the configured partitions (e.g. ``HashPartitionSelector``).
        configured: topic -> configured partitions (``parse_partitions_info``).
        live: topic -> its currently writable partitions.
        storage: the backlogs (closed by ``shutdown``).
        max_message_bytes: largest payload accepted.
        recover_interval_ms: the pause between drain attempts of a live partition.
        recover_thread: start the recovery thread (tests drive ``recover_round`` by hand).
    """

    def __init__(
        self,
        inner: MessageProducer,
        steering: SteeringSelector,
        selector: PartitionSelector,
        configured: Mapping[str, Sequence[Partition]],
        live: Callable[[str], Sequence[Partition]],
        storage: LocalMessageStorage,
        max_message_bytes: int,
        recover_interval_ms: int = DEFAULT_RECOVER_INTERVAL_MS,
        recover_thread: bool = True,
    ) -> None:
        self._inner = inner
        self._steering = steering
        self._selector = selector
        self._configured = {topic: tuple(parts) for topic, parts in configured.items()}
        self._live = live
        self.storage = storage
        self._max_message_bytes = max_message_bytes
        self._interval_s = recover_interval_ms / 1000
        self._lock = threading.Lock()
        self._next_try: dict[tuple[str, Partition], float] = {}  # recovery thread only
        self._was_live: dict[tuple[str, Partition], bool] = {}  # recovery thread only
        self._shut_down = False
        self._worker = PeriodicWorker(
            "meta-ordered-recover", self.recover_round, min(TICK_S_MAX, self._interval_s)
        )
        if recover_thread:
            self._worker.start()

    def publish(self, topic: str) -> None:
        """Publish ``topic`` (see ``MessageProducer.publish``)."""
        self._inner.publish(topic)

    def send_message(self, message: Message, timeout_s: float = DEFAULT_TIMEOUT_S) -> SendResult:
        """Send ``message`` to its configured partition, or append it to that partition's backlog.

        Args:
            message: the message; ``key`` feeds a hash selector.
            timeout_s: how long to wait for the broker (a timeout keeps the message locally).

        Returns:
            The broker's ``SendResult``; a queued one (``queued`` True, ``error_message``
            ``"send to local"``) when stored locally; a failure when the backlog is full
            (the message is dropped).

        Raises:
            ClientError: invalid message, closed producer, or no configured partition.
            MessageTooLargeError, InvalidTopicError: as ``MessageProducer``.
        """
        check_for_local(message, self._max_message_bytes)
        if self._shut_down:
            raise ClientClosedError("the ordered producer was shut down")
        partition = self.choose_partition(message)
        if self.storage.count(message.topic, partition) > 0:
            self._worker.wake()
            return self._to_local(message, partition)
        try:
            result = self.send_to(message, partition, timeout_s)
        except ClientClosedError:
            if self._shut_down:
                raise
            # The broker's connection was closed under the put (its broker left ZooKeeper
            # or died): the message may not be stored, so it goes local like any failure.
            log.warning("ordered send to %s@%s failed, storing locally: its connection was "
                        "closed", message.topic, partition)  # fmt: skip
            return self._to_local(message, partition)
        except ClientError as error:
            log.warning("ordered send to %s@%s failed, storing locally: %s",
                        message.topic, partition, error)  # fmt: skip
            return self._to_local(message, partition)
        if not result.success and result.error_message == "403":
            return self._to_local(message, partition)
        return result

    def send(
        self,
        topic_or_message: str | Message,
        data: bytes | None = None,
        *,
        attribute: str | None = None,
        key: str | bytes | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> SendResult:
        """Send to the message's configured partition, or queue it in that partition's backlog.

        Returns:
            The stored ``SendResult``, or a queued one (the partition's broker is down).

        Raises:
            SendFailedError: the broker refused the put, or the backlog is full (dropped).
            ClientError, MessageTooLargeError: as ``send_message``.
        """
        message = as_message(topic_or_message, data, attribute, key)
        return self.send_message(message, timeout_s).raise_for_status()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def choose_partition(self, message: Message) -> Partition:
        """The configured partition of ``message`` (the same while the configuration is).

        Raises:
            ClientError: the topic has no configured partitions, or the selector chose one
                outside them.
        """
        configured = self._configured.get(message.topic)
        if not configured:
            raise ClientError(
                f"no configured partitions for topic {message.topic}: pass "
                f"partitions_info {{'{PARTITIONS_INFO_PREFIX}{message.topic}': 'B:count'}}"
            )
        partition = self._selector.get_partition(message.topic, configured, message)
        if partition not in configured:
            raise ClientError(f"selected partition {partition} is not configured")
        return partition

    def send_to(self, message: Message, partition: Partition, timeout_s: float) -> SendResult:
        """Send synchronously to exactly ``partition`` (``NoPartitionError`` if it is down)."""
        with self._steering.pinned(partition):
            return self._inner.send_message(message, timeout_s)

    def backlog_size(self, topic: str, partition: Partition) -> int:
        """How many messages wait locally for ``topic@partition``."""
        return self.storage.count(topic, partition)

    def recover_round(self) -> int:
        """Drain every due backlog whose partition is live (the recovery thread's round).

        A backlog is due when its partition just became live again or its retry time passed.

        Returns:
            How many messages were re-sent and removed.
        """
        sent, now = 0, time.monotonic()
        for key in self.storage.backlogs():
            topic, partition = key
            live = partition in self._live(topic)
            came_back = live and not self._was_live.get(key, True)
            self._was_live[key] = live
            if not live or (not came_back and now < self._next_try.get(key, 0.0)):
                continue
            recover_file = self.storage.file(topic, partition, create=False)
            assert recover_file is not None
            sent += drain(recover_file, self._resender(partition), self._worker.stopping)
            if len(recover_file) > 0:
                self._next_try[key] = time.monotonic() + self._interval_s
        return sent

    def shutdown(self) -> None:
        """Stop the recovery thread, shut the inner producer down, close the backlogs."""
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
        self._worker.stop()
        self._inner.shutdown()
        self.storage.close()

    def _resender(self, partition: Partition) -> Callable[[Message], bool]:
        def resend(message: Message) -> bool:
            try:
                result = self.send_to(message, partition, DEFAULT_TIMEOUT_S)
            except ClientError as error:
                log.info("backlog of %s@%s waits: %s", message.topic, partition, error)
                return False
            if not result.success:
                log.warning("backlog of %s@%s waits: broker said %s",
                            message.topic, partition, result.error_message)  # fmt: skip
            return result.success

        return resend

    def _to_local(self, message: Message, partition: Partition) -> SendResult:
        if not self.storage.append(message, partition):
            return SendResult(
                False, partition, -1, f"local backlog {message.topic}@{partition} full"
            )
        return SendResult(False, partition, -1, SENT_TO_LOCAL, None, True)  # Queued.
