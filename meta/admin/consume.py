"""``meta-admin consume TOPIC``: the console consumer.

Two ways to read, one output:

* without ``--group``, the partitions are read directly (every partition consumers see, in
  consumer order, or ``--partition B-P``) with ``meta.admin.reads.PartitionReader``, from
  each partition's first offset (``--from-beginning``, the default) or its end
  (``--from-end``). Nothing is written anywhere.
* with ``--group G``, as a member of consumer group G (``MessageConsumer``; partitions are
  shared with the group's other members by rebalance), from the group's committed offsets;
  ``--from-beginning`` / ``--from-end`` apply to partitions the group has no offset for.
  The offsets committed to ZooKeeper cover exactly the messages printed: the listener
  prints a message and flushes stdout before it returns, and once the run stops (the
  ``--max-messages`` limit, the end, an error or Ctrl-C) it prints no more and fails every
  further message it is given (``set_rollback_only``), so a message fetched but not printed
  stays uncommitted; shutting the consumer down then commits.

Without ``--follow`` the run stops at the end each partition had when it started; with it,
it waits for new messages until interrupted (Ctrl-C: exit 130, after the commit).
``--max-messages N`` stops after N messages. Formats (``--format``): ``text`` is the payload
as it is plus a newline; ``hex`` the payload in hex plus a newline; ``json`` one JSON object
per line with ``topic``, ``partition``, ``offset``, ``msg_id``, ``attribute``, ``payload``
and ``payload_encoding`` (``utf-8``, or ``base64`` for a payload that is not UTF-8). How many
messages were printed goes to stderr. When the reader of stdout goes away (``| head``) the
run stops as at ``--max-messages`` (in a group, the message that could not be written is not
committed) and the tool exits 0 without an error.

Threads: direct reads run on the calling thread; in a group the listener runs on the
consumer's fetch thread while the calling thread waits for the end, the limit or Ctrl-C.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import BinaryIO

from meta.admin.client import EXIT_OK, AdminError, NotFoundError, UsageError
from meta.admin.messages import resolve_partition
from meta.admin.options import cluster_options, positive_int
from meta.admin.produce import open_factory
from meta.admin.reads import LONG_MAX, PartitionReader
from meta.admin.session import ClusterSession
from meta.client import ConsumerConfig, Message, MessageConsumer, Partition, ReceivedMessage
from meta.errors import InvalidRecordError, MetaError

__all__ = ["FORMATS", "GroupPrinter", "Output", "add_parser", "format_message", "run_consume"]

FORMATS = ("text", "hex", "json")
FETCH_BYTES = 256 * 1024
"""Bytes a group member asks for per fetch."""
ROUND_MESSAGES_MAX = 1000
"""With ``--follow``, messages read from one partition before the next gets its turn."""
FOLLOW_POLL_S = 0.5
"""With ``--follow``, the pause after a round of direct reads that found nothing new."""
WAIT_S = 0.1
"""How often a group run checks whether its partitions have reached their ends."""
RETRIES_MAX = 2**31 - 1
"""A group member's ``max_fetch_retries``: a message the run refuses is never rejected
(skipped), so it stays uncommitted for the group's next member."""


class Output:
    """Writes messages in one format to a binary stream, flushed after each.

    Args:
        stream: where to write (stdout's buffer).
        form: one of ``FORMATS``.
        limit: the most messages to write (None: no limit).
    """

    def __init__(self, stream: BinaryIO, form: str, limit: int | None) -> None:
        assert form in FORMATS
        self._stream = stream
        self.form = form
        self.limit = limit
        self.count = 0

    @property
    def full(self) -> bool:
        """True once ``limit`` messages were written."""
        return self.limit is not None and self.count >= self.limit

    def write(self, message: Message) -> None:
        """Write and flush one message.

        Raises:
            BrokenPipeError: the reader of stdout went away (``| head``); the run ends
                quietly (``meta.admin.main``).
            AdminError: stdout could not be written otherwise (a full disk).
        """
        assert not self.full
        try:
            self._stream.write(format_message(message, self.form))
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as error:
            raise AdminError(f"cannot write to stdout: {error.strerror or error}") from None
        self.count += 1


def format_message(message: Message, form: str) -> bytes:
    """One message as ``form`` prints it, with its newline."""
    if form == "text":
        return message.data + b"\n"
    if form == "hex":
        return message.data.hex().encode("ascii") + b"\n"
    assert form == "json"
    try:
        payload, encoding = message.data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        payload, encoding = base64.b64encode(message.data).decode("ascii"), "base64"
    document = {
        "topic": message.topic,
        "partition": str(message.partition),
        "offset": message.offset,
        "msg_id": message.id,
        "attribute": message.attribute,
        "payload": payload,
        "payload_encoding": encoding,
    }
    return json.dumps(document, ensure_ascii=False).encode("utf-8") + b"\n"


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``consume``."""
    del connection  # Brokers are found through ZooKeeper, not --broker.
    consume = commands.add_parser(
        "consume",
        parents=[cluster_options()],
        help="print the messages of a topic, directly or as a consumer group",
        description="Print the messages of TOPIC on stdout. Without --group the partitions "
        "are read directly and nothing is committed; with --group G the tool is a member "
        "of consumer group G and commits, in ZooKeeper, exactly the messages it printed.",
    )
    consume.add_argument("topic", metavar="TOPIC")
    consume.add_argument(
        "--group", metavar="G", help="consume as a member of this group, committing offsets"
    )
    consume.add_argument(
        "--partition",
        dest="partition_name",
        metavar="B-P",
        help="read only this partition (without --group)",
    )
    start = consume.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning",
        dest="from_end",
        action="store_false",
        help="start at each partition's first message (default; with --group: partitions "
        "without a committed offset)",
    )
    start.add_argument(
        "--from-end",
        dest="from_end",
        action="store_true",
        help="start at each partition's end (with --group: partitions without a committed offset)",
    )
    consume.add_argument(
        "--follow", action="store_true", help="keep waiting for new messages until Ctrl-C"
    )
    consume.add_argument(
        "--max-messages", type=positive_int, metavar="N", help="stop after N messages"
    )
    consume.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="text: the payload as it is; hex: the payload in hex; json: one JSON object "
        "per line (default text; --json is --format json)",
    )
    consume.set_defaults(
        run=run_consume, open_session=ClusterSession.from_arguments, from_end=False
    )


def run_consume(arguments: argparse.Namespace, session: ClusterSession) -> int:
    topic = arguments.topic
    if arguments.group is not None and arguments.partition_name is not None:
        raise UsageError(
            "--partition reads without a group: a group's members share the partitions by rebalance"
        )
    session.zk.check_topic(topic)
    form = arguments.format or ("json" if arguments.json else "text")
    sys.stdout.flush()
    output = Output(sys.stdout.buffer, form, arguments.max_messages)
    try:
        if arguments.group is None:
            _read_partitions(arguments, session, output)
        else:
            _consume_group(arguments, session, output)
    finally:
        print(f"{output.count} message(s) printed from {topic}", file=sys.stderr)
    return EXIT_OK


# --- without a group -------------------------------------------------------------------------


def _read_partitions(
    arguments: argparse.Namespace, session: ClusterSession, output: Output
) -> None:
    """Read the partitions directly, round by round, until done (see the module docstring)."""
    topic = arguments.topic
    if arguments.partition_name is not None:
        partitions = [resolve_partition(session, topic, arguments.partition_name, None)]
    else:
        partitions = [Partition.parse(name) for name in session.zk.subscribe_partitions(topic)]
    bounds = _bounds(session, topic, partitions)
    positions = {p: (bounds[p][1] if arguments.from_end else bounds[p][0]) for p in partitions}
    ends = None if arguments.follow else {p: bounds[p][1] for p in partitions}
    while not output.full:
        found = False
        for partition in partitions:
            end = None if ends is None else ends[partition]
            taken = 0
            with contextlib.closing(
                _messages(session, topic, partition, positions[partition], end)
            ) as messages:
                for message, next_offset in messages:
                    output.write(message)
                    positions[partition] = next_offset
                    taken += 1
                    if output.full or (ends is None and taken >= ROUND_MESSAGES_MAX):
                        break
            if output.full:
                return
            found = found or taken > 0
        if ends is not None:
            return
        if not found:
            time.sleep(FOLLOW_POLL_S)


def _bounds(
    session: ClusterSession, topic: str, partitions: list[Partition]
) -> dict[Partition, tuple[int, int]]:
    """``(min_offset, max_offset)`` of each partition now (``(0, 0)`` without a store yet)."""
    bounds = {}
    for partition in partitions:
        store = session.partition_stats(partition.broker_id).get((topic, partition.partition))
        bounds[partition] = (0, 0) if store is None else (store.min_offset, store.max_offset)
    return bounds


def _messages(
    session: ClusterSession, topic: str, partition: Partition, start: int, end: int | None
) -> Iterator[tuple[Message, int]]:
    """The messages of one partition from ``start`` up to ``end`` (None: the end now), each
    with the offset after it."""
    reader = PartitionReader(
        session.broker_client(partition.broker_id), topic, partition.partition,
        f"{topic} {partition}",
    )  # fmt: skip
    records = reader.records(start, end)
    try:
        for record in records:
            try:
                message = Message.from_record(topic, record, partition)
            except InvalidRecordError as error:
                raise NotFoundError(
                    f"invalid message in {topic} {partition} at offset {record.offset}: {error}"
                ) from None
            yield message, record.offset + record.size
    finally:
        records.close()


# --- as a group member -----------------------------------------------------------------------


class GroupPrinter:
    """The listener of a group run: prints each message until the run stops.

    A message is printed (and flushed) before the listener returns, so the fetch loop
    acknowledges exactly the printed ones; after ``stop()``, after the limit or after a
    write error every message is failed (``set_rollback_only``) without being printed, so its
    offset is not committed.

    Args:
        output: where messages go.

    Thread-safety: called on the consumer's fetch thread; ``stop`` and ``finished`` from any.
    """

    def __init__(self, output: Output) -> None:
        self._output = output
        self._lock = threading.Lock()
        self._stopped = False
        self.finished = threading.Event()
        """Set at the limit or on a write error."""
        self.error: AdminError | BrokenPipeError | None = None

    def __call__(self, message: ReceivedMessage) -> None:
        with self._lock:
            if self._stopped or self._output.full or self.error is not None:
                message.set_rollback_only()
                return
            try:
                self._output.write(message)
            except (AdminError, BrokenPipeError) as error:
                self.error = error
                self.finished.set()
                message.set_rollback_only()
                return
            if self._output.full:
                self.finished.set()

    def stop(self) -> None:
        """Print nothing more (waits for a message being printed)."""
        with self._lock:
            self._stopped = True


def _consume_group(arguments: argparse.Namespace, session: ClusterSession, output: Output) -> None:
    """Consume as a member of ``--group`` until the end, the limit, an error or Ctrl-C."""
    topic = arguments.topic
    ends = None
    if not arguments.follow:
        partitions = [Partition.parse(name) for name in session.zk.subscribe_partitions(topic)]
        ends = {str(p): high for p, (_low, high) in _bounds(session, topic, partitions).items()}
    config = ConsumerConfig(
        arguments.group,
        consume_from_max_offset=arguments.from_end,
        max_fetch_retries=RETRIES_MAX,
        reject_policy="drop",
        fetch_timeout_s=session.timeout_s,
    )
    printer = GroupPrinter(output)
    with open_factory(session) as factory:
        try:
            consumer = factory.create_consumer(config)
            consumer.subscribe(topic, FETCH_BYTES, printer)
            consumer.complete_subscribe()
        except MetaError as error:
            raise AdminError(f"cannot join group {arguments.group}: {error}") from None
        try:
            while not printer.finished.wait(WAIT_S):
                if ends is not None and _caught_up(consumer, ends):
                    break
        finally:
            printer.stop()
            consumer.shutdown()  # Commits the offsets of what was printed.
    if printer.error is not None:
        raise printer.error


def _caught_up(consumer: MessageConsumer, ends: dict[str, int]) -> bool:
    """True when every partition the member owns has been read up to its end (or placed at
    its end, for ``--from-end``)."""
    offsets = consumer.offsets()
    for key in consumer.owned_partitions():
        offset, end = offsets.get(key), ends.get(key[1], 0)
        if offset is None:
            return False
        if offset >= LONG_MAX:
            # A --from-end start the broker has not placed yet; once placed, the offset is
            # committed, so the group's next run starts there. A partition without data
            # (no store yet: the broker answers 404, not 301) stays unplaced, and its end,
            # 0, is where the group's next run starts anyway.
            if end > 0:
                return False
        elif offset < end:
            return False
    return True
