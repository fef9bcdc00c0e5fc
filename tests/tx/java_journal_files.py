"""Writes Java Metamorphosis transaction journals (zk/client/tx spec §4.4) for tests.

A tiny protobuf writer for the journal's four messages, so tests can build exactly the files
a Java broker leaves: ``redo.<N>`` records, commit attachments and JSON checkpoints.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from meta.protocol.message import CHECKSUM_MASK, checksum

APPEND_MSG, TX_OP = 1, 2
XA_PREPARE, XA_COMMIT, XA_ROLLBACK, LOCAL_COMMIT, LOCAL_ROLLBACK = 1, 2, 3, 4, 5


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    return varint(number << 3 | 2) + varint(len(value)) + value


def record(command_type: int, content: bytes, force: bool = False) -> bytes:
    command = field(1, command_type) + field(2, content) + (field(3, 1) if force else b"")
    return struct.pack(">i", len(command)) + command


def append(tx_key: str, topic: str, partition: int, data: bytes, msg_id: int = 1) -> bytes:
    put = f"put {topic} {partition} {len(data)} 0 {checksum(data)} {tx_key} 1\r\n".encode()
    return record(APPEND_MSG, field(1, msg_id) + field(2, put + data))


def operation(kind: int, tx_key: str, attachment: bytes | None = None) -> bytes:
    content = field(1, kind) + field(2, 1 if kind != XA_PREPARE else 0)
    content += field(3, tx_key.encode())
    if attachment is not None:
        content += field(4, len(attachment))
    body = record(TX_OP, content, force=kind == XA_PREPARE)
    return body + (attachment or b"")


def attachment_entry(topic: str, partition: int, offset: int, batch: bytes) -> bytes:
    desc = f"{topic}-{partition}".encode()
    crc = zlib.crc32(batch) & CHECKSUM_MASK
    return struct.pack(">qiii", offset, len(batch), crc, len(desc)) + desc


def write_journal(directory: Path, files: dict[int, bytes], checkpoint: str = "") -> Path:
    """``directory/transactions`` with ``redo.<N>`` files and an (empty) ``checkpoint.1``."""
    journal = directory / "transactions"
    journal.mkdir(parents=True, exist_ok=True)
    for number, data in files.items():
        (journal / f"redo.{number}").write_bytes(data)
    (journal / "checkpoint.1").write_text(checkpoint)
    return journal
