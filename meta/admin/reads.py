"""What ``meta-admin`` reads from brokers over the wire: stats items, partition bounds,
segment starts, records, and the search of a partition by message-id time.

Everything goes through ``AdminClient`` (the shared codec, one blocking connection per
broker), with the commands every MetaQ broker answers, so the tools also work against a Java
broker:

* ``stats offsets`` gives every store's min and max offsets in one request (``stats
  json:offsets`` on a metaq-py broker: ``stats_document`` asks the JSON item first and falls
  back to the text item when the broker answers text, as a Java broker does);
* ``offset`` answers the start of the segment holding an offset, so walking
  down from the end (``offset(max - 1)``, then ``offset(start - 1)``...) lists the segments
  that hold data, one request each. An empty newest segment (just rolled) holds no offset and
  is not seen over the wire.
* ``get`` reads records; ``PartitionReader.records`` follows 301s, doubles the size asked for
  a record larger than it (up to ``READ_BYTES_MAX``) and stops at the end. At an offset that
  starts no valid record it names the record starts around it, read from the start of its
  segment (``meta.admin.record_starts``).

Message-id time (wall-clock): ``locate_time`` binary-searches the segments by the time of
their first record, then scans one segment forward to the first record whose id time is
``>=`` the target. Ids of one partition are nearly in offset order (ids are allocated just
before the append), so the first such record in offset order is the answer.

Bounds: every loop is bounded by the partition's end, ``SEGMENTS_MAX`` or a caller's byte
budget. Single-threaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from meta.admin.client import AdminClient, BrokerRefusedError, NotFoundError
from meta.admin.output import Progress
from meta.admin.record_starts import nearest_starts, nearest_starts_text
from meta.errors import InvalidRecordError
from meta.message_id import id_time_ms
from meta.protocol.commands import LONG_MAX, Data, Result
from meta.protocol.message import HEADER, HEADER_SIZE, Record, iter_messages
from meta.status.json_items import PREFIX as JSON_PREFIX

READ_BYTES = 256 * 1024
"""Bytes asked for per ``get``."""
READ_BYTES_MAX = 64 * 1024 * 1024
"""The most bytes asked for, for one record larger than ``READ_BYTES``."""
SEGMENTS_MAX = 100_000
"""Bound on the segments walked in one partition."""


STARTS_SCAN_BYTES_MAX = 64 * 1024 * 1024
"""The most bytes of a segment read to name the record starts around an offset that is not one."""


class _NoRecord(Exception):
    """No valid record at ``offset`` (``text`` says why); ``records`` adds the nearest starts."""

    def __init__(self, offset: int, text: str) -> None:
        super().__init__(text)
        self.offset = offset
        self.text = text


@dataclass(frozen=True)
class PartitionStats:
    """One line of ``stats offsets``: ``<topic> part <partition> min_offset <m> max_offset <M>``."""

    topic: str
    partition: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class Position:
    """Where a search landed: ``offset`` of the found record (or the end) and the id of the
    record before it (-1 when none was read), as an offsets node stores them."""

    offset: int
    previous_msg_id: int
    record: Record | None = None


def stats_document(client: AdminClient, name: str) -> dict | None:
    """The ``stats json:<name>`` document, or None from a broker that answers only text.

    A Java broker (or a metaq-py broker older than the item) reads ``json:<name>`` as a topic
    name and answers a ``STATS`` text block; the client then remembers that the broker has no
    JSON items and asks none again, so a caller falls back to the text item at the cost of
    one request per connection.

    Raises:
        BrokerRefusedError: neither a JSON object nor a ``STATS`` text block.
    """
    if client.answers_json_stats is False:
        return None
    reply = client.stats(JSON_PREFIX + name)
    if reply.code == 200 and reply.body.startswith(b"STATS\r\n"):
        client.answers_json_stats = False
        return None
    try:
        document = json.loads(reply.body) if reply.code == 200 else None
    except ValueError:
        document = None
    if not isinstance(document, dict) or document.get("item") != name:
        raise BrokerRefusedError(
            f"broker {client.name} answered 'stats {JSON_PREFIX}{name}' with result "
            f"{reply.code}: {reply.body.decode('utf-8', 'replace').strip()[:200]!r}"
        )
    client.answers_json_stats = True
    return document


def stats_lines(client: AdminClient, item: str) -> list[str]:
    """The lines of a ``stats <item>`` reply between ``STATS`` and ``END``.

    Raises:
        BrokerRefusedError: not a 200 reply, or not a ``STATS`` ... ``END`` body.
    """
    reply = client.stats(item)
    text = reply.body.decode("utf-8", "replace")
    lines = text.split("\r\n")
    if reply.code != 200 or len(lines) < 3 or lines[0] != "STATS" or lines[-2:] != ["END", ""]:
        raise BrokerRefusedError(
            f"broker {client.name} answered 'stats {item}' with result {reply.code}: "
            f"{text.strip()[:200]!r}"
        )
    return lines[1:-2]


def partition_stats(client: AdminClient) -> dict[tuple[str, int], PartitionStats]:
    """Every store of a broker, by ``(topic, partition)``: from ``stats json:offsets``, or
    from the text ``stats offsets`` on a broker without JSON items."""
    document = stats_document(client, "offsets")
    if document is not None:
        return {
            (row["topic"], row["partition"]): PartitionStats(
                row["topic"], row["partition"], row["min_offset"], row["max_offset"]
            )
            for row in document["partitions"]
        }
    found = {}
    for line in stats_lines(client, "offsets"):
        tokens = line.split(" ")
        if len(tokens) != 7 or tokens[1] != "part" or not tokens[2].isdigit():
            raise BrokerRefusedError(
                f"broker {client.name}: unexpected 'stats offsets' line {line!r}"
            )
        stats = PartitionStats(tokens[0], int(tokens[2]), int(tokens[4]), int(tokens[6]))
        found[(stats.topic, stats.partition)] = stats
    return found


class PartitionReader:
    """Reads one partition of one broker.

    Args:
        client: the connection to the broker.
        topic: the topic.
        partition: the partition number on that broker.
        label: ``<topic> <B-P>`` for errors and progress bars.
    """

    def __init__(self, client: AdminClient, topic: str, partition: int, label: str) -> None:
        self.client = client
        self.topic = topic
        self.partition = partition
        self.label = label

    def _offset(self, offset: int) -> int | None:
        """The ``offset`` command's answer; None when the broker has no store (404)."""
        reply = self.client.offset(self.topic, self.partition, offset)
        if reply.code == 404:
            return None
        if reply.code != 200 or not reply.body.strip().isdigit():
            raise BrokerRefusedError(
                f"broker {self.client.name} refused offset of {self.label} "
                f"(result {reply.code}): {reply.body.decode('utf-8', 'replace').strip()}"
            )
        return int(reply.body)

    def bounds(self) -> tuple[int, int] | None:
        """``(min_offset, max_offset)``, or None when the broker has no store for it."""
        first = self._offset(0)
        last = self._offset(LONG_MAX)
        if first is None or last is None:
            return None
        return first, last

    def segment_starts(self, min_offset: int, max_offset: int) -> list[int]:
        """Starts of the segments holding data between the bounds, ascending (one ``offset``
        request each, newest first); ``[min_offset]`` for an empty partition."""
        if max_offset <= min_offset:
            return [min_offset]
        starts: list[int] = []
        probe = max_offset - 1
        while len(starts) < SEGMENTS_MAX:
            start = self._offset(probe)
            if start is None or (starts and start >= starts[-1]):
                break  # Gone meanwhile, or a broker that does not answer segment starts.
            starts.append(start)
            if start <= min_offset:
                break
            probe = start - 1
        return sorted(starts) or [min_offset]

    def records(
        self, start: int, end: int | None = None, progress: Progress | None = None
    ) -> Iterator[Record]:
        """Yield the records from ``start`` (a record boundary) up to ``end`` (exclusive; None:
        the end at each read). A ``start`` below the first segment follows the 301.

        Raises:
            NotFoundError: no valid record at an offset read (not a boundary, or corrupt);
                the text names the record starts nearest to it.
            AdminError: a record too large to read, or the broker refused the get.
        """
        try:
            yield from self._records(start, end, progress)
        except _NoRecord as error:
            before, after = self._starts_around(error.offset)
            raise NotFoundError(f"{error.text}; {nearest_starts_text(before, after)}") from None

    def _starts_around(self, offset: int) -> tuple[int | None, int | None]:
        """The record starts nearest to ``offset``, read from the start of its segment (at most
        ``STARTS_SCAN_BYTES_MAX`` before it; beyond that, the segment's start alone)."""
        segment_start = self._offset(offset)
        if segment_start is None or segment_start > offset:
            return None, None
        if offset - segment_start > STARTS_SCAN_BYTES_MAX:
            return segment_start, None
        starts: list[int] = []
        try:
            for record in self._records(segment_start, None, None):
                starts.append(record.offset)
                if record.offset > offset:
                    break
        except _NoRecord:
            pass  # Corrupt data before the next start: only the starts read so far count.
        return nearest_starts(starts, offset)

    def _records(self, start: int, end: int | None, progress: Progress | None) -> Iterator[Record]:
        """``records`` without the naming of the nearest starts (``_NoRecord`` instead)."""
        offset, size = start, READ_BYTES
        while end is None or offset < end:
            reply = self.client.get(self.topic, self.partition, offset, size)
            if isinstance(reply, Result):
                moved = self._moved(reply, offset)
                if moved is None:
                    return
                offset = moved
                continue
            consumed = 0
            for record in self._decode(reply, offset):
                if end is not None and record.offset >= end:
                    return
                yield record
                consumed = record.offset + record.size - offset
            if consumed == 0:
                if not reply.data:
                    return
                size = self._larger_size(reply.data, offset, size)
                continue
            offset, size = offset + consumed, READ_BYTES
            if progress is not None:
                progress.update(offset - start)

    def first_record(self, offset: int) -> Record | None:
        """The record at ``offset`` (None at the end)."""
        records = self.records(offset)
        try:
            return next(records, None)
        finally:
            records.close()

    def _moved(self, reply: Result, offset: int) -> int | None:
        """Where a non-data get reply sends the read next; None to stop (404: the end)."""
        if reply.code == 404:
            return None
        body = reply.body.decode("utf-8", "replace").strip()
        if reply.code == 301 and body.isdigit() and int(body) > offset:
            return int(body)
        if reply.code == 301:
            return None
        raise BrokerRefusedError(
            f"broker {self.client.name} refused get of {self.label}@{offset} "
            f"(result {reply.code}): {body}"
        )

    def _decode(self, reply: Data, offset: int) -> Iterator[Record]:
        try:
            yield from iter_messages(reply.data, offset)
        except InvalidRecordError as error:
            at = error_offset(error, offset)
            raise _NoRecord(
                at,
                f"no valid record in {self.label} at offset {at}: "
                f"{error} (not a record boundary, or corrupt data)",
            ) from None

    def _larger_size(self, data: bytes, offset: int, size: int) -> int:
        """The size to ask for when a reply held no complete record."""
        declared = HEADER.unpack_from(data)[0] if len(data) >= HEADER_SIZE else 0
        if declared < 0 or HEADER_SIZE + declared > READ_BYTES_MAX:
            raise _NoRecord(
                offset,
                f"no valid record in {self.label} at offset {offset}: its header declares "
                f"{declared} bytes (not a record boundary, or corrupt data)",
            )
        if len(data) < size:
            # The broker sent less than asked and no whole record: the data ends inside the
            # "record" (so the offset is not a boundary), or maxTransferSize cut it.
            raise _NoRecord(
                offset,
                f"no complete record in {self.label} at offset {offset}: its header declares "
                f"{declared} bytes, broker {self.client.name} sent {len(data)} (not a record "
                "boundary, or a record larger than the broker's maxTransferSize)",
            )
        return min(max(size * 2, HEADER_SIZE + declared), READ_BYTES_MAX)


def error_offset(error: InvalidRecordError, default: int) -> int:
    """The offset named in an ``InvalidRecordError`` text, else ``default``."""
    words = str(error).split()
    return int(words[-1]) if words and words[-1].isdigit() else default


def locate_time(
    reader: PartitionReader, target_ms: int, bounds: tuple[int, int], progress_label: str = ""
) -> Position:
    """The first record (in offset order) whose id time is ``>= target_ms``.

    Args:
        reader: the partition.
        target_ms: milliseconds since the Unix epoch.
        bounds: the partition's ``(min_offset, max_offset)``.
        progress_label: label of the progress bar of the final scan.

    Returns:
        The record's position, or the end (``max_offset``) when every record is older.
    """
    min_offset, max_offset = bounds
    if max_offset <= min_offset:
        return Position(max_offset, -1)
    starts = reader.segment_starts(min_offset, max_offset)
    low, high, best = 0, len(starts) - 1, -1
    while low <= high:
        middle = (low + high) // 2
        first = reader.first_record(starts[middle])
        if first is None or id_time_ms(first.msg_id) >= target_ms:
            high = middle - 1
        else:
            best, low = middle, middle + 1
    if best < 0:
        return Position(starts[0], -1)
    scan_end = starts[best + 1] if best + 1 < len(starts) else max_offset
    previous = -1
    with Progress(progress_label or f"scanning {reader.label}", scan_end - starts[best]) as bar:
        for record in reader.records(starts[best], max_offset, bar):
            if id_time_ms(record.msg_id) >= target_ms:
                return Position(record.offset, previous, record)
            previous = record.msg_id
    return Position(max_offset, previous)
