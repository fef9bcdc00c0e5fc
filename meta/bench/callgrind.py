"""Broker instructions per message, counted by callgrind, for the client shapes of ``tools/bench``.

``python -m meta.bench.callgrind --threshold 1000 --shapes sync,concurrent,unbatched``
starts one broker under ``valgrind --tool=callgrind --instr-atstart=no`` (temporary data dir,
ZooKeeper and dashboard off, 127.0.0.1), and for each shape: puts a warm-up of
``--warmup`` messages, switches counting on (``callgrind_control -z``, ``-i on``), puts
``--messages`` messages with that shape, switches counting off and dumps, then reads the
dump's ``totals:`` line. Instructions are user space only (the kernel's work is not counted)
and, unlike seconds and CPU time on a shared machine, repeat to within about 1% between
runs, so they compare two builds of the broker where rates cannot. The broker runs with
``PYTHONHASHSEED`` fixed (``HASH_SEED``): CPython's type attribute cache is indexed by the
hashes of attribute names, which are randomised per process, so with a random seed the same
build's count moved by up to about 2% between runs as names collided in the cache or not.

Shapes (the client is ``meta.bench.load``'s, 1 KB puts on one partition): ``sync`` (one
connection, one put at a time), ``concurrent`` (``--connections`` connections of this
process, one put in flight on each), ``unbatched`` (one connection, 1000 in flight, each put
its own ``send``) and ``pipelined`` (the same window written in batches). Under valgrind the
broker is slow, so the last two see many puts per read.

Every wait is bounded (the broker's start, each shape, the broker's exit); the broker is
always stopped. Needs ``valgrind`` and ``callgrind_control`` on the PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from meta.bench.broker import free_port, server_ini, wait_until_answering
from meta.bench.load import (
    REPLY_TIMEOUT_S,
    BenchError,
    PutFrames,
    connect,
    receive_into,
    run_pipelined,
    run_sync,
    run_unbatched,
    take_replies,
)
from meta.protocol.codec import Decoder

SHAPES = ("sync", "concurrent", "unbatched", "pipelined")
START_TIMEOUT_S = 300.0  # a broker under valgrind starts in tens of seconds
STOP_TIMEOUT_S = 300.0  # and writes its dump on the way out
SHAPE_TIMEOUT_S = 3600.0
WINDOW = 1000
HASH_SEED = "0"  # PYTHONHASHSEED of every broker counted (see the module doc)


def launcher(out: Path) -> tuple[str, ...]:
    """The command a counted broker's interpreter runs under: ``valgrind`` writing its dumps
    to ``out`` (``out.1``, ``out.2``, ...), counting off at start, with ``HASH_SEED``."""
    valgrind = ("valgrind", "--tool=callgrind", "--instr-atstart=no")
    return ("env", f"PYTHONHASHSEED={HASH_SEED}", *valgrind, f"--callgrind-out-file={out}")


def run_concurrent(address: tuple[str, int], frames: PutFrames, connections: int, total: int):
    """``connections`` sockets, one put in flight on each, ``total`` puts; returns the count."""
    sockets = [connect(address) for _ in range(connections)]
    selector = selectors.DefaultSelector()
    decoders = {sock.fileno(): Decoder() for sock in sockets}
    outstanding: dict[int, set[int]] = {sock.fileno(): set() for sock in sockets}
    sent = answered = 0
    try:
        for sock in sockets[:total]:
            sent += 1
            outstanding[sock.fileno()].add(sent)
            sock.sendall(frames.header(sent) + frames.body)
            selector.register(sock, selectors.EVENT_READ)
        while answered < sent:
            ready = selector.select(REPLY_TIMEOUT_S)
            if not ready:
                raise BenchError(f"no reply for {REPLY_TIMEOUT_S} s")
            for key, _events in ready:
                sock, fd = key.fileobj, key.fd
                receive_into(sock, decoders[fd])
                answered += take_replies(decoders[fd], outstanding[fd])
                if not outstanding[fd] and sent < total:
                    sent += 1
                    outstanding[fd].add(sent)
                    sock.sendall(frames.header(sent) + frames.body)
    finally:
        selector.close()
        for sock in sockets:
            sock.close()
    return answered


def run_shape(shape: str, address: tuple[str, int], count: int, connections: int) -> int:
    """Put ``count`` messages with ``shape``; return how many were answered 200."""
    frames = PutFrames(f"bench-{shape}", 1024)
    if shape == "sync":
        return run_sync(address, frames, SHAPE_TIMEOUT_S, count)["messages"]
    if shape == "concurrent":
        return run_concurrent(address, frames, connections, count)
    run = run_unbatched if shape == "unbatched" else run_pipelined
    return run(address, frames, SHAPE_TIMEOUT_S, count, WINDOW)["messages"]


def dump_totals(path: Path) -> int:
    """The ``totals:`` (instructions) of one callgrind dump."""
    for line in path.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise BenchError(f"no totals in {path}")


def control(pid: int, *arguments: str) -> None:
    subprocess.run(["callgrind_control", *arguments, str(pid)], check=True, capture_output=True)


def measure(arguments: argparse.Namespace, work: Path) -> list[dict]:
    """One broker under callgrind; a row per shape (see the module doc)."""
    (work / "data").mkdir()
    port = free_port()
    ini = server_ini(port, work / "data", arguments.threshold, 10000)
    (work / "server.ini").write_text(ini.replace("dashboardHttpPort=0", "dashboardHttpPort=-1"))
    out = work / "callgrind.out"
    command = [*launcher(out), sys.executable, "-m", "meta.server"]
    command += ["-f", str(work / "server.ini")]
    with open(work / "broker.log", "wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=work, start_new_session=True
        )
    rows = []
    try:
        address = ("127.0.0.1", port)
        wait_until_answering(address, START_TIMEOUT_S, lambda: process.poll() is None)
        for index, shape in enumerate(arguments.shapes, 1):
            run_shape(shape, address, arguments.warmup, arguments.connections)
            control(process.pid, "-z")
            control(process.pid, "-i", "on")
            count = run_shape(shape, address, arguments.messages, arguments.connections)
            control(process.pid, "-i", "off")
            control(process.pid, "-d", shape)
            instructions = dump_totals(Path(f"{out}.{index}"))
            rows.append(
                {
                    "shape": shape,
                    "threshold": arguments.threshold,
                    "messages": count,
                    "instructions": instructions,
                    "instructions_per_message": instructions / max(count, 1),
                }
            )
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(STOP_TIMEOUT_S)
    return rows


def shape_list(text: str) -> list[str]:
    shapes = [item.strip() for item in text.split(",") if item.strip()]
    if not shapes or any(shape not in SHAPES for shape in shapes):
        raise argparse.ArgumentTypeError(f"expected a comma list of {', '.join(SHAPES)}")
    return shapes


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m meta.bench.callgrind",
        description="Count the broker's instructions per message (callgrind) for client shapes.",
    )
    add = parser.add_argument
    add("--threshold", type=int, default=1000, help="unflushThreshold (0: group commit)")
    add("--shapes", type=shape_list, default=list(SHAPES), help="comma list of shapes")
    add("--messages", type=int, default=2000, help="messages counted per shape")
    add("--warmup", type=int, default=300, help="messages put before counting")
    add("--connections", type=int, default=64, help="connections of the concurrent shape")
    add("--json", action="store_true", help="print the rows as JSON")
    add("--keep", action="store_true", help="keep the work directory (dumps, broker log)")
    arguments = parser.parse_args(argv)
    check_counts(parser, arguments, ("messages", "warmup", "connections"), "threshold")
    return arguments


def check_counts(
    parser: argparse.ArgumentParser,
    arguments: argparse.Namespace,
    positive: tuple[str, ...],
    threshold: str,
) -> None:
    """Exit through ``parser.error`` unless every option named in ``positive`` is above 0 and
    the flush-mode option ``threshold`` is 0 or more (names as ``arguments`` holds them)."""
    for key in positive:
        if getattr(arguments, key) <= 0:
            parser.error(f"--{key.replace('_', '-')} must be positive")
    if getattr(arguments, threshold) < 0:
        parser.error(f"--{threshold.replace('_', '-')} must be 0 or more")


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    work = Path(tempfile.mkdtemp(prefix="metaq-callgrind-"))
    try:
        rows = measure(arguments, work)
    finally:
        if not arguments.keep:
            shutil.rmtree(work, ignore_errors=True)
    if arguments.json:
        print(json.dumps(rows, indent=2))
    for row in rows if not arguments.json else []:
        print(
            f"{row['shape']:<11} unflushThreshold={row['threshold']:<5} {row['messages']:>7} "
            f"messages {row['instructions_per_message']:>10.0f} instructions per message"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
