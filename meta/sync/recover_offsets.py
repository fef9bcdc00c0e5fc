"""Consumer offset recovery for a broker that takes over a partition's data (``recoverOffset``).

Consumers commit ``R/consumers/G/offsets/T/B-P`` as ``<msgId>-<offset>``: the id of the last
message they acknowledged and the byte offset of the next one to read. When a
former slave becomes the master of broker B (a gregor slave promoted, or started as samsa
with ``recoverOffset=true``), its offsets may differ from the old master's; the message ids
do not, since a slave stores the master's ids. Recovery moves each committed entry of this
broker's partitions to this broker's data, by Java's ``recoverOffset`` rules with its flaws
corrected (``recover_partition``; docs/ha.md, "Offset recovery"):

1. **Exact id.** An entry whose id (any id but -1 and 0) is a record of the partition moves
   to the end of that record: ``<id>-<end>``.
2. **Last id before** (positive ids only: this project's ids carry wall-clock time, so they
   rise with the offset). An entry whose positive id is not in the partition moves to the end
   of the last record, in log order, whose positive id is <= the committed one.
3. **Unmatched.** A positive id older than every record of the partition: the consumer has
   read none of them, so the entry becomes ``-1-<first offset of the partition>``.
4. **Kept, with a warning.** A negative id (Java's ids) that is not in the partition cannot be
   placed, and an entry without an id (-1 or 0) has only its offset: both are kept as they
   are; the warning says why (and when the offset lies outside the partition).

Java moved an entry that already pointed at a segment's first record one record too early;
here each entry is decided once, over the whole partition. Entries whose node does not parse
are reported and left alone.

``recover_offsets`` reads the entries of one broker from ZooKeeper, scans that broker's
partition directories (``scan_records``: headers only, every segment in offset order, up to
the first torn or impossible record), and, when asked to execute, writes the changed
entries. It serves ``meta-admin recover-offsets`` and a samsa master's start-up with
``recoverOffset=true`` (before it registers). Blocking (kazoo's synchronous calls and file
reads): call it from a command line tool or before the reactor runs, never on the reactor.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from meta.client.cluster import format_offset
from meta.client.zk.offset_book import CommittedEntry
from meta.protocol.message import HEADER, HEADER_SIZE

log = logging.getLogger("meta.sync.recover_offsets")

NO_ID = frozenset((-1, 0))
"""Ids that name no message: an entry with one of them has only its offset."""

EXACT, LAST_BEFORE, UNMATCHED, KEPT = "exact", "last-before", "unmatched", "kept"

SEGMENT_NAME = re.compile(r"(\d{20})\.meta")


@dataclass(frozen=True)
class Recovered:
    """What recovery makes of one entry: ``rule`` is one of ``exact``, ``last-before``,
    ``unmatched`` or ``kept``; ``warning`` says why an entry was kept, or is None."""

    entry: CommittedEntry
    msg_id: int
    offset: int
    rule: str
    warning: str | None = None

    @property
    def changed(self) -> bool:
        """Whether the entry's node gets a new text."""
        return self.text != self.entry.text.strip()

    @property
    def text(self) -> str:
        """The node text after recovery, ``<msgId>-<offset>``."""
        return format_offset(self.msg_id, self.offset)


@dataclass(frozen=True)
class PartitionData:
    """A local partition: its first offset and its end (both 0 when it has no data)."""

    first_offset: int
    end: int


class _LastBefore:
    """For each wanted positive id ``c``: the last record, in log order, with ``0 < id <= c``.

    A stack of (id, end) with rising ids; a later record pops every entry with an id >= its
    own (it answers every ``c`` they answered). An entry that answers no wanted id is dropped
    at once, so the stack never holds more than ``len(wanted) + 1`` entries.
    """

    def __init__(self, wanted: Iterable[int]) -> None:
        self._wanted = sorted(set(wanted))
        self._stack: list[tuple[int, int]] = []

    def add(self, msg_id: int, end: int) -> None:
        stack = self._stack
        while stack and stack[-1][0] >= msg_id:
            stack.pop()
        if stack and not self._wanted_between(stack[-1][0], msg_id):
            stack.pop()
        stack.append((msg_id, end))

    def _wanted_between(self, low: int, high: int) -> bool:
        index = bisect.bisect_left(self._wanted, low)
        return index < len(self._wanted) and self._wanted[index] < high

    def answer(self, wanted: int) -> tuple[int, int] | None:
        index = bisect.bisect_right(self._stack, (wanted, float("inf"))) - 1
        return self._stack[index] if index >= 0 else None


def recover_partition(
    entries: Iterable[CommittedEntry],
    records: Iterable[tuple[int, int, int]],
    data: PartitionData,
) -> list[Recovered]:
    """Decide every entry of one partition (the rules of the module docstring). Pure.

    Args:
        entries: the committed entries of the partition.
        records: ``(msg_id, offset, end)`` of each record of the partition, in log order.
        data: the partition's first offset and end.

    Returns:
        One ``Recovered`` per entry, in the order given.
    """
    entries = list(entries)
    exact_wanted = {entry.msg_id for entry in entries if entry.msg_id not in NO_ID}
    last_before = _LastBefore(entry.msg_id for entry in entries if entry.msg_id > 0)
    exact: dict[int, int] = {}
    for msg_id, _offset, end in records:
        if msg_id in exact_wanted and msg_id not in exact:
            exact[msg_id] = end
        if msg_id > 0:
            last_before.add(msg_id, end)
    return [_decide(entry, exact, last_before, data) for entry in entries]


def _decide(
    entry: CommittedEntry, exact: dict[int, int], last_before: _LastBefore, data: PartitionData
) -> Recovered:
    msg_id = entry.msg_id
    if msg_id in exact:
        return Recovered(entry, msg_id, exact[msg_id], EXACT)
    if msg_id > 0:
        found = last_before.answer(msg_id)
        if found is None:
            return Recovered(entry, -1, data.first_offset, UNMATCHED)
        return Recovered(entry, found[0], found[1], LAST_BEFORE)
    if msg_id in NO_ID:
        warning = None
        if not data.first_offset <= entry.offset <= data.end:
            warning = (
                f"offset {entry.offset} (no message id) is outside the partition "
                f"[{data.first_offset}, {data.end}]: kept"
            )
        return Recovered(entry, msg_id, entry.offset, KEPT, warning)
    warning = f"message id {msg_id} is not in the partition and is not a wall-clock id: kept"
    return Recovered(entry, msg_id, entry.offset, KEPT, warning)


def segment_paths(directory: str) -> list[tuple[int, str]]:
    """``(start, path)`` of the segment files of a partition directory, by start."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        matched = SEGMENT_NAME.fullmatch(name)
        if matched is not None:
            found.append((int(matched.group(1)), os.path.join(directory, name)))
    return sorted(found)


def scan_records(directory: str) -> Iterator[tuple[int, int, int]]:
    """``(msg_id, offset, end)`` of every whole record of a partition directory, in order.

    Only headers are read. The scan stops at the first record that is torn (a short header,
    a negative length, a payload past its segment's end), as start-up recovery would cut it.
    """
    for start, path in segment_paths(directory):
        end = start
        for record in scan_records_of(start, path):
            end = record[2]
            yield record
        if end - start != os.path.getsize(path):
            return


def partition_data(directory: str) -> PartitionData:
    """The first offset and the end of a partition directory (its whole records)."""
    paths = segment_paths(directory)
    if not paths:
        return PartitionData(0, 0)
    last_start, last_path = paths[-1]
    end = last_start
    for _msg_id, _offset, record_end in scan_records_of(last_start, last_path):
        end = record_end
    return PartitionData(paths[0][0], end)


def scan_records_of(start: int, path: str) -> Iterator[tuple[int, int, int]]:
    """``scan_records`` for one segment file starting at ``start``."""
    with open(path, "rb") as segment:
        size = os.fstat(segment.fileno()).st_size
        position = 0
        while position + HEADER_SIZE <= size:
            length, _crc, msg_id, _flag = HEADER.unpack(segment.read(HEADER_SIZE))
            end = position + HEADER_SIZE + length
            if length < 0 or end > size:
                return
            yield msg_id, start + position, start + end
            segment.seek(end)
            position = end


class OffsetBook(Protocol):
    """Where the committed offsets live (``meta.client.zk.offset_book.ZkOffsetBook``)."""

    def entries(self, broker_id: int) -> tuple[list[CommittedEntry], list[str]]:
        """Every committed entry of a partition of ``broker_id``, and the problems found."""
        ...

    def write(self, entry: CommittedEntry, text: str, broker_id: int) -> None:
        """Write ``text`` to the node of ``entry``."""
        ...


@dataclass(frozen=True)
class RecoveryReport:
    """What one recovery found: a ``Recovered`` per entry and the problems left alone."""

    broker_id: int
    recovered: tuple[Recovered, ...]
    problems: tuple[str, ...]
    executed: bool

    @property
    def changes(self) -> list[Recovered]:
        return [item for item in self.recovered if item.changed]


def recover_offsets(config: Any, book: OffsetBook, execute: bool) -> RecoveryReport:
    """Recover the committed offsets of ``config``'s broker against its local data.

    Args:
        config: the broker's ``BrokerConfig`` (its ``broker_id`` and data paths).
        book: the offsets in ZooKeeper.
        execute: write the changed entries (False: only compute them, a dry run).

    Returns:
        The report, with every entry in (topic, partition, group) order.
    """
    entries, problems = book.entries(config.broker_id)
    by_partition: dict[tuple[str, int], list[CommittedEntry]] = {}
    for entry in entries:
        by_partition.setdefault((entry.topic, entry.partition), []).append(entry)
    recovered: list[Recovered] = []
    for topic, partition in sorted(by_partition):
        directory = os.path.join(config.data_path_for(topic), f"{topic}-{partition}")
        group_entries = sorted(by_partition[topic, partition], key=lambda entry: entry.group)
        recovered += recover_partition(
            group_entries, scan_records(directory), partition_data(directory)
        )
    if execute:
        for item in recovered:
            if item.changed:
                book.write(item.entry, item.text, config.broker_id)
    return RecoveryReport(config.broker_id, tuple(recovered), tuple(problems), execute)


def log_report(report: RecoveryReport) -> None:
    """Log a recovery: one INFO line per change, one WARNING per kept entry or problem."""
    verb = "moved" if report.executed else "would move"
    for item in report.recovered:
        entry = item.entry
        where = f"group {entry.group} {entry.topic} {report.broker_id}-{entry.partition}"
        if item.changed:
            log.info("recover offsets: %s %s from %s to %s (%s)", where, verb,
                     entry.text.strip(), item.text, item.rule)  # fmt: skip
        if item.warning is not None:
            log.warning("recover offsets: %s: %s", where, item.warning)
    for problem in report.problems:
        log.warning("recover offsets: %s", problem)
    log.info(
        "recover offsets: broker %d: %d entries, %d %s",
        report.broker_id, len(report.recovered), len(report.changes),
        "changed" if report.executed else "to change (dry run)",
    )  # fmt: skip


def recover_at_start(config: Any) -> RecoveryReport:
    """A samsa master's start-up with ``recoverOffset=true``: recover and write the offsets
    through the broker's own ZooKeeper settings, before it registers (blocking).

    Raises:
        Exception: ZooKeeper cannot be reached or a write fails; the start must fail.
    """
    from meta.client.zk.cluster_view import close_zookeeper, connect_zookeeper
    from meta.client.zk.offset_book import ZkOffsetBook

    zookeeper = config.zookeeper
    client = connect_zookeeper(
        zookeeper.connect, zookeeper.session_timeout_ms, zookeeper.connection_timeout_ms
    )
    try:
        report = recover_offsets(config, ZkOffsetBook(client, zookeeper.root), execute=True)
    finally:
        close_zookeeper(client)
    log_report(report)
    return report
