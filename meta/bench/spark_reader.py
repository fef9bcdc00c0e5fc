"""CPU per message of the Spark executor's reader, without Spark, and where it goes.

``python -m meta.bench.spark_reader --megabytes 256 --rounds 5`` starts one broker
(``meta.bench.broker.BenchBroker``: temporary data directory, ZooKeeper off, 127.0.0.1),
produces ``--megabytes`` MB of ``--message-bytes`` messages to one partition, then measures,
best of ``--rounds`` (the thread's CPU, ``time.thread_time``, which other load on the
machine skews less than wall time):

* ``read_range``: ``meta.spark.reading.read_range`` over the whole partition from the live
  broker (socket receive, reply parsing, decoding, Arrow batches);
* ``decode``: the same replies, recorded once, decoded and batched the way ``read_range``
  does it (``decode_message_set`` and ``ColumnBuilder``), without the socket;
* ``decode_only``: ``decode_message_set`` alone over the recorded replies;
* ``receive``: the gets of ``read_range`` from the live broker, received but not decoded.

``--only ROW`` measures one of them alone. ``--profile PATH`` also writes a cProfile of one
``decode`` pass to ``PATH``.
``--replay FILE`` skips the broker: it decodes the replies recorded in ``FILE`` (written by
``--record FILE``), which is how ``valgrind --tool=callgrind`` runs it repeatably.

Everything it starts is stopped on exit. Single-threaded.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from meta.bench.load import BenchBroker, PutFrames, run_pipelined
from meta.client.net.connection import BrokerConnection
from meta.protocol.commands import Data, Get
from meta.spark.decoding import ColumnBuilder, decode_message_set
from meta.spark.planning import RangePartition
from meta.spark.reading import BATCH_ROWS_MAX, read_range

TOPIC = "bench-spark-reader"
FETCH_BYTES = 1 << 20
ROWS = ("decode", "decode_only", "receive", "read_range")
_REPLY_LENGTH = struct.Struct("<Q")


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m meta.bench.spark_reader",
        description="CPU per message of the Spark executor's reader (read_range), no Spark.",
    )
    parser.add_argument("--megabytes", type=int, default=256, help="backlog size (MB)")
    parser.add_argument("--message-bytes", type=int, default=1024, help="message body size")
    parser.add_argument("--rounds", type=int, default=5, help="timed passes; the best counts")
    parser.add_argument("--profile", type=Path, help="write a cProfile of one decode pass")
    parser.add_argument("--record", type=Path, help="write the replies to this file")
    parser.add_argument("--replay", type=Path, help="decode the replies of this file only")
    parser.add_argument("--only", choices=ROWS, help="measure this row alone")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    return parser.parse_args(argv)


def record_replies(address: tuple[str, int], end: int) -> list[bytes]:
    """The get replies ``read_range`` receives for ``[0, end)``, as bytes, in order."""
    replies = []
    offset = 0
    with BrokerConnection(*address, timeout_s=30.0) as broker:
        while offset < end:
            get = Get(TOPIC, "bench-reader", 0, offset, FETCH_BYTES, broker.next_opaque())
            reply = broker.request(get)
            if not isinstance(reply, Data):
                break  # 404: caught up
            replies.append(bytes(reply.data))
            offset += decode_message_set(reply.data, offset).used
    return replies


def receive_only(address: tuple[str, int], offsets: list[int]) -> int:
    """The gets of ``read_range`` from each of ``offsets``, received in place as it does,
    not decoded; returns the bytes received."""
    received = 0
    with BrokerConnection(*address, timeout_s=30.0, value_in_place=True) as broker:
        for offset in offsets:
            get = Get(TOPIC, "bench-reader", 0, offset, FETCH_BYTES, broker.next_opaque())
            reply = broker.request(get)
            assert isinstance(reply, Data)
            received += len(reply.data)
    return received


def _used(data: bytes) -> int:
    return decode_message_set(data).used


def decode_batches(replies: list[bytes]) -> Iterator:
    """What ``read_range`` does with each reply: decode it, cut it into batches."""
    builder = ColumnBuilder(TOPIC, 1, 0)
    offset = 0
    for data in replies:
        decoded = decode_message_set(data, offset)
        offset += decoded.used
        first = 0
        while first < len(decoded):
            last = min(len(decoded), first + BATCH_ROWS_MAX - builder.rows)
            builder.add(decoded.slice(first, last))
            first = last
            if builder.rows >= BATCH_ROWS_MAX:
                yield builder.take_batch()
    if builder.rows:
        yield builder.take_batch()


def decode_only(replies: list[bytes]) -> int:
    offset = rows = 0
    for data in replies:
        decoded = decode_message_set(data, offset)
        offset, rows = offset + decoded.used, rows + len(decoded)
    return rows


def best_cpu_us(run: Callable[[], int], rounds: int) -> tuple[float, int]:
    """``(best thread CPU seconds, rows)`` of ``rounds`` calls of ``run``."""
    best, rows = float("inf"), 0
    for _ in range(rounds):
        began = time.thread_time()
        rows = run()
        best = min(best, time.thread_time() - began)
    return best, rows


def measure(replies: list[bytes], args: argparse.Namespace, address=None) -> dict:
    """The rows of the report (see the module docstring)."""
    end = sum(map(_used, replies))
    runs = {
        "decode": lambda: sum(batch.num_rows for batch in decode_batches(replies)),
        "decode_only": lambda: decode_only(replies),
    }
    if address is not None:
        rows = decode_only(replies)
        offsets = list(itertools.accumulate(map(_used, replies[:-1]), initial=0))
        runs["receive"] = lambda: receive_only(address, offsets) and rows
        piece = RangePartition(TOPIC, 1, 0, address[0], address[1], 0, end, 0)
        runs["read_range"] = lambda: sum(
            batch.num_rows for batch in read_range(piece, "bench-reader", FETCH_BYTES, 30.0, True)
        )
    report = {}
    for name, run in runs.items():
        if args.only not in (None, name):
            continue
        run()  # first-use costs (imports, Arrow's type setup) outside the timing
        cpu_s, rows = best_cpu_us(run, args.rounds)
        report[name] = {"messages": rows, "cpu_us_per_msg": round(cpu_s * 1e6 / rows, 3)}
    if args.profile is not None:
        profiler = cProfile.Profile()
        profiler.runcall(runs["decode"])
        profiler.dump_stats(str(args.profile))
    return report


def write_replies(path: Path, replies: list[bytes]) -> None:
    with path.open("wb") as file:
        for data in replies:
            file.write(_REPLY_LENGTH.pack(len(data)))
            file.write(data)


def read_replies(path: Path) -> list[bytes]:
    data, replies, position = path.read_bytes(), [], 0
    while position < len(data):
        (length,) = _REPLY_LENGTH.unpack_from(data, position)
        position += _REPLY_LENGTH.size
        replies.append(data[position : position + length])
        position += length
    return replies


def run(args: argparse.Namespace) -> dict:
    if args.replay is not None:
        return measure(read_replies(args.replay), args)
    with tempfile.TemporaryDirectory(prefix="metaq-bench-spark-reader-") as work:
        with BenchBroker(Path(work), 0, topics={TOPIC: 1}) as broker:
            messages = args.megabytes * 1_000_000 // args.message_bytes
            run_pipelined(broker.address, PutFrames(TOPIC, args.message_bytes), 3600.0, messages)
            replies = record_replies(broker.address, 1 << 62)
            if args.record is not None:
                write_replies(args.record, replies)
            return measure(replies, args, broker.address)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name, row in report.items():
            print(f"{name:12} {row['messages']:>9} messages {row['cpu_us_per_msg']:>7} µs CPU/msg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
