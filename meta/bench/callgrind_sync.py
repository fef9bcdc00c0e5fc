"""Instructions per put of synchronous replication, counted by callgrind: a samsa master and
its gregor slave, beside a plain broker, under one synchronous producer.

``python -m meta.bench.callgrind_sync`` starts, each under ``valgrind --tool=callgrind
--instr-atstart=no`` (127.0.0.1, ZooKeeper and dashboard off, one topic ``TOPIC`` with one
partition, ``unflushThreshold=--unflush-threshold``, ``--message-bytes`` bodies, the shapes of
``meta.bench.sync_repl``):

* a plain broker: ``--warmup`` synchronous puts, then counting on (``callgrind_control -z``,
  ``-i on``), ``--messages`` puts, counting off and a dump;
* then a gregor slave and a samsa master replicating to it: once the master has compared
  itself with the slave, ``--warmup`` puts to the master, counting on in both processes,
  ``--messages`` puts, counting off and a dump of each.

One row per process: ``plain``, ``master`` and ``slave``, each with its instructions per put.
Instructions are user space only (the kernel's work is not counted) and repeat to within
about 1% from run to run whatever else the machine runs, so they compare two versions or
two builds where rates and CPU seconds cannot. ``--no-plain`` skips the plain broker.

Every wait is bounded (the starts, the puts, the exits) and every process it starts is
stopped (``BenchBroker.stop``). Every broker runs with ``PYTHONHASHSEED`` fixed, as in
``meta.bench.callgrind`` (why: its module doc). Needs ``valgrind`` and ``callgrind_control``
on the PATH.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from meta.bench.broker import BenchBroker, report_in_work_directory
from meta.bench.callgrind import START_TIMEOUT_S, check_counts, control, dump_totals
from meta.bench.callgrind import launcher as callgrind_launcher
from meta.bench.load import PutFrames, run_sync
from meta.bench.sync_repl import GregorBenchBroker, SamsaBenchBroker, wait_replicating

TOPIC = "bench-callgrind-sync"
PUTS_TIMEOUT_S = 3600.0
ROLES = ("plain", "master", "slave")


def launcher(directory: Path) -> tuple[str, ...]:
    """valgrind's command line for a broker in ``directory``, counting off at start, with
    ``meta.bench.callgrind``'s fixed ``PYTHONHASHSEED``."""
    return callgrind_launcher(directory / "callgrind.out")


def count_puts(target: BenchBroker, counted: list[BenchBroker], frames: PutFrames, args) -> list:
    """Warm ``target`` up, then count the ``counted`` processes over ``args.messages``
    synchronous puts to ``target``; returns (puts answered, instructions) per process."""
    run_sync(target.address, frames, PUTS_TIMEOUT_S, args.warmup)
    for broker in counted:
        assert broker.process is not None  # started
        control(broker.process.pid, "-z")
        control(broker.process.pid, "-i", "on")
    answered = run_sync(target.address, frames, PUTS_TIMEOUT_S, args.messages)["messages"]
    totals = []
    for broker in counted:
        assert broker.process is not None
        control(broker.process.pid, "-i", "off")
        control(broker.process.pid, "-d", "puts")
        totals.append((answered, dump_totals(broker.directory / "callgrind.out.1")))
    return totals


def measure(args: argparse.Namespace, work: Path) -> list[dict]:
    """The rows of the module doc: a plain broker (unless ``--no-plain``), then the pair."""
    frames = PutFrames(TOPIC, args.message_bytes)
    settings = {"threshold": args.unflush_threshold, "topics": {TOPIC: 1}}
    brokers: dict[str, BenchBroker] = {}
    if args.plain:
        brokers["plain"] = BenchBroker(work / "plain", **settings)
    brokers["slave"] = GregorBenchBroker(work / "slave", **settings)
    brokers["master"] = SamsaBenchBroker(work / "master", **settings)
    for broker in brokers.values():
        broker.directory.mkdir(parents=True)
        broker.launcher = launcher(broker.directory)
        broker.start_timeout_s = START_TIMEOUT_S
    counts: dict[str, tuple[int, int]] = {}
    started: list[BenchBroker] = []
    try:
        if args.plain:
            plain = brokers["plain"]
            started.append(plain.start())
            (counts["plain"],) = count_puts(plain, [plain], frames, args)
            plain.stop()
        slave, master = brokers["slave"], brokers["master"]
        started.append(slave.start())
        assert isinstance(master, SamsaBenchBroker)
        master.slave_port = slave.port
        started.append(master.start())
        wait_replicating(master.address, START_TIMEOUT_S)
        counts["master"], counts["slave"] = count_puts(master, [master, slave], frames, args)
    finally:
        for broker in reversed(started):
            broker.stop()
    return [row(role, *counts[role], args) for role in ROLES if role in counts]


def row(role: str, messages: int, instructions: int, args: argparse.Namespace) -> dict:
    return {
        "process": role,
        "threshold": args.unflush_threshold,
        "message_bytes": args.message_bytes,
        "messages": messages,
        "instructions": instructions,
        "instructions_per_message": instructions / max(messages, 1),
    }


def format_rows(rows: list[dict]) -> str:
    """One line per process, and the replicated pair's sum against the plain broker."""
    lines = [
        f"{row['process']:<7} unflushThreshold={row['threshold']:<5} {row['messages']:>7} puts "
        f"{row['instructions_per_message']:>10.0f} instructions per put"
        for row in rows
    ]
    per_put = {row["process"]: row["instructions_per_message"] for row in rows}
    if "plain" in per_put and "master" in per_put:
        pair = per_put["master"] + per_put["slave"]
        lines.append(f"master + slave {pair:.0f}: {pair / per_put['plain']:.2f} plain puts")
    return "\n".join(lines)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m meta.bench.callgrind_sync",
        description="Count a samsa master's and its gregor slave's instructions per "
        "synchronous put (callgrind), beside a plain broker's.",
    )
    add = parser.add_argument
    add("--unflush-threshold", type=int, default=1000, help="flush mode of every broker")
    add("--messages", type=int, default=2000, help="puts counted")
    add("--warmup", type=int, default=300, help="puts before counting")
    add("--message-bytes", type=int, default=128, help="body size of every put")
    add("--no-plain", dest="plain", action="store_false", help="skip the plain broker")
    add("--json", action="store_true", help="print the rows as JSON")
    add("--keep", action="store_true", help="keep the work directory (dumps, broker logs)")
    arguments = parser.parse_args(argv)
    check_counts(parser, arguments, ("messages", "warmup", "message_bytes"), "unflush_threshold")
    return arguments


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    return report_in_work_directory(arguments, "metaq-callgrind-sync-", measure, format_rows)


if __name__ == "__main__":
    sys.exit(main())
