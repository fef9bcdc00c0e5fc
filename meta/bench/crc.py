"""CRC-32 implementations on the project's record sizes: ``zlib``, ``zlib-ng`` and ``isal``.

``python -m meta.bench.crc`` times, in one run, every importable implementation of the
IEEE CRC-32 (``zlib.crc32``, ``zlib_ng.zlib_ng.crc32``, ``isal.isal_zlib.crc32``) the two
ways the project computes it:

* **per record**: one call per record payload, over ``memoryview`` slices of a buffer of
  back-to-back records, as the slave's ``check_records``, the client's consumer check and a
  run of puts do (payloads of ``--sizes`` bytes, 1 KiB being the benchmarks' message);
* **bulk**: one call over a whole buffer (a transaction journal batch, a recover-store
  entry, a fetch of ``--bulk-kib`` KiB).

Figures are CPU time of the calling thread (``time.thread_time``) per MiB of data checked,
the best of ``--rounds`` rounds; the implementations run in turns within each round so
that other load on the machine falls on all of them alike. Every implementation's result is
compared with ``zlib.crc32`` on the same data before it is timed. Single-threaded; prints a
table, or JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import zlib
from collections.abc import Callable

CRC32_FUNCTIONS = (
    ("zlib", "zlib", "crc32"),
    ("zlib-ng", "zlib_ng.zlib_ng", "crc32"),
    ("isal", "isal.isal_zlib", "crc32"),
)
"""(name, module, attribute) of each implementation, the stdlib's first."""
HEADER_BYTES = 20
"""A stored record's header (``meta.protocol.message.HEADER_SIZE``): in the buffer, not
checksummed."""
BUFFER_BYTES = 4 << 20
"""Bytes of records the per-record loop walks per timing (a replay fetch's size)."""

Crc32 = Callable[..., int]


def available() -> dict[str, Crc32]:
    """The importable implementations, by name."""
    functions = {}
    for name, module_name, attribute in CRC32_FUNCTIONS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        functions[name] = getattr(module, attribute)
    return functions


def record_slices(payload_bytes: int) -> tuple[memoryview, list[tuple[int, int]]]:
    """A buffer of back-to-back records and the (start, end) of each payload in it."""
    record_bytes = HEADER_BYTES + payload_bytes
    count = max(1, BUFFER_BYTES // record_bytes)
    buffer = memoryview(os.urandom(count * record_bytes))
    bounds = [
        (index * record_bytes + HEADER_BYTES, (index + 1) * record_bytes) for index in range(count)
    ]
    return buffer, bounds


def time_per_record(crc32: Crc32, buffer: memoryview, bounds: list[tuple[int, int]]) -> float:
    """CPU seconds of one pass of one call per payload (the slave's loop shape)."""
    began = time.thread_time()
    for start, end in bounds:
        crc32(buffer[start:end])
    return time.thread_time() - began


def time_bulk(crc32: Crc32, data: bytes, repeats: int) -> float:
    """CPU seconds of ``repeats`` calls over the whole of ``data``."""
    began = time.thread_time()
    for _ in range(repeats):
        crc32(data)
    return time.thread_time() - began


def check_agreement(functions: dict[str, Crc32], data: bytes) -> None:
    """Every implementation gives ``zlib.crc32``'s value, from scratch and continued.

    Raises:
        AssertionError: one does not (it is not the same CRC-32 and must not be used).
    """
    expected = zlib.crc32(data)
    continued = zlib.crc32(data[7:], zlib.crc32(data[:7]))
    for name, crc32 in functions.items():
        if crc32(data) != expected or crc32(data[7:], crc32(data[:7])) != continued:
            raise AssertionError(f"{name}.crc32 disagrees with zlib.crc32")


def measure(sizes: list[int], bulk_kib: int, rounds: int) -> dict:
    """The best CPU ms per MiB of each implementation, per record size and in bulk."""
    functions = available()
    bulk = os.urandom(bulk_kib << 10)
    check_agreement(functions, bulk)
    mib = 1 << 20
    per_record: dict[int, dict[str, float]] = {}
    for size in sizes:
        buffer, bounds = record_slices(size)
        checked_mib = len(bounds) * size / mib
        best = dict.fromkeys(functions, float("inf"))
        for _ in range(rounds):
            for name, crc32 in functions.items():
                best[name] = min(best[name], time_per_record(crc32, buffer, bounds))
        per_record[size] = {name: seconds * 1000 / checked_mib for name, seconds in best.items()}
    repeats = max(1, (64 << 20) // len(bulk))
    best = dict.fromkeys(functions, float("inf"))
    for _ in range(rounds):
        for name, crc32 in functions.items():
            best[name] = min(best[name], time_bulk(crc32, bulk, repeats))
    bulk_mib = repeats * len(bulk) / mib
    return {
        "implementations": list(functions),
        "per_record_ms_per_mib": {
            str(size): {name: round(ms, 4) for name, ms in row.items()}
            for size, row in per_record.items()
        },
        "bulk_kib": bulk_kib,
        "bulk_ms_per_mib": {name: round(s * 1000 / bulk_mib, 4) for name, s in best.items()},
        "rounds": rounds,
    }


def format_report(report: dict) -> str:
    names = report["implementations"]
    lines = [
        f"CPU ms per MiB checked (best of {report['rounds']} rounds, implementations in turns)",
        f"{'':22}" + "".join(f"{name:>10}" for name in names),
    ]
    for size, row in report["per_record_ms_per_mib"].items():
        label = f"per record, {size} B"
        lines.append(f"{label:22}" + "".join(f"{row[name]:>10.3f}" for name in names))
    label = f"bulk, {report['bulk_kib']} KiB"
    row = report["bulk_ms_per_mib"]
    lines.append(f"{label:22}" + "".join(f"{row[name]:>10.3f}" for name in names))
    return "\n".join(lines)


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m meta.bench.crc",
        description="CRC-32 of zlib, zlib-ng and isal per record and in bulk, in one run.",
    )
    parser.add_argument(
        "--sizes",
        type=lambda text: [int(size) for size in text.split(",")],
        default=[100, 1024, 4096, 16384],
        help="record payload sizes in bytes, comma separated (default 100,1024,4096,16384)",
    )
    parser.add_argument("--bulk-kib", type=int, default=1024, help="bulk buffer size (KiB)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the best is reported")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    report = measure(args.sizes, args.bulk_kib, args.rounds)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
