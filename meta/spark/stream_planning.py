"""Driver-side planning of the ``metaq`` streaming source: ends, rate limits and ranges.

``take_snapshot`` reads the topics' partitions from ZooKeeper (through the source's open
``ZkSparkReader``) and each partition's first offset and end from its broker: every
trigger does this, so partitions and topics (for a pattern) that appear between batches
are picked up. ``cut_at_message`` moves a rate-limit cut to a message boundary.
``plan_stream_ranges`` turns a batch's ``(start, end)`` offsets into the batch planner's
``RangePartition`` pieces, so executors read a stream exactly as they read a batch and
never touch ZooKeeper.

Why cuts read data: a stream offset must be a message start (the next batch reads from
it), and only the bytes tell where messages start. A cut is first moved back to the start
of the segment holding it (free: the ``offset`` command); from there the driver walks
record headers forward with ``get`` to the last message start at or before the cut. That
costs at most one segment's bytes per limited partition and trigger, and only when
``maxBytesPerTrigger`` actually limits the batch.

Runs on the driver only (the streaming source's Python process); not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from meta.client.cluster import BrokerAddress
from meta.client.net.connection import BrokerConnection
from meta.client.zk.spark import ServedPartition, ZkSparkReader
from meta.errors import ClientError
from meta.protocol.commands import Data, Get, Result
from meta.protocol.message import iter_messages
from meta.spark.options import FETCH_BYTES_MAX, ReadOptions
from meta.spark.planning import (
    Bounds,
    RangePartition,
    partition_bounds,
    read_cluster_with,
    segment_start,
    split_range,
    start_of,
)
from meta.spark.stream_offsets import Key


@dataclass(frozen=True)
class Snapshot:
    """Every partition the stream reads now, where it is served, and its bounds."""

    served: dict[Key, ServedPartition]
    bounds: dict[Key, Bounds]
    committed: dict[Key, int]

    def ends(self) -> dict[Key, int]:
        return {key: bounds.latest for key, bounds in self.bounds.items()}

    def starts(self, options: ReadOptions) -> dict[Key, int]:
        """The first batch's start: the group's offsets, else ``startingOffsets``."""
        return {
            key: start_of(self.served[key], bounds, options, self.committed)
            for key, bounds in self.bounds.items()
        }


def take_snapshot(zk: ZkSparkReader, options: ReadOptions) -> Snapshot:
    """Read the partitions from ZooKeeper and their bounds from the brokers.

    Raises:
        OptionError: an unknown topic, or a pattern matching none.
        ClientError: ZooKeeper or a broker is unreachable or answers an error.
    """
    served_list, committed = read_cluster_with(zk, options)
    served = {(entry.topic, entry.partition): entry for entry in served_list}
    bounds = {}
    for address, keys in _by_broker(served, served).items():
        with BrokerConnection(address.host, address.port, options.broker_timeout_s) as broker:
            for key in keys:
                bounds[key] = partition_bounds(broker, served[key], options.request_group)
    return Snapshot(served, bounds, committed)


def check_not_behind(start: Mapping[Key, int], ends: Mapping[Key, int]) -> None:
    """Fail when a partition now ends before the stream's offset (its data is gone).

    Raises:
        ClientError: naming the partition and both offsets.
    """
    for key, end in ends.items():
        if end < start.get(key, end):
            topic, partition = key
            raise ClientError(
                f"{topic}/{partition} now ends at offset {end}, before the stream's offset "
                f"{start[key]}: the broker lost data (set failOnDataLoss=false to wait until "
                "the partition grows past it)"
            )


def limit_ends(
    snapshot: Snapshot,
    options: ReadOptions,
    begin: Mapping[Key, int],
    cuts: Mapping[Key, int],
) -> dict[Key, int]:
    """Move each cut (``stream_offsets.byte_cuts``) to a message boundary after ``begin``."""
    moved = {}
    for address, keys in _by_broker(snapshot.served, cuts).items():
        with BrokerConnection(address.host, address.port, options.broker_timeout_s) as broker:
            for key in keys:
                moved[key] = cut_at_message(
                    broker, snapshot.served[key], begin[key], cuts[key], options
                )
    return moved


def cut_at_message(
    broker: BrokerConnection, entry: ServedPartition, start: int, cut: int, options: ReadOptions
) -> int:
    """The last message start in ``(start, cut]``, or the end of the message at ``start``.

    Args:
        start: a message start; ``cut`` must be before the partition's end.

    Raises:
        ClientError: the broker answers an error, or a message is larger than
            ``FETCH_BYTES_MAX``.
    """
    assert start < cut
    anchor = segment_start(broker, entry, cut, options.request_group)
    offset = anchor if anchor is not None and anchor > start else start
    size = options.fetch_bytes
    while offset < cut:
        command = Get(
            entry.topic,
            options.request_group,
            entry.partition.partition,
            offset,
            size,
            broker.next_opaque(),
        )
        reply = broker.request(command)
        if not isinstance(reply, Data):
            text = reply.body.decode("utf-8", "replace") if isinstance(reply, Result) else reply
            raise ClientError(
                f"broker {entry.address.uri} answered a get of {entry.topic}/{entry.partition} "
                f"at {offset} while limiting the batch: {getattr(reply, 'code', '')} {text}"
            )
        consumed = 0
        for record in iter_messages(reply.data, offset):
            record_end = record.offset + record.size
            if record_end > cut:
                return record_end if record.offset <= start else record.offset
            consumed = record_end - offset
        if consumed == 0:
            if size >= FETCH_BYTES_MAX:
                raise ClientError(
                    f"{entry.topic}/{entry.partition} at {offset}: no whole message in {size} bytes"
                )
            size = min(size * 2, FETCH_BYTES_MAX)
            continue
        offset, size = offset + consumed, options.fetch_bytes
    return offset


def plan_stream_ranges(
    zk: ZkSparkReader,
    options: ReadOptions,
    start: Mapping[Key, int],
    end: Mapping[Key, int],
) -> list[RangePartition]:
    """The pieces of one batch: each partition's ``[start, end)``, split like a batch read.

    A partition missing from ``start`` (new since the last batch) starts at its earliest.

    Raises:
        ClientError: a partition with data to read is no longer served by any broker.
    """
    snapshot_served, _committed = read_cluster_with(zk, options)
    served = {(entry.topic, entry.partition): entry for entry in snapshot_served}
    pending = [key for key in end if start.get(key, 0) < end[key] or key not in start]
    for key in pending:
        if key not in served:
            topic, partition = key
            raise ClientError(
                f"{topic}/{partition} has data to read in offsets [{start.get(key)}, "
                f"{end[key]}) but no broker serves it now (includeSlaves=true reads slaves)"
            )
    ranges = []
    for address, keys in _by_broker(served, pending).items():
        with BrokerConnection(address.host, address.port, options.broker_timeout_s) as broker:
            for key in keys:
                entry = served[key]
                begin = start.get(key)
                if begin is None:
                    begin = partition_bounds(broker, entry, options.request_group).earliest
                if begin < end[key]:
                    ranges.extend(split_range(broker, entry, begin, end[key], options))
    return ranges


def _by_broker(
    served: Mapping[Key, ServedPartition], keys: Iterable[Key]
) -> dict[BrokerAddress, list[Key]]:
    grouped: dict[BrokerAddress, list[Key]] = {}
    for key in sorted(keys):
        grouped.setdefault(served[key].address, []).append(key)
    return grouped
