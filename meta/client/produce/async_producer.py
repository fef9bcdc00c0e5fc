"""Async one-way producer: fire-and-forget puts through a bounded window.

``AsyncMessageProducer.async_send_message`` checks the message, takes
``max(1, len(data) // 4096)`` permits (capped at the window) from a window of ``window``
permits, pipelines an ordinary put on the factory's shared connection and returns at once
with a queued result (``SendResult.queued``; Java returns a fake success, message id -1 and
offset -1, which says stored when nothing is stored yet). Permits come back when the reply or an
error arrives. When the window is exhausted, or a put fails (error, timeout or a failed
reply), the message is appended to a ``LocalMessageStorage`` backlog
(``<local_path>/<topic>@-1--1``, the ``RecoverFile`` format) and a ``PeriodicWorker`` re-sends
it synchronously, through the normal selector, every ``recover_interval_ms``.

Invariants:

* The caller never waits on the network: only on the local append (one fsync).
* No message is lost silently: each one is acknowledged by a broker, or kept in the backlog
  (removed only after an acknowledgement), or dropped with an ERROR log because its backlog
  is full (``BACKLOG_MESSAGES_MAX``) or the producer was shut down under it.
* ``0 <= available permits <= window``.

Differences from Java: the queued result carries no partition (the partition is chosen while
routing, after the caller got its result); the backlog is per topic, not per partition; the
order between messages is not kept (use the ordered producer for that).

Thread-safety: thread-safe. Completions run on the connection's reader thread; re-sends on
the worker thread ``meta-async-recover``.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from typing import Self

from meta.client.cluster import RANDOM_PARTITION
from meta.client.message import Message, SendResult, as_message
from meta.client.produce.ordered import (
    BACKLOG_MESSAGES_MAX,
    LocalMessageStorage,
    PeriodicWorker,
    check_for_local,
    drain,
)
from meta.client.produce.producer import DEFAULT_TIMEOUT_S, MessageProducer
from meta.errors import ClientClosedError, ClientError

log = logging.getLogger("meta.client")

DEFAULT_WINDOW = 20000
DEFAULT_LOCAL_PATH = "~/.meta_async_storage"
DEFAULT_RECOVER_INTERVAL_MS = 300_000
PERMIT_BYTES = 4096
SHUTDOWN_WAIT_S = 10.0
"""How long ``shutdown`` waits for in-flight puts before closing the backlog."""

__all__ = ["AsyncMessageProducer", "BACKLOG_MESSAGES_MAX", "permits_of"]


def permits_of(message: Message, window: int) -> int:
    """The permits one message costs: ``max(1, len(data) // 4096)``, at most ``window``."""
    return min(window, max(1, len(message.data) // PERMIT_BYTES))


class AsyncMessageProducer:
    """One-way producer; created by ``MetaMessageSessionFactory.create_async_producer``.

    Args:
        inner: the producer that does the puts (any selector).
        storage: the backlog (closed by ``shutdown``).
        window: the number of permits.
        max_message_bytes: largest payload accepted.
        recover_interval_ms: the pause between re-send rounds (the first runs at once).
        recover_thread: start the re-send thread (tests drive ``recover_round`` by hand).
    """

    def __init__(
        self,
        inner: MessageProducer,
        storage: LocalMessageStorage,
        window: int = DEFAULT_WINDOW,
        max_message_bytes: int = 1048576 - 20,
        recover_interval_ms: int = DEFAULT_RECOVER_INTERVAL_MS,
        recover_thread: bool = True,
    ) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ClientError(f"the async window must be a positive int, got {window!r}")
        self._inner = inner
        self.storage = storage
        self.window = window
        self._max_message_bytes = max_message_bytes
        self._permits = threading.Condition()
        self._available = window
        self._shut_down = False
        self._worker = PeriodicWorker(
            "meta-async-recover", self.recover_round, recover_interval_ms / 1000
        )
        if recover_thread:
            self._worker.start()

    @property
    def available_permits(self) -> int:
        """Permits not held by in-flight puts."""
        with self._permits:
            return self._available

    def publish(self, topic: str) -> None:
        """Publish ``topic`` (see ``MessageProducer.publish``)."""
        self._inner.publish(topic)

    def async_send_message(
        self, message: Message, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> SendResult:
        """Send without waiting; a failed or refused put goes to the local backlog.

        Args:
            message: the message (not to be modified afterwards: it may be stored later).
            timeout_s: how long the put may wait for its reply before it counts as failed.

        Returns:
            ``SendResult(True, None, -1, None, msg_id=-1)`` (Java's ``"-1 <partition> -1"``).

        Raises:
            ClientError: invalid message or closed producer.
            MessageTooLargeError, InvalidTopicError: as ``MessageProducer``.
        """
        check_for_local(message, self._max_message_bytes)
        if self._shut_down:
            raise ClientClosedError("the async producer was shut down")
        cost = permits_of(message, self.window)
        if not self._try_acquire(cost):
            self._to_local(message, "the window is exhausted")
            return SendResult.queued_result()
        try:
            future = self._inner.send_message_async(message, timeout_s)
        except ClientError:
            self._release(cost)
            raise
        future.add_done_callback(lambda done: self._completed(done, message, cost))
        return SendResult.queued_result()

    def send(
        self,
        topic_or_message: str | Message,
        data: bytes | None = None,
        *,
        attribute: str | None = None,
        key: str | bytes | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> SendResult:
        """Queue one message (``async_send_message`` with ``send(topic, data)``'s shape).

        Returns:
            A queued ``SendResult`` (``queued`` True): the message is on its way or in the
            local backlog, not stored yet.

        Raises:
            ClientError, MessageTooLargeError: as ``async_send_message`` (a put that fails
                later goes to the backlog and is re-sent).
        """
        message = as_message(topic_or_message, data, attribute, key)
        return self.async_send_message(message, timeout_s).raise_for_status()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def recover_round(self) -> int:
        """Re-send every backlog once (the worker's round); return how many were acknowledged."""
        sent = 0
        for topic, partition in self.storage.backlogs():
            recover_file = self.storage.file(topic, partition, create=False)
            if recover_file is not None:
                sent += drain(recover_file, self._resend, self._worker.stopping)
        return sent

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no put is in flight; False if ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        with self._permits:
            while self._available < self.window:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._permits.wait(remaining)
        return True

    def shutdown(self) -> None:
        """Refuse new sends, wait (bounded) for in-flight puts, stop the worker, close all."""
        with self._permits:
            if self._shut_down:
                return
            self._shut_down = True
        if not self.wait_idle(SHUTDOWN_WAIT_S):
            log.error("async producer shut down with puts still in flight after %s s",
                      SHUTDOWN_WAIT_S)  # fmt: skip
        self._worker.stop()
        self._inner.shutdown()
        self.storage.close()

    def _try_acquire(self, cost: int) -> bool:
        with self._permits:
            if self._available < cost:
                return False
            self._available -= cost
            return True

    def _release(self, cost: int) -> None:
        with self._permits:
            self._available += cost
            self._permits.notify_all()

    def _completed(self, future: Future[SendResult], message: Message, cost: int) -> None:
        """Reader-thread callback: store a failed put locally, then give the permits back."""
        try:
            error = future.exception() if not future.cancelled() else "cancelled"
            if error is not None:
                self._to_local(message, str(error))
            elif not future.result().success:
                self._to_local(message, f"broker said {future.result().error_message}")
        finally:
            self._release(cost)

    def _resend(self, message: Message) -> bool:
        try:
            result = self._inner.send_message(message)
        except ClientError as error:
            log.info("async backlog of %s waits: %s", message.topic, error)
            return False
        return result.success

    def _to_local(self, message: Message, reason: str) -> None:
        try:
            self.storage.append(message, RANDOM_PARTITION)  # False: RecoverFile logged ERROR.
        except (ClientClosedError, OSError) as error:
            log.error("async message of %s DROPPED (%s; storing failed: %s)",
                      message.topic, reason, error)  # fmt: skip
