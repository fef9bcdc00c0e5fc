"""A local file of messages (``RecoverFile``): append-only, CRC per record, fsynced.

The consumer's recover store (``meta.client.consume.recover``) keeps rejected
messages in these files, and the ordered and async producers keep their backlog in them
(``meta.client.produce.ordered``). The format is this client's own, not Java's.

File: ``<directory>/<topic>@<group>``, append-only, all integers big-endian::

    file   = header record*
    header = "MQRC" uint32 version(=1)                                  8 bytes
    record = int32 length | uint32 crc | body                           8 + length bytes
    body   = int64 offset | int32 broker_id | int32 partition | message
    message = int32 payload_length | int32 checksum | int64 msg_id | int32 flag | payload

``message`` is the Metamorphosis record (``meta.protocol.message.pack_message``: its own
checksum covers the payload only, its flag bit 0 says the payload starts with the
attribute). ``crc`` is CRC-32 (``meta.protocol.crc.crc32``) over the 4 length bytes followed by the
body: every byte of the record except the crc field itself. ``offset``/``broker_id``/
``partition`` say where the message was fetched from (-1 when unknown).
Example: message id 7, no attribute, data ``b"x"`` from ``1-0`` at offset 42 is a record of
length 37: ``00000025 <crc> 000000000000002a 00000001 00000000`` then the 21 bytes of
``pack_message(7, 0, b"x")``.

Invariants:

* Every append is fsynced before ``append`` returns True.
* On open, the file is scanned; the first record that is short, has a length outside
  ``[MESSAGE_MIN, BODY_BYTES_MAX]`` or fails either check ends the valid region: the file
  is truncated there and the number of bytes cut is logged.
* Removal rewrites the file atomically (``.tmp``, fsync, rename, directory fsync).
* A file holds at most ``messages_max`` messages; beyond that ``append`` logs an ERROR naming
  the dropped message and returns False.

Thread-safety: ``RecoverFile`` is thread-safe; ``pending`` and ``remove`` are meant to be
called by one thread (the consumer's ``RecoverManager``, a producer's recovery thread),
because positions change when ``remove`` compacts.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from meta.client.cluster import Partition
from meta.client.fetch.received import ReceivedMessage
from meta.client.local.durable import fsync_directory
from meta.client.message import Message
from meta.errors import ClientError, InvalidRecordError
from meta.protocol.crc import crc32
from meta.protocol.message import HEADER_SIZE, Record, iter_messages, pack_message

log = logging.getLogger("meta.client")

MAGIC = b"MQRC"
VERSION = 1
FILE_HEADER = struct.Struct(">4sI")
RECORD_HEADER = struct.Struct(">iI")
LENGTH = struct.Struct(">i")
BODY_PREFIX = struct.Struct(">qii")
MESSAGE_MIN = BODY_PREFIX.size + HEADER_SIZE
BODY_BYTES_MAX = 2**30
assert FILE_HEADER.size == 8
assert RECORD_HEADER.size == 8
assert BODY_PREFIX.size == 16


@dataclass(frozen=True)
class StoredMessage:
    """One pending message and its record's byte position in the file (for ``remove``)."""

    position: int
    message: Message


def record_crc(body: bytes) -> int:
    """The record CRC: CRC-32 of the length field followed by ``body``."""
    return crc32(body, crc32(LENGTH.pack(len(body))))


def encode_record(message: Message) -> bytes:
    """Frame ``message`` as one recover record (see the module docstring)."""
    payload, flag = message.payload_and_flag()
    partition = message.partition or Partition(-1, -1)
    offset = -1 if message.offset is None else message.offset
    body = BODY_PREFIX.pack(offset, partition.broker_id, partition.partition)
    body += pack_message(message.id if message.id is not None else -1, flag, payload)
    return RECORD_HEADER.pack(len(body), record_crc(body)) + body


def decode_body(topic: str, body: bytes) -> Message:
    """Rebuild the message of a CRC-checked body.

    Raises:
        InvalidRecordError: the inner record is not exactly one valid message.
    """
    offset, broker_id, partition = BODY_PREFIX.unpack_from(body)
    records = list(iter_messages(body[BODY_PREFIX.size :]))
    if len(records) != 1 or records[0].size != len(body) - BODY_PREFIX.size:
        raise InvalidRecordError("recover record does not hold exactly one message")
    record = records[0]
    located = Record(offset, record.msg_id, record.flag, record.payload)
    return ReceivedMessage.from_record(topic, located, Partition(broker_id, partition))


def read_records(handle: IO[bytes], topic: str, end: int) -> Iterator[tuple[int, bytes, Message]]:
    """Yield ``(position, body, message)`` from the handle's position up to ``end``.

    Stops quietly at the first record that is torn, oversized or fails a check; the caller
    compares the last position reached with ``end`` to detect it.
    """
    position = handle.tell()
    while end - position >= RECORD_HEADER.size:
        length, crc = RECORD_HEADER.unpack(handle.read(RECORD_HEADER.size))
        if not MESSAGE_MIN <= length <= BODY_BYTES_MAX or position + 8 + length > end:
            return
        body = handle.read(length)
        if len(body) != length or record_crc(body) != crc:
            return
        try:
            message = decode_body(topic, body)
        except InvalidRecordError:
            return
        yield position, body, message
        position += RECORD_HEADER.size + length


class RecoverFile:
    """One ``<topic>@<group>`` file.

    Args:
        path: the file (created with its header if missing).
        topic: the topic of every message in it.
        messages_max: the most messages it may hold.

    Raises:
        ClientError: the file exists but does not start with this format's header.
    """

    def __init__(self, path: Path, topic: str, messages_max: int) -> None:
        self.path = path
        self.topic = topic
        self.messages_max = messages_max
        self._lock = threading.Lock()
        self._count, self._end = self._recover()
        self._handle = open(path, "ab")  # noqa: SIM115 - closed by close().

    def __len__(self) -> int:
        with self._lock:
            return self._count

    def append(self, message: Message) -> bool:
        """Append and fsync ``message``; False (with an ERROR log) if the file is full."""
        record = encode_record(message)
        with self._lock:
            if self._count >= self.messages_max:
                log.error("recover store %s is full (%d messages): message %s of %s DROPPED",
                          self.path, self._count, message.id, message.topic)  # fmt: skip
                return False
            self._handle.write(record)
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._count += 1
            self._end += len(record)
        return True

    def pending(self) -> Iterator[StoredMessage]:
        """Yield the messages stored when the call started, oldest first."""
        with self._lock:
            end = self._end
        with open(self.path, "rb") as handle:
            handle.seek(FILE_HEADER.size)
            for position, _body, message in read_records(handle, self.topic, end):
                yield StoredMessage(position, message)

    def remove(self, positions: Iterable[int]) -> None:
        """Drop the records at ``positions`` by rewriting the file atomically."""
        doomed = set(positions)
        if not doomed:
            return
        with self._lock:
            tmp = self.path.with_name(self.path.name + ".tmp")
            kept = 0
            with open(self.path, "rb") as source, open(tmp, "wb") as target:
                target.write(FILE_HEADER.pack(MAGIC, VERSION))
                source.seek(FILE_HEADER.size)
                for position, body, _message in read_records(source, self.topic, self._end):
                    if position not in doomed:  # Copied verbatim: no re-encoding.
                        target.write(RECORD_HEADER.pack(len(body), record_crc(body)) + body)
                        kept += 1
                target.flush()
                os.fsync(target.fileno())
            self._handle.close()
            os.replace(tmp, self.path)
            fsync_directory(self.path.parent)
            self._handle = open(self.path, "ab")  # noqa: SIM115 - closed by close().
            self._count, self._end = kept, self._handle.tell()

    def close(self) -> None:
        """Close the append handle."""
        with self._lock:
            self._handle.close()

    def _recover(self) -> tuple[int, int]:
        """Create or scan the file, truncate a bad tail; return ``(count, valid end)``."""
        header = FILE_HEADER.pack(MAGIC, VERSION)
        with open(self.path, "a+b") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(0)
            start = handle.read(FILE_HEADER.size)
            if size < FILE_HEADER.size and header.startswith(start):
                handle.truncate(0)  # New, or torn while its header was written.
                handle.write(header)
                handle.flush()
                os.fsync(handle.fileno())
                return 0, FILE_HEADER.size
            if start != header:
                raise ClientError(f"{self.path} is not a version-{VERSION} recover file")
            count, end = 0, FILE_HEADER.size
            for position, _body, _message in read_records(handle, self.topic, size):
                count += 1
                end = handle.tell()
                assert end > position
            if end < size:
                log.warning("recover file %s: cut %d bytes of torn or corrupt tail at %d",
                            self.path, size - end, end)  # fmt: skip
                handle.truncate(end)
                os.fsync(handle.fileno())
        return count, end
