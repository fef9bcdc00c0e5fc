"""``meta-admin truncate-partition DIR TOPIC-N --end OFFSET``: drop a partition's tail offline.

When a disk fails under a broker (it turns read-only), the broker answers 500 to the puts it
could not make durable and cuts them from its files; if the disk refuses even that cut, it
records the cut (``meta.store.pending_truncation``) and makes it at its next start by itself.
Only when no place took that record either does it log ``a restart may serve records of
offsets E to W that were not acknowledged``: those records may have reached the disk all the
same. This command removes them before the broker starts again, so that what consumers read
is exactly what was acknowledged: it cuts the partition's segment files back to offset ``E``
as the broker itself would have (later segment files removed, the segment holding ``E``
truncated, both fsynced; ``pending_truncation.cut_partition_files``). Without ``--end`` it
takes the end of the partition's pending truncation record (in the partition directory or
``DIR/.pending_truncations``), so it shows the cut the next start will make.

It runs on a stopped broker's data directory (it takes the directory's lock, so it refuses
while a broker holds it), changes nothing without ``--execute``, and refuses an offset that is
not the start of a record or lies before the partition's first offset.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from dataclasses import dataclass

from meta.admin.client import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from meta.admin.output import to_json
from meta.admin.record_starts import nearest_starts, nearest_starts_text
from meta.errors import StoreError
from meta.protocol.message import HEADER, HEADER_SIZE
from meta.store.files import Files
from meta.store.lock import DataPathLock
from meta.store.pending_truncation import PendingTruncations, cut_partition_files
from meta.store.segment import SEGMENT_SUFFIX, parse_segment_name


class Refused(Exception):
    """The cut cannot be made as asked; the text says why."""


@dataclass(frozen=True)
class SegmentFile:
    start: int
    path: str
    size: int


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``truncate-partition``."""
    del connection  # Offline: the data directory only.
    command = commands.add_parser(
        "truncate-partition",
        help="cut a stopped broker's partition back to an offset (after a disk failure)",
        description="Cut the segment files of DIR/TOPIC-N back to offset --end: the records at "
        "--end and after are removed. Use it when a broker logged 'a restart may serve records "
        "of offsets E to W that were not acknowledged' (its disk refused the cut): run it with "
        "--end E before starting the broker again, and consumers read exactly the "
        "acknowledged records. Without --execute it only says what it would cut. A partition "
        "that ends at --end or before it is left as it is. It refuses while a broker holds DIR.",
        epilog="Refused (exit 1): an offset that is not the start of a record or lies before "
        "the partition, a DIR/TOPIC-N that is not a partition, a DIR it cannot lock (a broker "
        "holds it).",
    )
    command.add_argument("directory", metavar="DIR", help="the broker's dataPath")
    command.add_argument("partition", metavar="TOPIC-N", help="the partition, e.g. orders-0")
    command.add_argument(
        "--end",
        type=int,
        metavar="OFFSET",
        help="the first offset to remove (default: the partition's pending truncation record)",
    )
    command.add_argument("--execute", action="store_true", help="cut (default: only report)")
    command.add_argument("--json", action="store_true", help="print the result as JSON")
    command.set_defaults(run=run_truncate, open_session=lambda _arguments: contextlib.nullcontext())


def run_truncate(arguments: argparse.Namespace, _session: None) -> int:
    directory = os.path.join(arguments.directory, arguments.partition)
    try:
        segments = segment_files(directory)
        records = pending_records(arguments.directory, arguments.partition)
        end = arguments.end if arguments.end is not None else recorded_end(records, directory)
        check_boundary(segments, end)
        partition_end = segments[-1].start + segments[-1].size
        document = {
            "partition": directory,
            "end": end,
            "partition_end": partition_end,
            "bytes_cut": max(partition_end - end, 0),
            "files_removed": [s.path for s in segments if s.start > end],
            "pending_records": [path for path, _end in records],
        }
        if arguments.execute and document["bytes_cut"]:
            cut(arguments.directory, directory, end)
    except Refused as error:
        print(f"meta-admin: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except (StoreError, OSError) as error:
        print(f"meta-admin: {error}", file=sys.stderr)
        return EXIT_USAGE
    document["action"] = "cut" if arguments.execute and document["bytes_cut"] else "none"
    if arguments.json:
        print(to_json(document))
    elif not document["bytes_cut"]:
        print(f"{directory} ends at {document['partition_end']}, not after {end}: nothing to cut")
    else:
        verb = "cut" if arguments.execute else "would cut"
        removed = "".join(f"; remove {path}" for path in document["files_removed"])
        then = "" if arguments.execute else " (run again with --execute to cut)"
        print(
            f"{verb} {document['bytes_cut']} bytes of {directory} from offset {end}{removed}{then}"
        )
    return EXIT_OK


def pending_records(root: str, partition: str) -> list[tuple[str, int]]:
    """(path, end) of the partition's pending truncation records in the partition directory
    and in ``root``'s ``.pending_truncations`` (records in other roots are not looked for)."""
    truncations = PendingTruncations(Files(), [root])
    directory = os.path.join(root, partition)
    return [(path, end) for _folder, path, end in truncations.found(directory, partition)]


def recorded_end(records: list[tuple[str, int]], directory: str) -> int:
    """The end a cut without ``--end`` goes back to: the records' (the lowest)."""
    if not records:
        raise Refused(f"{directory} has no pending truncation record: give --end")
    return min(end for _path, end in records)


def segment_files(directory: str) -> list[SegmentFile]:
    """The partition's segment files, sorted by start offset."""
    if not os.path.isdir(directory):
        raise Refused(f"{directory} is not a partition directory")
    found = []
    for name in os.listdir(directory):
        start = parse_segment_name(name) if name.endswith(SEGMENT_SUFFIX) else None
        if start is not None:
            path = os.path.join(directory, name)
            found.append(SegmentFile(start, path, os.path.getsize(path)))
    if not found:
        raise Refused(f"{directory} holds no segment file")
    return sorted(found, key=lambda segment: segment.start)


def check_boundary(segments: list[SegmentFile], end: int) -> None:
    """Raise ``Refused`` unless ``end`` lies in the partition and starts a record (or ends it)."""
    first, last = segments[0], segments[-1]
    if end < first.start:
        raise Refused(f"offset {end} is before the partition's first offset {first.start}")
    if end >= last.start + last.size:
        return  # nothing at or after ``end``: nothing to cut
    holding = [segment for segment in segments if segment.start <= end][-1]
    starts = [holding.start + b for b in record_boundaries(holding.path, end - holding.start)]
    if end in starts:
        return
    before, after = nearest_starts(starts, end)
    raise Refused(
        f"offset {end} is not the start of a record of {holding.path}; "
        f"{nearest_starts_text(before, after)}"
    )


def record_boundaries(path: str, limit: int):
    """Yield the file positions where records start, from 0 up to ``limit`` or the first
    position past it, reading headers only; stop at a torn or negative header."""
    with open(path, "rb") as file:
        position = 0
        while True:
            yield position
            if position >= limit:
                return
            file.seek(position)
            header = file.read(HEADER_SIZE)
            length = HEADER.unpack(header)[0] if len(header) == HEADER_SIZE else -1
            if length < 0:
                return
            position += HEADER_SIZE + length


def cut(root: str, directory: str, end: int) -> None:
    """Cut ``directory``'s segments back to ``end`` under the data directory's lock."""
    lock = DataPathLock()
    try:
        lock.acquire([root])
    except StoreError as error:
        raise Refused(str(error)) from None  # No cut without the lock: a broker may hold it.
    try:
        cut_partition_files(Files(), directory, end, durable=False)
    finally:
        lock.release()
