"""A read-only look at a Java broker's transaction journal, to decide whether it can be retired.

A Java Metamorphosis broker keeps its transaction journal in ``<dataLogPath>/transactions/``
(``redo.<N>`` files of protobuf ``TxCommand`` records, JSON ``checkpoint.<N>`` files and a
Java-serialized ``heuristic.log``; Java's own layout). metaq-py's
journal has its own format (docs/formats.md §6), so a Java data directory opened by metaq-py must
first have its ``transactions/`` moved aside. That is only safe when the Java journal holds
nothing a Java broker would still act on at its next start:

* a **prepared** XA transaction (its outcome belongs to a transaction manager), or
* a **commit** whose batch is not intact in the partition's segments (a Java broker would append
  it again at recovery: it crashed between the commit record and the segment write).

A transaction that was still open and unprepared is neither: a Java broker rolls it back at
start, and its messages were never visible. ``inspect_java_journal`` replays the journal as
Java's ``JournalStore.recover`` does (from the newest checkpoint; a record that cannot be read
ends its file, and every commit attachment is skipped, which Java forgets in one case) and
reports what it found; it never writes.

The protobuf records are read with a minimal reader of the few field types the schema uses
(varint and length-delimited), which is all a migration check needs; no protobuf runtime.

Thread affinity: none (plain functions over files).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

from meta.protocol.crc import crc32
from meta.protocol.message import CHECKSUM_MASK
from meta.store.segment import SEGMENT_SUFFIX, parse_segment_name

__all__ = [
    "BatchCheck",
    "JavaJournal",
    "inspect_java_journal",
    "is_java_journal_file",
]

APPEND_MSG = 1
TX_OP = 2
XA_PREPARE, XA_COMMIT, XA_ROLLBACK, LOCAL_COMMIT, LOCAL_ROLLBACK = 1, 2, 3, 4, 5
COMMITS = (XA_COMMIT, LOCAL_COMMIT)
ROLLBACKS = (XA_ROLLBACK, LOCAL_ROLLBACK)
LENGTH = struct.Struct(">i")
ATTACHMENT_HEAD = struct.Struct(">qiii")  # offset, length, checksum, descLen
PUT_TX_KEY_TOKEN = 6  # put <topic> <partition> <len> <flag> <checksum> <txKey> <opaque>
RECORD_BYTES_MAX = 64 * 1024 * 1024


class _Unreadable(Exception):
    """A record that cannot be parsed: Java's replay truncates its file there."""


@dataclass(frozen=True)
class BatchCheck:
    """One partition batch of a commit, and whether the segments hold it intact."""

    transaction_id: str
    partition: str  # "<topic>-<partition>"
    offset: int
    length: int
    intact: bool
    reason: str  # why not intact, or "" when intact


@dataclass
class JavaJournal:
    """What ``inspect_java_journal`` found in one ``transactions/`` directory."""

    directory: str
    redo_files: list[str] = field(default_factory=list)
    checkpoint: tuple[int, int] | None = None  # (file number, offset) replay starts from
    in_flight: list[str] = field(default_factory=list)  # rolled back by any start
    prepared: list[str] = field(default_factory=list)
    batches: list[BatchCheck] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # "redo.N at P: why"

    @property
    def incomplete_batches(self) -> list[BatchCheck]:
        return [batch for batch in self.batches if not batch.intact]

    @property
    def pending(self) -> bool:
        """True when a Java broker still has work to do on this journal."""
        return bool(self.prepared or self.incomplete_batches)


def is_java_journal_file(head: bytes) -> bool:
    """True when ``head`` (a file's first bytes) starts like a Java redo record.

    A Java record opens with a 4-byte big-endian length, then the ``TxCommand`` message, whose
    first field is ``cmdType`` (tag 0x08) with the value 1 or 2.
    """
    return len(head) >= 6 and head[4] == 0x08 and head[5] in (APPEND_MSG, TX_OP)


def inspect_java_journal(directory: str, data_paths: list[str]) -> JavaJournal:
    """Replay the Java journal in ``directory`` read-only and check every commit's batches.

    Args:
        directory: the ``transactions/`` directory.
        data_paths: where the ``<topic>-<partition>`` directories are looked for, in order.

    Raises:
        OSError: a file could not be read.
    """
    report = JavaJournal(directory)
    numbers = _numbered(directory, "redo.")
    report.redo_files = [f"redo.{number}" for number in numbers]
    report.checkpoint = _newest_checkpoint(directory)
    start_file, start_offset = report.checkpoint or (0, 0)
    open_transactions: dict[str, int] = {}  # id -> XA_PREPARE once prepared, else 0
    for number in numbers:
        if number < start_file:
            continue
        with open(os.path.join(directory, f"redo.{number}"), "rb") as file:
            data = file.read()
        position = start_offset if number == start_file else 0
        _replay(report, f"redo.{number}", data, position, open_transactions, data_paths)
    report.prepared = sorted(k for k, state in open_transactions.items() if state == XA_PREPARE)
    report.in_flight = sorted(k for k, state in open_transactions.items() if state != XA_PREPARE)
    return report


def _replay(report, name, data, position, open_transactions, data_paths) -> None:
    while position < len(data):
        try:
            position = _replay_record(report, data, position, open_transactions, data_paths)
        except _Unreadable as error:
            report.unreadable.append(f"{name} at {position}: {error}")
            return


def _replay_record(report, data, position, open_transactions, data_paths) -> int:
    if position + LENGTH.size > len(data):
        raise _Unreadable("torn length")
    (length,) = LENGTH.unpack_from(data, position)
    body_start = position + LENGTH.size
    if not 0 < length <= RECORD_BYTES_MAX or body_start + length > len(data):
        raise _Unreadable(f"bad or torn record length {length}")
    command = _fields(data[body_start : body_start + length])
    end = body_start + length
    kind, content = command.get(1), command.get(2)
    if kind == APPEND_MSG and isinstance(content, bytes):
        put = _fields(content).get(2)
        if not isinstance(put, bytes):
            raise _Unreadable("append record without a put command")
        tokens = put.split(b"\r\n", 1)[0].split(b" ")
        if len(tokens) != 8:
            raise _Unreadable("append record whose put has no transaction key")
        open_transactions.setdefault(tokens[PUT_TX_KEY_TOKEN].decode("utf-8", "replace"), 0)
        return end
    if kind != TX_OP or not isinstance(content, bytes):
        raise _Unreadable(f"unknown command type {kind!r}")
    operation = _fields(content)
    kind, key = operation.get(1), operation.get(3)
    if not isinstance(key, bytes):
        raise _Unreadable("transaction record without a transaction id")
    transaction_id = key.decode("utf-8", "replace")
    attachment = operation.get(4, 0) if kind in COMMITS else 0
    if not isinstance(attachment, int) or end + attachment > len(data):
        raise _Unreadable("torn commit attachment")
    if kind == XA_PREPARE:
        open_transactions[transaction_id] = XA_PREPARE
    elif kind in COMMITS:
        open_transactions.pop(transaction_id, None)
        entries = _attachment(data[end : end + attachment])
        report.batches += [_check(transaction_id, entry, data_paths) for entry in entries]
    elif kind in ROLLBACKS:
        open_transactions.pop(transaction_id, None)
    else:
        raise _Unreadable(f"unknown transaction type {kind!r}")
    return end + attachment


def _attachment(data: bytes) -> list[tuple[str, int, int, int]]:
    entries, position = [], 0
    while position < len(data):
        if position + ATTACHMENT_HEAD.size > len(data):
            raise _Unreadable("torn commit attachment")
        offset, length, crc, desc_length = ATTACHMENT_HEAD.unpack_from(data, position)
        position += ATTACHMENT_HEAD.size
        desc = data[position : position + desc_length].decode("utf-8", "replace")
        position += desc_length
        entries.append((desc, offset, length, crc))
    return entries


def _check(transaction_id, entry, data_paths) -> BatchCheck:
    desc, offset, length, crc = entry

    def result(intact: bool, reason: str = "") -> BatchCheck:
        return BatchCheck(transaction_id, desc, offset, length, intact, reason)

    directory = next(
        (os.path.join(p, desc) for p in data_paths if os.path.isdir(os.path.join(p, desc))), None
    )
    if directory is None:
        return result(False, f"no directory {desc} under {', '.join(data_paths)}")
    starts = sorted(
        start for start in map(parse_segment_name, os.listdir(directory)) if start is not None
    )
    if starts and offset < starts[0]:
        return result(True)  # Already removed by retention: long since written and flushed.
    start = max((s for s in starts if s <= offset), default=None)
    if start is None:
        return result(False, f"no segment holds offset {offset}")
    path = os.path.join(directory, f"{start:020d}{SEGMENT_SUFFIX}")
    with open(path, "rb") as file:
        file.seek(offset - start)
        batch = file.read(length)
    if len(batch) != length:
        return result(False, f"the segment ends before {offset + length}")
    if crc32(batch) & CHECKSUM_MASK != crc:
        return result(False, f"the bytes at {offset} do not match the commit's checksum")
    return result(True)


def _fields(message: bytes) -> dict[int, int | bytes]:
    """The varint and length-delimited fields of one protobuf message (last one wins)."""
    fields: dict[int, int | bytes] = {}
    position = 0
    while position < len(message):
        key, position = _varint(message, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            fields[number], position = _varint(message, position)
        elif wire_type == 2:
            size, position = _varint(message, position)
            if position + size > len(message):
                raise _Unreadable("torn protobuf field")
            fields[number] = message[position : position + size]
            position += size
        else:
            raise _Unreadable(f"unexpected protobuf wire type {wire_type}")
    return fields


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while position < len(data) and shift < 64:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
    raise _Unreadable("torn protobuf varint")


def _numbered(directory: str, prefix: str) -> list[int]:
    numbers = []
    for name in os.listdir(directory):
        suffix = name[len(prefix) :]
        if name.startswith(prefix) and suffix.isascii() and suffix.isdigit():
            numbers.append(int(suffix))
    return sorted(numbers)


def _newest_checkpoint(directory: str) -> tuple[int, int] | None:
    """Java's rule: the content of the highest-numbered checkpoint file; None when empty."""
    numbers = _numbered(directory, "checkpoint.")
    if not numbers:
        return None
    with open(os.path.join(directory, f"checkpoint.{numbers[-1]}"), "rb") as file:
        text = file.read().strip()
    if not text:
        return None
    try:
        location = json.loads(text)
        return int(location["number"]), int(location["offset"])
    except (ValueError, KeyError, TypeError) as error:
        raise OSError(f"checkpoint.{numbers[-1]} is not a Java checkpoint: {error}") from None
