"""``meta-admin produce TOPIC``: the console producer.

Messages come from stdin, one per line: the ``\\n`` ending a line is not part of the message
(a ``\\r`` before it is), and a last line without one is a message too. With ``--file F``
(repeatable) each file is one message, its bytes as they are, and stdin is not read.
``--attribute A`` gives every message that attribute; ``--partition B-P`` sends every message
to that partition (named as ``browse`` names it), otherwise the producer's round-robin
selector chooses; ``--count N`` stops after N messages; ``--rate R`` sends at most R messages
per second.

Every message goes through the client library (``MessageProducer.send_message``) and its
answer is awaited before the next one is read, so nothing is silently dropped: a refused or
failed send stops the run with an error naming the message's number (1-based) and the reason
(exit 1). The messages before it are stored; none after it is sent. How many were sent goes
to stderr (a JSON document on stdout with ``--json``), also when an error or Ctrl-C stops
the run.

Bounds: a line or file larger than the producer's ``max_message_bytes`` is refused before it
is read whole. Single-threaded (the client's reader thread completes each send).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import BinaryIO

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
    MessageProducer,
    MetaClientConfig,
    MetaMessageSessionFactory,
    Partition,
)
from meta.errors import MetaError, NoPartitionError

__all__ = [
    "FixedPartitionSelector",
    "Pacer",
    "SendFailedError",
    "add_parser",
    "file_messages",
    "line_messages",
    "run_produce",
]


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


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``produce``."""
    del connection  # Brokers are found through ZooKeeper, not --broker.
    produce = commands.add_parser(
        "produce",
        parents=[cluster_options()],
        help="send messages read from stdin (one per line) or from files",
        description="Send messages to TOPIC: one per line of stdin (the newline is not part "
        "of the message), or one per --file. Each send is awaited; a refused or failed one "
        "stops the run with an error naming the message number (exit 1). How many were "
        "sent is reported on stderr.",
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
            send_all(producer, topic, arguments.attribute, messages, Pacer(arguments.rate), sent)
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
    producer: MessageProducer,
    topic: str,
    attribute: str | None,
    messages: Iterable[bytes],
    pacer: Pacer,
    sent: dict[str, int],
) -> None:
    """Send each message and await its answer, counting each stored one in ``sent``
    (``B-P`` -> messages), so the caller knows what is stored whatever stops the run.

    Raises:
        SendFailedError: a message was refused or failed; the text names its number, the
            reason and how many were sent before it.
        UsageError: ``messages`` refused a line or file (too large, unreadable).
    """
    for number, data in enumerate(messages, 1):
        pacer.wait()
        try:
            result = producer.send_message(Message(topic, data, attribute))
        except MetaError as error:
            raise SendFailedError(_failure(number, sent, str(error))) from None
        if not result.success:
            reason = f"the broker refused it: {result.error_message}"
            raise SendFailedError(_failure(number, sent, reason))
        name = str(result.partition)
        sent[name] = sent.get(name, 0) + 1


def _failure(number: int, sent: dict[str, int], reason: str) -> str:
    return (
        f"message {number} not sent: {reason} "
        f"({sum(sent.values())} message(s) sent before it; none after it)"
    )
