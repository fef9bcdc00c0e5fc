"""``meta-admin produce TOPIC``: the console producer.

Messages come from stdin, one per line: the ``\\n`` ending a line is not part of the message
(a ``\\r`` before it is), and a last line without one is a message too. With ``--file F``
(repeatable) each file is one message, its bytes as they are, and stdin is not read.
``--attribute A`` gives every message that attribute; ``--partition B-P`` sends every message
to that partition (named as ``browse`` names it), otherwise the producer's round-robin
selector chooses; ``--count N`` stops after N messages; ``--rate R`` sends at most R messages
per second.

Every message goes through the client library (``MessageProducer.send_message_async``),
with at most ``--window N`` of them sent and not yet answered (default ``WINDOW_DEFAULT``):
the puts of one partition travel in order on its broker's connection and the broker stores
them in that order, and a broker with group commit covers a window with one fsync instead
of one per line. Nothing is silently dropped: every answer is awaited, oldest first. A
refused or failed send stops the reading: no message after the ones already in flight is
sent, those in flight are awaited, and the run ends with an error naming each failed
message by its number (1-based) and the reason (exit 1). Without ``--partition``, a put whose
broker failed in flight is first sent again (``send_all``'s ``resend``). How many were stored
goes to stderr
(a JSON document on stdout with ``--json``), also when an error or Ctrl-C stops the run.
``--window 1`` awaits each answer before the next line is read.

Bounds: a line or file larger than the producer's ``max_message_bytes`` is refused before it
is read whole; at most ``--window`` messages (``WINDOW_MAX`` at most) are held, each until its
answer; each answer is awaited at most the put timeout plus ``REPLY_GRACE_S``. Single-threaded
(the client's reader thread completes each send).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import BinaryIO, Protocol

from meta.admin.client import (
    EXIT_OK,
    EXIT_REFUSED,
    AdminError,
    UsageError,
    ZooKeeperUnreachableError,
)
from meta.admin.messages import resolve_partition
from meta.admin.options import cluster_options, positive_int
from meta.admin.output import to_json
from meta.admin.session import ClusterSession
from meta.client import (
    Message,
    MetaClientConfig,
    MetaMessageSessionFactory,
    Partition,
    SendResult,
)
from meta.errors import ClientError, MetaError, NoPartitionError, OperationTimeoutError

__all__ = [
    "WINDOW_DEFAULT",
    "WINDOW_MAX",
    "AsyncProducer",
    "FixedPartitionSelector",
    "Pacer",
    "SendFailedError",
    "add_parser",
    "file_messages",
    "line_messages",
    "run_produce",
]


WINDOW_DEFAULT = 32
"""Messages sent and not yet answered, by default: enough for one group commit to cover many
lines, few enough that a failure stops the run soon after it."""

WINDOW_MAX = 1024
"""The largest ``--window``: with messages of up to ``max_message_bytes`` each held until its
answer, this bounds what the run holds in memory."""

PUT_TIMEOUT_S = 3.0
"""How long a put may wait for its answer before it fails (the client's default)."""

REPLY_GRACE_S = 1.0
"""How much longer than ``PUT_TIMEOUT_S`` an answer is awaited: the connection fails a put
without an answer on its own after ``PUT_TIMEOUT_S``; this only bounds the wait for that."""


class AsyncProducer(Protocol):
    """What ``send_all`` uses of a producer (``MessageProducer`` has it)."""

    def send_message_async(self, message: Message, timeout_s: float = ...) -> Future[SendResult]:
        """Send one message without waiting; the future completes with its answer."""
        ...

    def send_message(self, message: Message, timeout_s: float = ...) -> SendResult:
        """Send one message and wait for its answer (a keyless producer avoids a failed
        broker and sends it to another one)."""
        ...


class SendFailedError(AdminError):
    """A message was refused by its broker or could not be sent; the run stopped there."""

    exit_status = EXIT_REFUSED


class FixedPartitionSelector:
    """A ``PartitionSelector`` that always chooses one partition (``--partition``).

    Args:
        partition: the partition every message goes to.
    """

    def __init__(self, partition: Partition) -> None:
        self.partition = partition

    def get_partition(
        self, topic: str, partitions: Sequence[Partition], message: Message
    ) -> Partition:
        """``partition`` when the topic's producers see it now.

        Raises:
            NoPartitionError: no master publishes that partition of ``topic`` now.
        """
        if self.partition not in partitions:
            published = ", ".join(map(str, partitions)) or "none"
            raise NoPartitionError(
                f"partition {self.partition} of topic {topic} is not published by a master "
                f"now (published: {published})"
            )
        return self.partition


class Pacer:
    """Spaces calls to ``wait`` at most ``rate`` per second (``--rate``).

    Each ``wait`` returns no earlier than ``1 / rate`` seconds after the previous one
    returned, so no window of time sees more than the rate (a slow send is not made up for
    by a burst).

    Args:
        rate: calls per second; None: no pacing.
        clock: seconds, monotonic (injectable for tests).
        sleep: sleeps the given seconds (injectable for tests).
    """

    def __init__(
        self,
        rate: float | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        assert rate is None or rate > 0
        self.rate = rate
        self._clock = clock
        self._sleep = sleep
        self._last: float | None = None

    def wait(self) -> None:
        if self.rate is None:
            return
        now = self._clock()
        if self._last is not None:
            delay = self._last + 1 / self.rate - now
            if delay > 0:
                self._sleep(delay)
                now = self._clock()
        self._last = now


def rate_argument(text: str) -> float:
    """argparse type of ``--rate``: positive messages per second."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"invalid rate {text!r}: expected positive messages per second"
        )
    return value


def file_argument(text: str) -> str:
    """argparse type of ``--file``: a readable regular file (checked before anything is sent)."""
    if not os.path.isfile(text) or not os.access(text, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot read file {text!r}")
    return text


def window_argument(text: str) -> int:
    """argparse type of ``--window``: a positive count up to ``WINDOW_MAX``."""
    value = positive_int(text)
    if value > WINDOW_MAX:
        raise argparse.ArgumentTypeError(f"invalid window {text!r}: at most {WINDOW_MAX}")
    return value


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``produce``."""
    del connection  # Brokers are found through ZooKeeper, not --broker.
    produce = commands.add_parser(
        "produce",
        parents=[cluster_options()],
        help="send messages read from stdin (one per line) or from files",
        description="Send messages to TOPIC: one per line of stdin (the newline is not part "
        "of the message), or one per --file. Up to --window sends are in flight at once, "
        "each answer awaited in order; a refused or failed one stops the run with an error "
        "naming each failed message by its number (exit 1). How many were sent is reported "
        "on stderr.",
    )
    produce.add_argument("topic", metavar="TOPIC")
    produce.add_argument(
        "--file",
        dest="files",
        action="append",
        type=file_argument,
        metavar="F",
        help="send the file's bytes as one message (repeatable; stdin is then not read)",
    )
    produce.add_argument("--attribute", metavar="A", help="the attribute of every message")
    produce.add_argument(
        "--partition",
        dest="partition_name",
        metavar="B-P",
        help="send every message to this partition (default: round robin over the topic's)",
    )
    produce.add_argument("--count", type=positive_int, metavar="N", help="stop after N messages")
    produce.add_argument(
        "--rate", type=rate_argument, metavar="R", help="send at most R messages per second"
    )
    produce.add_argument(
        "--window",
        type=window_argument,
        default=WINDOW_DEFAULT,
        metavar="N",
        help=f"at most N messages sent and not yet answered (default {WINDOW_DEFAULT}, at most "
        f"{WINDOW_MAX}); each partition still stores them in order; 1 awaits each answer "
        "before reading the next message",
    )
    produce.set_defaults(run=run_produce, open_session=ClusterSession.from_arguments)


# --- message sources -------------------------------------------------------------------------


def line_messages(stream: BinaryIO, size_max: int) -> Iterator[bytes]:
    """The lines of ``stream`` without their ``\\n``, each at most ``size_max`` bytes.

    Raises:
        UsageError: a line longer than ``size_max`` (named by its number).
    """
    for number in itertools.count(1):
        line = stream.readline(size_max + 2)
        if not line:
            return
        data = line[:-1] if line.endswith(b"\n") else line
        if len(data) > size_max:
            raise UsageError(
                f"line {number} of stdin is longer than the largest message, {size_max} bytes"
            )
        yield data


def file_messages(paths: Iterable[str], size_max: int) -> Iterator[bytes]:
    """The bytes of each file, read one at a time.

    Raises:
        UsageError: a file larger than ``size_max`` or unreadable (named).
    """
    for path in paths:
        try:
            with open(path, "rb") as file:
                data = file.read(size_max + 1)
        except OSError as error:
            raise UsageError(f"cannot read file {path}: {error.strerror or error}") from None
        if len(data) > size_max:
            raise UsageError(f"file {path} is larger than the largest message, {size_max} bytes")
        yield data


# --- produce ---------------------------------------------------------------------------------


def run_produce(arguments: argparse.Namespace, session: ClusterSession) -> int:
    topic = arguments.topic
    session.zk.check_topic(topic)
    selector = None
    if arguments.partition_name is not None:
        partition = resolve_partition(session, topic, arguments.partition_name, None)
        selector = FixedPartitionSelector(partition)
    with open_factory(session) as factory:
        producer = factory.create_producer(selector)
        try:
            producer.publish(topic)
        except MetaError as error:
            raise AdminError(f"cannot publish topic {topic}: {error}") from None
        size_max = factory.config.max_message_bytes
        if arguments.files:
            messages = file_messages(arguments.files, size_max)
        else:
            messages = line_messages(sys.stdin.buffer, size_max)
        if arguments.count is not None:
            messages = itertools.islice(messages, arguments.count)
        sent: dict[str, int] = {}
        try:
            send_all(
                producer,
                topic,
                arguments.attribute,
                messages,
                Pacer(arguments.rate),
                sent,
                window=arguments.window,
                resend=selector is None,
            )
        finally:  # Also after an error or Ctrl-C: say what is stored.
            _report(arguments, topic, sent)
    return EXIT_OK


def _report(arguments: argparse.Namespace, topic: str, sent: dict[str, int]) -> None:
    """How many messages went to each partition: stderr, or JSON on stdout."""
    counts = {name: sent[name] for name in sorted(sent, key=Partition.parse)}
    total = sum(counts.values())
    if arguments.json:
        print(to_json({"topic": topic, "sent": total, "partitions": counts}))
        return
    where = ", ".join(f"{name}: {count}" for name, count in counts.items())
    print(f"sent {total} message(s) to {topic}" + (f" ({where})" if where else ""),
          file=sys.stderr)  # fmt: skip


def open_factory(session: ClusterSession) -> MetaMessageSessionFactory:
    """A session factory on the session's ZooKeeper and root.

    Raises:
        ZooKeeperUnreachableError: ZooKeeper did not answer within the session's timeout.
    """
    config = MetaClientConfig(
        zk_connect=session.zk_connect,
        zk_root=session.zk_root,
        zk_connection_timeout_ms=max(1, int(session.timeout_s * 1000)),
        connect_timeout_s=session.timeout_s,
    )
    try:
        return MetaMessageSessionFactory(config)
    except MetaError as error:
        raise ZooKeeperUnreachableError(str(error)) from None


def send_all(
    producer: AsyncProducer,
    topic: str,
    attribute: str | None,
    messages: Iterable[bytes],
    pacer: Pacer,
    sent: dict[str, int],
    window: int = 1,
    resend: bool = False,
) -> None:
    """Send each message with at most ``window`` unanswered, awaiting the answers oldest
    first and counting each stored one in ``sent`` (``B-P`` -> messages), so the caller knows
    what is stored whatever stops the run.

    The first failure stops the reading: what is in flight is still awaited (its failures
    are reported too), nothing after it is sent. The same happens when ``messages`` raises or
    Ctrl-C stops the run, so ``sent`` is complete when this returns or raises.

    With ``resend`` (a producer that chooses the partition itself), a put that failed in
    flight for want of its broker (connection lost, no reply in time: a ``ClientError``) is
    sent again with ``send_message``, which sends it to another broker when that one fails
    (as the producer's synchronous sends do); only if that fails too is it a failure. A put
    that got no reply may have been stored: it is then stored twice, as with any resend.

    Raises:
        SendFailedError: messages were refused or failed; the text names each one's number
            and reason, and how many were stored.
        UsageError: ``messages`` refused a line or file (too large, unreadable).
    """
    assert 1 <= window <= WINDOW_MAX
    in_flight: deque[tuple[int, Message, Future[SendResult]]] = deque()
    failures: list[str] = []
    last = 0
    try:
        for number, data in enumerate(messages, 1):
            while len(in_flight) >= window and not failures:
                _settle(producer, *in_flight.popleft(), sent, failures, resend)
            if failures:
                break
            pacer.wait()
            message = Message(topic, data, attribute)
            try:
                future = producer.send_message_async(message, PUT_TIMEOUT_S)
            except MetaError as error:
                failures.append(f"message {number} not sent: {error}")
                break
            in_flight.append((number, message, future))
            last = number
    finally:  # Also after a refused line or Ctrl-C: every put sent gets its answer counted.
        while in_flight:
            _settle(producer, *in_flight.popleft(), sent, failures, resend)
    if failures:
        stored = sum(sent.values())
        raise SendFailedError(
            "; ".join(failures) + f" ({stored} message(s) sent, none after message {last})"
        )


def _settle(
    producer: AsyncProducer,
    number: int,
    message: Message,
    future: Future[SendResult],
    sent: dict[str, int],
    failures: list[str],
    resend: bool,
) -> None:
    """Await message ``number``'s answer: count it in ``sent`` or describe its failure;
    with ``resend``, a put its broker failed is sent again first (``send_all``)."""
    try:
        try:
            result = future.result(PUT_TIMEOUT_S + REPLY_GRACE_S)
        except FutureTimeoutError:
            future.cancel()
            raise OperationTimeoutError(f"no reply within {PUT_TIMEOUT_S} s") from None
        except ClientError:
            if not resend:
                raise
            result = producer.send_message(message, PUT_TIMEOUT_S)
    except MetaError as error:
        failures.append(f"message {number} not sent: {error}")
        return
    if not result.success:
        failures.append(f"message {number} not sent: the broker refused it: {result.error_message}")
        return
    name = str(result.partition)
    sent[name] = sent.get(name, 0) + 1
