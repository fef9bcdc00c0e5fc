"""``MetaLogHandler``: a ``logging.Handler`` that sends log records to a topic.

The counterpart of Metamorphosis' log4j appender. ``emit`` formats the record and puts the
record and its bytes on a bounded queue; one daemon thread sends them with the producer's
synchronous ``send_message``. The application is never blocked: when the queue is full the
record is dropped and counted (``dropped``). A failed send (a refused put, an unconfigured
topic, a broker down) is counted (``failed``) and goes to ``logging``'s own error path,
``Handler.handleError(record)`` (a traceback on stderr while ``logging.raiseExceptions``
is true, as for any handler), for the first failure and then at most once per
``REPORT_EVERY_S``, so an outage does not flood stderr. Records logged by the client library itself
(``meta.client``, ``kazoo``) and records logged on the sender thread are not sent, so a
broker outage cannot feed the handler its own errors.

Thread-safety: ``emit`` may be called from any thread; the sender thread is the only one that
calls the producer. ``close`` stops the thread after sending what is queued, waiting at most
``close_timeout_s``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from meta.client.message import Message

DEFAULT_CAPACITY = 10_000
REPORT_EVERY_S = 60.0
EXCLUDED_LOGGERS = ("meta.client", "kazoo")
_STOP = object()


class MetaLogHandler(logging.Handler):
    """Sends each formatted record as one message to ``topic``.

    Args:
        producer: a producer (``factory.create_producer()``); ``publish(topic)`` is called.
        topic: the topic the records go to.
        capacity: the most records waiting to be sent; more are dropped.
        level: the handler's level.
        close_timeout_s: how long ``close`` waits for queued records to be sent.
        excluded_loggers: logger name prefixes whose records are never sent.

    Attributes:
        dropped: records dropped because the queue was full.
        failed: records whose send failed.
        sent: records sent.
    """

    def __init__(
        self,
        producer: Any,
        topic: str,
        capacity: int = DEFAULT_CAPACITY,
        level: int = logging.NOTSET,
        close_timeout_s: float = 5.0,
        excluded_loggers: tuple[str, ...] = EXCLUDED_LOGGERS,
    ) -> None:
        super().__init__(level)
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        producer.publish(topic)
        self.topic = topic
        self.dropped = 0
        self.failed = 0
        self.sent = 0
        self._producer = producer
        self._queue: queue.Queue = queue.Queue(capacity)
        self._close_timeout_s = close_timeout_s
        self._excluded = tuple(excluded_loggers)
        self._last_report = 0.0
        self._thread = threading.Thread(target=self._run, name=f"meta-log-{topic}", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        if threading.current_thread() is self._thread or record.name.startswith(self._excluded):
            return
        try:
            data = self.format(record).encode("utf-8", "replace")
        except Exception:
            self.handleError(record)
            return
        try:
            self._queue.put_nowait((record, data))
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        """Sender thread: send queued records until the stop marker."""
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            record, data = item
            try:
                self._producer.send_message(Message(self.topic, data)).raise_for_status()
            except Exception:  # A send failure must not kill the thread.
                self.failed += 1
                self._report(record)
            else:
                self.sent += 1

    def _report(self, record: logging.LogRecord) -> None:
        """Give the failure being handled to ``handleError``, rate-limited."""
        now = time.monotonic()
        if self.failed == 1 or now - self._last_report >= REPORT_EVERY_S:
            self._last_report = now
            self.handleError(record)

    def close(self) -> None:
        """Send what is queued (bounded by ``close_timeout_s``), stop the thread, close."""
        if self._thread.is_alive():
            try:
                self._queue.put(_STOP, timeout=self._close_timeout_s)
            except queue.Full:
                pass
            self._thread.join(self._close_timeout_s)
        super().close()
