"""``meta-admin verify DIR [TOPIC-N ...]``: check every record of a data directory, offline.

The broker's own checks, run by hand: every segment file of every partition directory under
``DIR`` (or only the partitions named) is read record by record with
``meta.store.integrity.SegmentScan``, the scan of start-up recovery and of the background
scrubber (framing, CRC, the zero-header rule), and each corrupt range is printed with its
file and position. The segment chain is checked too (each file must end where the next one
starts). A bad range that start-up recovery cuts (``meta.store.segment.cuts``: one after the
partition's recovery point in ``DIR``'s ``recovery-point-offset-checkpoint``, or without one a
bad range at the end of the last segment with no valid record after it) is a torn end: it is
reported as a note and does not count as corruption.

Exit status: 0 when nothing is corrupt, 1 when something is (or a named partition does not
exist), 2 when ``DIR`` cannot be read. It reads only, takes no lock, and may run beside a
broker (the end of a segment being written may then show as a tail). Memory is bounded by
the scan's chunk. Single-threaded.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from meta.admin.client import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from meta.admin.output import to_json
from meta.errors import StoreError
from meta.store.files import Files
from meta.store.integrity import SegmentScan, file_reader
from meta.store.recovery_point import read_points
from meta.store.segment import SEGMENT_SUFFIX, cuts, parse_segment_name


@dataclass(frozen=True)
class Problem:
    """One bad range, or a break in the segment chain, as the command reports it."""

    partition: str
    path: str
    position: int
    offset: int
    resume_position: int
    resume_offset: int
    reason: str
    kind: str  # "corrupt", "tail" (recovery cuts it) or "chain"


@dataclass
class Report:
    partitions: int = 0
    segments: int = 0
    bytes_checked: int = 0
    records: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def corrupt(self) -> list[Problem]:
        return [problem for problem in self.problems if problem.kind != "tail"]


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``verify``."""
    del connection  # Offline: the data directory only.
    command = commands.add_parser(
        "verify",
        help="check every record of a data directory (CRC and framing), offline",
        description="Read every segment file under DIR (a broker's dataPath), or only the "
        "partitions TOPIC-N named, and check each record as the broker does: its header, its "
        "length, its CRC, and that it is not zeroed bytes. Print each corrupt range with its "
        "file and position and where valid records resume, then a summary. A bad range the "
        "broker cuts at start-up (after the partition's recovery point, or a torn or zeroed "
        "tail) is shown as a note. Read-only: run it on a stopped broker for a steady answer.",
        epilog="Here 1 means corruption was found (or a named partition does not exist). "
        "What to do about a corrupt range: docs/operations.md, Corrupt data.",
    )
    command.add_argument("directory", metavar="DIR", help="the broker's dataPath")
    command.add_argument(
        "partitions", metavar="TOPIC-N", nargs="*", help="only these partitions, e.g. orders-0"
    )
    command.add_argument("--json", action="store_true", help="print the result as JSON")
    command.set_defaults(run=run_verify, open_session=lambda _arguments: contextlib.nullcontext())


def run_verify(arguments: argparse.Namespace, _session: None) -> int:
    report = Report()
    if not os.path.isdir(arguments.directory):
        print(f"meta-admin: {arguments.directory} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    try:
        directories = partition_directories(arguments.directory, arguments.partitions)
    except FileNotFoundError as error:
        print(f"meta-admin: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except OSError as error:
        print(f"meta-admin: cannot read {arguments.directory}: {error}", file=sys.stderr)
        return EXIT_USAGE
    points = read_points(Files(), arguments.directory) or {}
    try:
        for name, directory in directories:
            verify_partition(name, directory, report, points.get(name))
    except (OSError, StoreError) as error:
        print(f"meta-admin: {error}", file=sys.stderr)
        return EXIT_USAGE
    if arguments.json:
        print(to_json(report_document(report)))
    else:
        print_report(report)
    return EXIT_REFUSED if report.corrupt else EXIT_OK


def partition_directories(root: str, names: list[str]) -> list[tuple[str, str]]:
    """``(TOPIC-N, path)`` of the partitions to check, sorted by name.

    Raises:
        FileNotFoundError: a named partition is not a directory under ``root``.
        OSError: ``root`` cannot be listed.
    """
    if names:
        found = []
        for name in names:
            path = os.path.join(root, name)
            if not os.path.isdir(path):
                raise FileNotFoundError(f"{path} is not a partition directory")
            found.append((name, path))
        return sorted(found)
    found = []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        _topic, dash, number = name.rpartition("-")
        if dash and number.isascii() and number.isdigit() and os.path.isdir(path):
            found.append((name, path))
    return sorted(found)


def segment_files(directory: str) -> list[tuple[int, str]]:
    """``(start, path)`` of the partition's segment files, sorted by start."""
    found = []
    for name in os.listdir(directory):
        if name.endswith(SEGMENT_SUFFIX):
            start = parse_segment_name(name)
            assert start is not None
            found.append((start, os.path.join(directory, name)))
    return sorted(found)


def verify_partition(name: str, directory: str, report: Report, point: int | None = None) -> None:
    """Scan every segment file of one partition into ``report`` (``point``: its recovery
    point, which tells a torn end from corruption as start-up recovery does; None: none)."""
    report.partitions += 1
    files = segment_files(directory)
    expected_start = None
    for index, (start, path) in enumerate(files):
        size = os.path.getsize(path)
        if expected_start is not None and start != expected_start:
            reason = (
                f"the previous segment ends at offset {expected_start}, this one starts at {start}"
            )
            report.problems.append(Problem(name, path, 0, start, 0, start, reason, "chain"))
        expected_start = start + size
        last = index == len(files) - 1
        fd = os.open(path, os.O_RDONLY)
        try:
            scan = SegmentScan(file_reader(fd), size).run()
        finally:
            os.close(fd)
        report.segments += 1
        report.bytes_checked += size
        report.records += scan.records
        for finding in scan.findings:
            local = None if point is None else point - start
            kind = "tail" if cuts(finding, local, last) else "corrupt"
            report.problems.append(
                Problem(
                    name,
                    path,
                    finding.position,
                    start + finding.position,
                    finding.resume,
                    start + finding.resume,
                    finding.reason,
                    kind,
                )
            )


def print_report(report: Report) -> None:
    for problem in report.problems:
        if problem.kind == "chain":
            print(f"BROKEN CHAIN {problem.partition} {problem.path}: {problem.reason}")
            continue
        label = "CORRUPT" if problem.kind == "corrupt" else "TORN TAIL"
        then = (
            "start-up recovery cuts it"
            if problem.kind == "tail"
            else f"valid records resume at position {problem.resume_position} "
            f"(offset {problem.resume_offset})"
        )
        print(
            f"{label} {problem.partition} {problem.path} position {problem.position} "
            f"(offset {problem.offset}): {problem.reason}; {then}"
        )
    corrupt = report.corrupt
    bad_bytes = sum(p.resume_offset - p.offset for p in corrupt if p.kind == "corrupt")
    tails = len(report.problems) - len(corrupt)
    print(
        f"checked {_count(report.partitions, 'partition')}, "
        f"{_count(report.segments, 'segment file')}, {_count(report.bytes_checked, 'byte')}, "
        f"{_count(report.records, 'valid record')}: {_count(len(corrupt), 'corrupt range')} "
        f"({_count(bad_bytes, 'byte')}), {_count(tails, 'torn tail')}"
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def report_document(report: Report) -> dict[str, Any]:
    corrupt = report.corrupt
    return {
        "partitions": report.partitions,
        "segments": report.segments,
        "bytes_checked": report.bytes_checked,
        "records": report.records,
        "corrupt_ranges": len(corrupt),
        "problems": [asdict(problem) for problem in report.problems],
    }
