"""Checkpoints of the transaction journal: ``checkpoint.<N>`` files, written atomically.

A checkpoint names the journal location replay starts from: the first record of the oldest
transaction still open (in flight, prepared, committing, or kept for an operator's heuristic
decision), or the end of the journal when none is. Format (docs/formats.md), ASCII::

    1\\n                        format version
    <file number> <position>\\n
    <crc>\\n                    CRC-32 (zlib) of the two lines above, decimal

Writing (STYLE 9, docs/formats.md §6.2): ``checkpoint.<N>.tmp`` is written and fsynced, renamed to
``checkpoint.<N>``, then the directory is fsynced; the oldest files beyond ``keep`` are
deleted. Reading takes the highest-numbered file that parses and checks; a damaged one is
logged and the next older one is used.

Thread affinity: none of its own; the journal calls it on the reactor thread (a checkpoint is
a few dozen bytes and at most one per ``checkpointInterval``).
"""

from __future__ import annotations

import logging
import os

from meta.protocol.crc import crc32
from meta.store.files import Files, read_small_file, replace_file
from meta.tx.journal_location import JournalLocation

logger = logging.getLogger("meta.tx")

PREFIX = "checkpoint."
VERSION = 1


def checkpoint_numbers(files: Files, directory: str) -> list[int]:
    """The numbers N of the ``checkpoint.<N>`` files in ``directory``, ascending."""
    numbers = []
    for name in files.listdir(directory):
        suffix = name[len(PREFIX) :]
        if name.startswith(PREFIX) and suffix.isdigit():
            numbers.append(int(suffix))
    return sorted(numbers)


def encode_checkpoint(location: JournalLocation) -> bytes:
    """The bytes of a checkpoint file naming ``location``."""
    lines = f"{VERSION}\n{location.number} {location.position}\n".encode()
    return lines + b"%d\n" % crc32(lines)


def decode_checkpoint(data: bytes) -> JournalLocation:
    """Parse a checkpoint file.

    Raises:
        ValueError: wrong version, bad CRC, or not the expected three lines.
    """
    lines = data.split(b"\n")
    if len(lines) != 4 or lines[3] != b"":
        raise ValueError("expected three lines")
    body = lines[0] + b"\n" + lines[1] + b"\n"
    if int(lines[2]) != crc32(body):
        raise ValueError("CRC mismatch")
    if int(lines[0]) != VERSION:
        raise ValueError(f"unknown checkpoint version {lines[0]!r}")
    number, position = (int(field) for field in lines[1].split(b" "))
    if number < 1 or position < 0:
        raise ValueError(f"impossible location {number} {position}")
    return JournalLocation(number, position)


def read_latest(files: Files, directory: str) -> tuple[int, JournalLocation | None]:
    """Return the highest checkpoint number and the newest valid location (None if none)."""
    for name in files.listdir(directory):
        if name.startswith(PREFIX) and name.endswith(".tmp"):
            files.remove(os.path.join(directory, name))  # a write a crash interrupted
    numbers = checkpoint_numbers(files, directory)
    for number in reversed(numbers):
        path = os.path.join(directory, f"{PREFIX}{number}")
        try:
            return numbers[-1], decode_checkpoint(read_small_file(files, path, 4096))
        except (OSError, ValueError) as error:
            logger.error("ignoring damaged checkpoint %s: %s", path, error)
    return (numbers[-1] if numbers else 0), None


def write_checkpoint(
    files: Files, directory: str, number: int, location: JournalLocation, keep: int
) -> None:
    """Write ``checkpoint.<number>`` atomically, then delete all but the newest ``keep``.

    Raises:
        OSError: the checkpoint could not be written; the previous ones are untouched.
    """
    assert keep >= 1
    path = os.path.join(directory, f"{PREFIX}{number}")
    replace_file(files, path, encode_checkpoint(location))
    for old in checkpoint_numbers(files, directory)[:-keep]:
        files.remove(os.path.join(directory, f"{PREFIX}{old}"))
