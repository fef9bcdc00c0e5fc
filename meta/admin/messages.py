"""``meta-admin browse|find-message``: what a partition holds, and where one message is.

* ``browse TOPIC PARTITION --from OFFSET --count N``: reads records with bounded ``get``s
  from ``OFFSET`` (a record boundary; below the first segment it follows the broker's 301)
  and prints offset, message id, the time in the id (wall-clock), flag, attribute, size and a
  printable preview, or the bodies as they are (``--raw``), or JSON. PARTITION is ``B-P``, or
  a partition number with ``--broker ID`` (not needed when one broker has the topic).
* ``find-message ID [--topic T]``: the id names the broker (bits 21..12) and the time
  (``meta.message_id``). Each partition of that broker (of T, or all) is searched near that
  time: ``reads.locate_time`` finds the records from ``SLACK_MS`` before it, and the scan stops
  at the id or ``SLACK_MS`` after it. An id without a wall-clock time (negative: a Java
  broker's) is searched by a full scan, bounded by ``--scan-bytes-max`` in total.

Single-threaded.
"""

from __future__ import annotations

import argparse
import base64
import sys

from meta.admin.client import EXIT_OK, NotFoundError, UsageError
from meta.admin.options import cluster_options, offset_argument, positive_int
from meta.admin.output import Progress, format_time_ms, preview, table, to_json
from meta.admin.reads import PartitionReader, PartitionStats, locate_time
from meta.admin.session import ClusterSession
from meta.client.cluster import Partition
from meta.errors import ClientError, InvalidRecordError
from meta.message_id import id_time_ms, id_worker
from meta.protocol.message import Record, decode_payload

COUNT_MAX = 100_000
"""Bound on ``browse --count``."""
SLACK_MS = 2_000
"""How far around the id's time ``find-message`` looks (ids and offsets are nearly ordered)."""
SCAN_BYTES_MAX = 1024 * 1024 * 1024
"""Default bound on the bytes a full-scan ``find-message`` reads."""

RECORD_HEADERS = ["OFFSET", "MSG_ID", "TIME", "FLAG", "ATTRIBUTE", "SIZE", "PAYLOAD"]


def message_id_argument(text: str) -> int:
    """argparse type of a message id: a signed 64-bit decimal."""
    try:
        value = int(text, 10)
    except ValueError:
        value = None
    if value is None or not -(2**63) <= value < 2**63:
        raise argparse.ArgumentTypeError(f"invalid message id {text!r}: expected a 64-bit integer")
    return value


def count_argument(text: str) -> int:
    value = positive_int(text)
    if value > COUNT_MAX:
        raise argparse.ArgumentTypeError(f"--count {value} is over the bound {COUNT_MAX}")
    return value


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``browse`` and ``find-message``."""
    del connection  # These commands find brokers through ZooKeeper, not --broker.
    options = cluster_options()
    browse = commands.add_parser(
        "browse",
        parents=[options],
        help="print the messages of one partition",
        description="Print COUNT messages of a partition from a byte offset: offset, "
        "message id, the time in the id, flag, attribute, size and a payload preview.",
    )
    browse.add_argument("topic", metavar="TOPIC")
    browse.add_argument(
        "partition_name", metavar="PARTITION", help="B-P, or a partition number with --broker"
    )
    browse.add_argument(
        "--from",
        dest="start",
        type=offset_argument,
        default=0,
        metavar="OFFSET",
        help="a record boundary (default 0: the first)",
    )
    browse.add_argument(
        "--count",
        type=count_argument,
        default=10,
        metavar="N",
        help=f"how many messages (default 10, at most {COUNT_MAX})",
    )
    browse.add_argument(
        "--broker",
        dest="broker_id",
        type=int,
        metavar="ID",
        help="the broker of a numeric PARTITION",
    )
    browse.add_argument(
        "--raw", action="store_true", help="print each message body as is, one per line"
    )
    browse.set_defaults(run=run_browse, open_session=ClusterSession.from_arguments)
    find = commands.add_parser(
        "find-message",
        parents=[options],
        help="find a message by its id",
        description="Find a message by id: the id names its broker and time, so only that "
        "broker's partitions are searched, around that time.",
    )
    find.add_argument("msg_id", metavar="ID", type=message_id_argument, help="the message id")
    find.add_argument("--topic", help="only this topic (default: every topic of the broker)")
    find.add_argument(
        "--scan-bytes-max",
        type=positive_int,
        default=SCAN_BYTES_MAX,
        metavar="BYTES",
        help="bound on the bytes a full scan reads (ids "
        f"without a time only; default {SCAN_BYTES_MAX})",
    )
    find.set_defaults(run=run_find, open_session=ClusterSession.from_arguments)


# --- records ---------------------------------------------------------------------------------


def record_document(record: Record) -> dict:
    """A record as JSON: the body as text when it is UTF-8, always as base64."""
    try:
        attribute, data = decode_payload(record.flag, record.payload)
    except InvalidRecordError:
        attribute, data = None, record.payload
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    time_ms = id_time_ms(record.msg_id) if record.msg_id >= 0 else None
    return {
        "offset": record.offset,
        "msg_id": record.msg_id,
        "time": None if time_ms is None else format_time_ms(time_ms),
        "time_ms": time_ms,
        "flag": record.flag,
        "attribute": attribute,
        "size": len(data),
        "record_bytes": record.size,
        "data_text": text,
        "data_base64": base64.b64encode(data).decode("ascii"),
    }


def record_row(document: dict) -> list[object]:
    data = base64.b64decode(document["data_base64"])
    return [
        document["offset"],
        document["msg_id"],
        document["time"],
        document["flag"],
        document["attribute"],
        document["size"],
        preview(data),
    ]


# --- browse ----------------------------------------------------------------------------------


def run_browse(arguments: argparse.Namespace, session: ClusterSession) -> int:
    topic = arguments.topic
    partition = resolve_partition(session, topic, arguments.partition_name, arguments.broker_id)
    label = f"{topic} {partition}"
    reader = PartitionReader(
        session.broker_client(partition.broker_id), topic, partition.partition, label
    )
    records = []
    iterator = reader.records(arguments.start)
    try:
        for record in iterator:
            records.append(record)
            if len(records) >= arguments.count:
                break
    finally:
        iterator.close()
    next_offset = records[-1].offset + records[-1].size if records else None
    documents = [record_document(record) for record in records]
    if arguments.json:
        document = {
            "topic": topic,
            "partition": str(partition),
            "from": arguments.start,
            "messages": documents,
            "next_offset": next_offset,
        }
        print(to_json(document))
    elif arguments.raw:
        _write_raw(documents)
    elif not records:
        store = session.partition_stats(partition.broker_id).get((topic, partition.partition))
        end = 0 if store is None else store.max_offset
        print(f"no messages in {label} from offset {arguments.start} (the partition ends at {end})")
    else:
        print(table(RECORD_HEADERS, [record_row(document) for document in documents]))
        print(f"next offset: {next_offset}")
    return EXIT_OK


def _write_raw(documents: list[dict]) -> None:
    sys.stdout.flush()
    out = getattr(sys.stdout, "buffer", None)
    for document in documents:
        data = base64.b64decode(document["data_base64"])
        if out is None:
            sys.stdout.write(data.decode("utf-8", "replace") + "\n")
        else:
            out.write(data + b"\n")
    if out is not None:
        out.flush()


def resolve_partition(
    session: ClusterSession, topic: str, name: str, broker_id: int | None
) -> Partition:
    """The partition ``name`` of ``topic``: ``B-P``, or ``P`` on ``broker_id`` (or on the
    topic's only broker), checked to exist (``browse``, ``produce``, ``consume``).

    Raises:
        UsageError: ``name`` is malformed, or ``P`` alone for a topic on several brokers.
        NotFoundError: the topic, or that partition of it, does not exist.
    """
    zk = session.zk
    zk.check_topic(topic)
    registrations = zk.registrations(topic)
    if name.isdigit():
        if broker_id is None:
            brokers = sorted({r.broker_id for r in registrations})
            if len(brokers) != 1:
                raise UsageError(
                    f"topic {topic} is on brokers {', '.join(map(str, brokers))}: "
                    f"give PARTITION as B-P or add --broker ID"
                )
            broker_id = brokers[0]
        partition = Partition(broker_id, int(name))
    else:
        try:
            partition = Partition.parse(name)
        except ClientError as error:
            raise UsageError(f"invalid partition {name!r}: expected B-P or a number") from error
        if broker_id is not None and broker_id != partition.broker_id:
            raise UsageError(f"partition {name} is not on --broker {broker_id}")
    counts = [r.partitions or 0 for r in registrations if r.broker_id == partition.broker_id]
    stores = session.partition_stats(partition.broker_id)
    if (topic, partition.partition) not in stores and partition.partition >= max(counts or [0]):
        raise NotFoundError(
            f"broker {partition.broker_id} has no partition {partition.partition} "
            f"of topic {topic} (it registers {max(counts or [0])})"
        )
    return partition


# --- find-message ----------------------------------------------------------------------------


def run_find(arguments: argparse.Namespace, session: ClusterSession) -> int:
    msg_id, topic = arguments.msg_id, arguments.topic
    broker_id = id_worker(msg_id)
    time_text = format_time_ms(id_time_ms(msg_id)) if msg_id >= 0 else "unknown"
    session.zk.broker(broker_id)
    if topic is not None:
        session.zk.check_topic(topic)
    stores = [
        store
        for store in sorted(session.partition_stats(broker_id).values(), key=_store_key)
        if topic is None or store.topic == topic
    ]
    client = session.broker_client(broker_id)
    budget = arguments.scan_bytes_max
    with Progress(f"searching broker {broker_id}", len(stores)) as progress:
        for store in stores:
            label = f"{store.topic} {broker_id}-{store.partition}"
            reader = PartitionReader(client, store.topic, store.partition, label)
            record, scanned = _search(reader, store, msg_id, budget)
            if record is not None:
                return _print_found(arguments, store, broker_id, record)
            budget -= scanned
            if budget <= 0:
                raise NotFoundError(
                    f"message {msg_id} not found after scanning "
                    f"{arguments.scan_bytes_max} bytes: raise --scan-bytes-max"
                )
            progress.advance()
    where = f"topic {topic} on broker {broker_id}" if topic else f"broker {broker_id}"
    raise NotFoundError(
        f"message {msg_id} (broker {broker_id}, time {time_text}) not found "
        f"in the {len(stores)} partition(s) of {where}"
    )


def _store_key(store: PartitionStats) -> tuple[str, int]:
    return store.topic, store.partition


def _search(
    reader: PartitionReader, store: PartitionStats, msg_id: int, budget: int
) -> tuple[Record | None, int]:
    """The record with ``msg_id`` in one partition (or None) and the bytes scanned for it."""
    bounds = (store.min_offset, store.max_offset)
    timed = msg_id >= 0
    start = store.min_offset
    if timed:
        start = locate_time(reader, id_time_ms(msg_id) - SLACK_MS, bounds).offset
    scanned = 0
    for record in reader.records(start, store.max_offset):
        scanned += record.size
        if record.msg_id == msg_id:
            return record, scanned
        if timed and id_time_ms(record.msg_id) > id_time_ms(msg_id) + SLACK_MS:
            break
        if not timed and scanned >= budget:
            break
    return None, scanned if not timed else 0


def _print_found(
    arguments: argparse.Namespace, store: PartitionStats, broker_id: int, record: Record
) -> int:
    document = record_document(record)
    partition = f"{broker_id}-{store.partition}"
    if arguments.json:
        print(
            to_json(
                {
                    "msg_id": arguments.msg_id,
                    "topic": store.topic,
                    "partition": partition,
                    "message": document,
                }
            )
        )
        return EXIT_OK
    print(
        f"message {arguments.msg_id}: topic {store.topic} partition {partition} "
        f"offset {record.offset}"
    )
    print(
        table(
            ["TOPIC", "PARTITION", *RECORD_HEADERS],
            [[store.topic, partition, *record_row(document)]],
        )
    )
    return EXIT_OK
