"""Driver-side planning of a ``metaq`` read: ZooKeeper and broker offsets -> byte ranges.

``plan_ranges`` resolves the topics and their partitions from ``R/brokers/topics-sub``
(``meta.client.zk.spark``), asks every broker for each partition's first and end offsets
(the ``offset`` command at 0 and at Long.MAX_VALUE), applies the starting and
ending offsets (and a group's committed offsets), and returns one ``RangePartition`` per
(broker, topic, partition, offset range). ``split_range`` cuts a range larger than
``maxBytesPerPartition`` into pieces.

Splitting (why ``anchor`` exists): only the byte stream is known here, not where messages
start. A piece covers the messages that *start* in ``[start, end)``. Each cut is first moved
back to the start of the segment holding it (the ``offset`` command answers it; a segment
start is always a message start), which costs nothing. When that would not move past the
previous cut (one segment bigger than the piece size), the cut moves forward instead to a
segment start within an eighth of the piece size (``FORWARD_CUT_FRACTION``: segments a bit
bigger than the piece size, as when both are 64 MiB, since a segment rolls after the record
that crosses its size); failing that it stays at the byte position and the piece carries an
``anchor``: a known message start at or before ``start`` from which the executor reads
forward, skipping the messages before ``start``. Adjacent pieces apply the same rule to the
same cut, so no message is lost or read twice.

Invariants: every ``RangePartition`` carries the broker's host and port, so executors never
touch ZooKeeper; ``anchor <= start < end``. Runs on the driver only; not thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from meta.client.cluster import BrokerAddress, Partition
from meta.client.net.connection import BrokerConnection
from meta.client.zk.spark import ServedPartition, ZkSparkReader
from meta.errors import ClientError
from meta.protocol.commands import LONG_MAX, Offset, Result
from meta.spark.options import (
    EARLIEST,
    EARLIEST_IN_JSON,
    LATEST,
    LATEST_IN_JSON,
    OffsetSpec,
    OptionError,
    ReadOptions,
)

# A cut with no segment start before it moves forward to one within size / this.
FORWARD_CUT_FRACTION = 8


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """The messages of one broker partition that start in ``[start, end)``.

    ``anchor`` is a message start at or before ``start``: the executor reads from it.
    """

    topic: str
    broker_id: int
    partition_id: int
    host: str
    port: int
    start: int
    end: int
    anchor: int


@dataclass(frozen=True)
class Bounds:
    """A partition's first offset and its end (where the next message will start)."""

    earliest: int
    latest: int


def plan_ranges(options: ReadOptions) -> list[RangePartition]:
    """Resolve the read of ``options`` into byte ranges, split by ``maxBytesPerPartition``.

    Raises:
        OptionError: an unknown topic, a pattern matching none, or a start after an end.
        ClientError: ZooKeeper or a broker is unreachable or answers an error.
    """
    served, committed = read_cluster(options)
    by_broker: dict[BrokerAddress, list[ServedPartition]] = {}
    for entry in served:
        by_broker.setdefault(entry.address, []).append(entry)
    ranges = []
    for address, entries in by_broker.items():
        with BrokerConnection(address.host, address.port, options.broker_timeout_s) as broker:
            for entry in entries:
                bounds = partition_bounds(broker, entry, options.request_group)
                start = start_of(entry, bounds, options, committed)
                end = _resolve(options.ending, entry, bounds, default=bounds.latest)
                if start > end:
                    raise OptionError(
                        f"starting offset {start} is after ending offset {end} for "
                        f"{entry.topic}/{entry.partition}"
                    )
                if start < end:
                    ranges.extend(split_range(broker, entry, start, end, options))
    return ranges


def read_cluster(
    options: ReadOptions,
) -> tuple[list[ServedPartition], dict[tuple[str, Partition], int]]:
    """Read the topics' partitions and (with ``group``) the committed offsets from ZooKeeper."""
    with open_zookeeper(options) as reader:
        return read_cluster_with(reader, options)


def open_zookeeper(options: ReadOptions) -> ZkSparkReader:
    """A ``ZkSparkReader`` on the cluster of ``options`` (close it, or use it with ``with``)."""
    zk = options.zk
    return ZkSparkReader(zk.connect, zk.root, zk.connection_timeout_ms, zk.session_timeout_ms)


def read_cluster_with(
    reader: ZkSparkReader, options: ReadOptions
) -> tuple[list[ServedPartition], dict[tuple[str, Partition], int]]:
    """``read_cluster`` through an open ``reader`` (the streaming source keeps one open)."""
    served = []
    committed: dict[tuple[str, Partition], int] = {}
    for topic in resolve_topics(reader, options):
        partitions = reader.served_partitions(topic, options.include_slaves)
        if not partitions:
            raise OptionError(
                f"topic {topic} has no partition a broker serves now under {options.zk.root} "
                "(its masters are down; includeSlaves=true reads their slaves)"
            )
        served.extend(partitions)
        if options.group is not None:
            for partition, offset in reader.group_offsets(options.group, topic).items():
                committed[(topic, partition)] = offset
    return served, committed


def resolve_topics(reader: ZkSparkReader, options: ReadOptions) -> list[str]:
    """The topics to read: the names given (each must exist) or those matching the pattern."""
    known = reader.topics()
    if options.topic_pattern is not None:
        pattern = re.compile(options.topic_pattern)
        matched = [topic for topic in known if pattern.fullmatch(topic)]
        if not matched:
            raise OptionError(
                f"no topic matches {options.topic_pattern!r} under {options.zk.root} "
                f"(known topics: {', '.join(known) or 'none'})"
            )
        return matched
    for topic in options.topics:
        if topic not in known:
            raise OptionError(
                f"unknown topic {topic}: no broker registers it under "
                f"{options.zk.root}/brokers/topics-sub (known topics: {', '.join(known) or 'none'})"
            )
    return list(options.topics)


def partition_bounds(broker: BrokerConnection, entry: ServedPartition, group: str) -> Bounds:
    """The first offset and the end of one partition; ``(0, 0)`` when it holds nothing yet."""
    first = segment_start(broker, entry, 0, group)
    if first is None:
        return Bounds(0, 0)
    end = segment_start(broker, entry, LONG_MAX, group)
    return Bounds(first, first if end is None else end)


def segment_start(
    broker: BrokerConnection, entry: ServedPartition, offset: int, group: str
) -> int | None:
    """The ``offset`` command: the start of the segment holding ``offset``, clamped.

    Returns:
        The offset, or None when the broker has no data for the partition (404).

    Raises:
        ClientError: any other answer.
    """
    command = Offset(entry.topic, group, entry.partition.partition, offset, broker.next_opaque())
    reply = broker.request(command)
    if isinstance(reply, Result) and reply.code == 200:
        return int(reply.body)
    if isinstance(reply, Result) and reply.code == 404:
        return None
    text = reply.body.decode("utf-8", "replace") if isinstance(reply, Result) else reply
    raise ClientError(
        f"broker {entry.address.uri} answered the offset request for "
        f"{entry.topic}/{entry.partition}: {getattr(reply, 'code', '')} {text}"
    )


def split_range(
    broker: BrokerConnection, entry: ServedPartition, start: int, end: int, options: ReadOptions
) -> Iterator[RangePartition]:
    """Cut ``[start, end)`` into pieces of about ``maxBytesPerPartition`` bytes (see above)."""
    size = options.max_bytes_per_partition or (end - start)
    group = options.request_group
    cuts = [(start, start)]  # (piece start, anchor)
    for position in range(start + size, end, size):
        boundary = segment_start(broker, entry, position, group)
        boundary = start if boundary is None else max(boundary, start)
        if boundary > cuts[-1][0]:
            cuts.append((boundary, boundary))
            continue
        # No free move back: a segment start shortly after the cut is free too, and spares
        # the next piece from re-reading the segment up to the cut.
        ahead = segment_start(broker, entry, position + size // FORWARD_CUT_FRACTION, group)
        if ahead is not None and position < ahead < end:
            cuts.append((ahead, ahead))
        else:
            cuts.append((position, boundary))
    ends = [piece_start for piece_start, _anchor in cuts[1:]] + [end]
    for (piece_start, anchor), piece_end in zip(cuts, ends, strict=True):
        if piece_start < piece_end:
            yield _range(entry, piece_start, piece_end, anchor)


def _range(entry: ServedPartition, start: int, end: int, anchor: int) -> RangePartition:
    partition = entry.partition
    address = entry.address
    return RangePartition(
        entry.topic,
        partition.broker_id,
        partition.partition,
        address.host,
        address.port,
        start,
        end,
        anchor,
    )


def start_of(
    entry: ServedPartition,
    bounds: Bounds,
    options: ReadOptions,
    committed: Mapping[tuple[str, Partition], int],
) -> int:
    """The group's committed offset when there is one, else ``startingOffsets``; clamped."""
    offset = committed.get((entry.topic, entry.partition))
    if offset is None:
        return _resolve(options.starting, entry, bounds, default=bounds.earliest)
    return min(max(offset, bounds.earliest), bounds.latest)


def _resolve(spec: OffsetSpec, entry: ServedPartition, bounds: Bounds, default: int) -> int:
    """An offset spec for one partition, clamped into ``[earliest, latest]``."""
    if spec == EARLIEST:
        return bounds.earliest
    if spec == LATEST:
        return bounds.latest
    assert isinstance(spec, Mapping)
    offset = spec.get(entry.topic, {}).get(entry.partition)
    if offset is None:
        return default
    if offset == EARLIEST_IN_JSON:
        return bounds.earliest
    if offset == LATEST_IN_JSON:
        return bounds.latest
    return min(max(offset, bounds.earliest), bounds.latest)


def describe(ranges: Iterable[RangePartition]) -> str:
    """A short text of a plan, for logs and error messages."""
    return ", ".join(f"{r.topic}/{r.broker_id}-{r.partition_id}[{r.start},{r.end})" for r in ranges)
