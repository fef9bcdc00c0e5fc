"""Unit tests of ``MetaLogHandler`` with a producer stand-in (no network involved).

The stand-in records sends and can block or fail on demand; waits are bounded.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

from meta.client.message import SendResult
from meta.client.produce.log_handler import MetaLogHandler
from meta.errors import NoPartitionError, SendFailedError

DEADLINE_S = 10.0


class Producer:
    def __init__(self) -> None:
        self.published: list[str] = []
        self.sent: list[bytes] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False
        self.raises: Exception | None = None

    def publish(self, topic: str) -> None:
        self.published.append(topic)

    def send_message(self, message) -> SendResult:
        assert self.gate.wait(DEADLINE_S)
        if self.raises is not None:
            raise self.raises
        if self.fail:
            return SendResult(False, None, -1, "broker down")
        self.sent.append(message.data)
        return SendResult(True, None, 0, None)


def wait_until(condition) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def logger_with(handler: logging.Handler, name: str) -> logging.Logger:
    logger = logging.getLogger(name)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    return logger


def test_records_are_formatted_and_sent_to_the_topic():
    producer = Producer()
    handler = MetaLogHandler(producer, "logs")
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logger_with(handler, "app.sent")
    try:
        logger.info("hello %s", "world")
        logger.warning("careful")
        wait_until(lambda: handler.sent == 2)
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert producer.published == ["logs"]
    assert producer.sent == [b"INFO hello world", b"WARNING careful"]


def test_a_full_queue_drops_records_without_blocking_the_caller():
    producer = Producer()
    producer.gate.clear()  # the sender thread blocks on the first send
    handler = MetaLogHandler(producer, "logs", capacity=3, close_timeout_s=1.0)
    logger = logger_with(handler, "app.full")
    try:
        started = time.monotonic()
        for n in range(20):
            logger.info("record %d", n)
        assert time.monotonic() - started < DEADLINE_S
        assert handler.dropped >= 20 - 3 - 1  # 3 queued, at most 1 taken by the sender
    finally:
        producer.gate.set()
        logger.removeHandler(handler)
        handler.close()


def test_failed_sends_are_counted_and_the_thread_keeps_going():
    producer = Producer()
    producer.fail = True
    handler = MetaLogHandler(producer, "logs")
    logger = logger_with(handler, "app.fail")
    try:
        logger.info("lost")
        wait_until(lambda: handler.failed == 1)
        producer.fail = False
        logger.info("kept")
        wait_until(lambda: handler.sent == 1)
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert producer.sent == [b"kept"]


def test_records_of_the_client_library_itself_are_not_sent():
    producer = Producer()
    handler = MetaLogHandler(producer, "logs")
    client_logger = logger_with(handler, "meta.client.test")
    app_logger = logger_with(handler, "app.mixed")
    try:
        client_logger.info("from the client")
        app_logger.info("from the app")
        wait_until(lambda: handler.sent == 1)
    finally:
        client_logger.removeHandler(handler)
        app_logger.removeHandler(handler)
        handler.close()
    assert producer.sent == [b"from the app"]


def test_close_sends_what_is_queued_and_stops_the_thread():
    producer = Producer()
    handler = MetaLogHandler(producer, "logs")
    logger = logger_with(handler, "app.close")
    for n in range(50):
        logger.info("r%d", n)
    logger.removeHandler(handler)
    handler.close()
    assert len(producer.sent) == 50
    assert not any(t.name == "meta-log-logs" and t.is_alive() for t in threading.enumerate())


class RecordingHandler(MetaLogHandler):
    """Records what reaches ``logging``'s error path instead of printing it."""

    def __init__(self, *args, **kwargs) -> None:
        self.errors: list[tuple[logging.LogRecord, BaseException | None]] = []
        super().__init__(*args, **kwargs)

    def handleError(self, record: logging.LogRecord) -> None:
        self.errors.append((record, sys.exc_info()[1]))


def test_a_refused_send_reaches_handle_error_with_its_record():
    producer = Producer()
    producer.fail = True
    handler = RecordingHandler(producer, "logs")
    logger = logger_with(handler, "app.error-path")
    try:
        logger.info("refused")
        wait_until(lambda: handler.errors)
    finally:
        logger.removeHandler(handler)
        handler.close()
    [(record, error)] = handler.errors
    assert record.getMessage() == "refused"
    assert isinstance(error, SendFailedError) and "broker down" in str(error)


def test_a_send_that_raises_reaches_handle_error_once_per_report_period():
    producer = Producer()
    producer.raises = NoPartitionError("no broker serves topic 'logs'")
    handler = RecordingHandler(producer, "logs")
    logger = logger_with(handler, "app.error-once")
    try:
        logger.info("first")
        logger.info("second")
        wait_until(lambda: handler.failed == 2)
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert [record.getMessage() for record, _error in handler.errors] == ["first"]
    assert isinstance(handler.errors[0][1], NoPartitionError)
