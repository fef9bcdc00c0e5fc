"""Benchmark of synchronous replication: a samsa master and its gregor slave against a plain
broker, in turns on the same machine.

``python -m meta.bench.sync_repl`` starts three broker processes (127.0.0.1, ZooKeeper off,
one topic ``TOPIC`` with one partition, ``unflushThreshold=--unflush-threshold`` on all
three, group commit by default): a plain broker, a gregor slave (``--gregor``) and a samsa
master replicating to it (``--samsa``). Then, ``--rounds`` times, each scenario runs for
``--duration-s`` on the plain broker and then on the master:

* ``pipelined``: one connection with ``--window`` puts unanswered
  (``meta.bench.load.run_pipelined``); target: the replicated rate at least
  ``PIPELINED_TARGET`` of the plain one;
* ``sync``: one synchronous producer (``run_sync``); target ``SYNC_TARGET`` of the plain rate;
* ``latency``: puts at ``--rate`` messages/s on one connection, open loop (each leaves on
  schedule whether or not earlier ones were answered, ``meta.bench.open_loop``), timed from
  the scheduled send to the reply; target: the replicated p99 at most ``LATENCY_TARGET``
  times the plain p99.

Beside each rate, the CPU time (user + system, from ``/proc``) each broker process spent
per message during its turns: the plain broker's, the master's and the slave's. CPU time is
less skewed by other load on the machine than the rates. Rates sum the messages and seconds
of every round; the JSON also gives each round's rate (``rounds_msg_per_s``).
``--slave-python-path`` runs the slave from another checkout (for example to compare
versions); ``--profile-master`` and ``--profile-slave`` run that broker under cProfile (its
CPU figures then include the profiler's cost). Everything it starts is stopped on exit; the
temporary directory is removed unless ``--keep``. Output: a table, or JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from meta.bench.broker import REPO, BenchBroker, BenchError, report_in_work_directory
from meta.bench.load import PutFrames, run_pipelined, run_sync
from meta.bench.open_loop import run_open_latency
from meta.bench.slave_lag import percentile
from meta.client.net.connection import BrokerConnection
from meta.protocol.commands import Stats

TOPIC = "bench-sync-repl"
PIPELINED_TARGET = 0.4
SYNC_TARGET = 0.4
LATENCY_TARGET = 3.0
SLAVE_TIMEOUT_MS = 5000
REPLICATING_TIMEOUT_S = 30.0
LATENCY_RATE = 5000.0
"""Messages per second of the latency scenario (its p99 is compared at this rate)."""


@dataclass
class SamsaBenchBroker(BenchBroker):
    """A samsa master replicating to ``slave_port`` on 127.0.0.1."""

    slave_port: int = 0

    def extra_arguments(self) -> list[str]:
        properties = self.directory / "samsa_master.properties"
        properties.write_text(
            f"slave=127.0.0.1:{self.slave_port}\nsendToSlaveTimeoutInMills={SLAVE_TIMEOUT_MS}\n"
        )
        return ["--samsa", str(properties)]


@dataclass
class GregorBenchBroker(BenchBroker):
    """A gregor slave."""

    def extra_arguments(self) -> list[str]:
        properties = self.directory / "gregor_slave.properties"
        properties.write_text("master=127.0.0.1\n")  # the bench master runs here
        return ["--gregor", str(properties)]


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m meta.bench.sync_repl", description=__doc__)
    add = parser.add_argument
    add("--rounds", type=int, default=3, help="turns of every scenario on each side")
    add("--duration-s", type=float, default=3.0, help="time of one scenario's turn")
    add("--max-messages", type=int, default=2_000_000, help="count bound of one turn")
    add("--window", type=int, default=1000, help="unanswered puts of the pipelined scenario")
    add("--rate", type=float, default=LATENCY_RATE, help="messages/s of the latency scenario")
    add("--message-bytes", type=int, default=128, help="body size of every put")
    add("--unflush-threshold", type=int, default=0, help="flush mode of the three brokers")
    add("--slave-python-path", default=str(REPO), help="PYTHONPATH of the gregor slave")
    add(
        "--scenarios",
        default="pipelined,sync,latency",
        help="comma-separated scenarios to run (pipelined, sync, latency)",
    )
    add("--profile-master", type=Path, help="run the master under cProfile, stats written here")
    add("--profile-slave", type=Path, help="run the slave under cProfile, stats written here")
    add("--json", action="store_true", help="print the report as JSON")
    add("--keep", action="store_true", help="keep the temporary directory")
    return parser.parse_args(argv)


class Side:
    """One side of the comparison: the broker producers talk to, and every process whose CPU
    time counts for it; totals over the turns of each scenario."""

    def __init__(self, name: str, target: BenchBroker, processes: list[BenchBroker]) -> None:
        self.name = name
        self.target = target
        self.processes = processes
        self.totals: dict[str, dict] = {}

    def run(self, scenario: str, turn) -> None:
        before = [process.cpu_seconds() for process in self.processes]
        result = turn(self.target.address)
        after = [process.cpu_seconds() for process in self.processes]
        spent = [end - start for start, end in zip(before, after, strict=True)]
        total = self.totals.setdefault(
            scenario, {"messages": 0, "seconds": 0.0, "cpu_s": [0.0] * len(spent), "lat": []}
        )
        total["messages"] += result["messages"]
        total["seconds"] += result["seconds"]
        total["cpu_s"] = [sum(pair) for pair in zip(total["cpu_s"], spent, strict=True)]
        total["lat"] += result.get("latencies_s", [])
        rate = result["messages"] / max(result["seconds"], 1e-9)
        total.setdefault("rounds", []).append(round(rate))


def run(args: argparse.Namespace, work: Path) -> dict:
    frames = PutFrames(TOPIC, args.message_bytes)
    topics = {TOPIC: 1}
    threshold = args.unflush_threshold
    plain = BenchBroker(work / "plain", threshold, topics=topics)
    slave = GregorBenchBroker(
        work / "slave",
        threshold,
        topics=topics,
        python_path=args.slave_python_path,
        profile_path=args.profile_slave,
    )
    master = SamsaBenchBroker(
        work / "master", threshold, topics=topics, profile_path=args.profile_master
    )
    started: list[BenchBroker] = []
    try:
        for broker in (plain, slave):
            started.append(broker.start())
        master.slave_port = slave.port
        started.append(master.start())
        wait_replicating(master.address)
        sides = [Side("plain", plain, [plain]), Side("replicated", master, [master, slave])]
        turns = {
            "pipelined": lambda address: run_pipelined(
                address, frames, args.duration_s, args.max_messages, args.window
            ),
            "sync": lambda address: run_sync(address, frames, args.duration_s, args.max_messages),
            "latency": lambda address: run_open_latency(
                address, frames, args.rate, args.duration_s
            ),
        }
        for side in sides:  # warm up: the master's link and both sides' partitions
            run_sync(side.target.address, frames, 0.5, 100)
        chosen = [name.strip() for name in args.scenarios.split(",")]
        unknown = sorted(set(chosen) - set(turns))
        if unknown:
            raise BenchError(f"unknown scenarios: {', '.join(unknown)}")
        for _ in range(args.rounds):
            for scenario in chosen:
                turn = turns[scenario]
                for side in sides:
                    side.run(scenario, turn)
    finally:
        for broker in reversed(started):
            broker.stop()
    return report(args, sides)


def wait_replicating(address: tuple[str, int], timeout_s: float = REPLICATING_TIMEOUT_S) -> None:
    """Wait (bounded by ``timeout_s``) until the master is connected to its slave and
    compared with it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with BrokerConnection(*address) as connection:
            lines = connection.request(Stats("sync", 1)).body.decode().splitlines()
        if "connected true" in lines and not any("catching-up" in line for line in lines):
            return
        time.sleep(0.05)
    raise BenchError(f"the samsa master did not reach its slave in {timeout_s} s")


def report(args: argparse.Namespace, sides: list[Side]) -> dict:
    plain, replicated = sides
    result: dict = {"settings": {k: v for k, v in vars(args).items() if k not in ("json",)}}
    for scenario in plain.totals:
        row = {}
        for side in sides:
            total = side.totals[scenario]
            messages = max(total["messages"], 1)
            row[side.name] = {
                "messages": total["messages"],
                "seconds": total["seconds"],
                "msg_per_s": round(total["messages"] / max(total["seconds"], 1e-9)),
                "cpu_us_per_msg": [round(cpu * 1e6 / messages, 1) for cpu in total["cpu_s"]],
                "rounds_msg_per_s": total.get("rounds", []),
            }
            if total["lat"]:
                row[side.name]["p99_ms"] = round(percentile(total["lat"], 0.99) * 1000, 3)
        if scenario == "latency":
            ratio = row["replicated"]["p99_ms"] / max(row["plain"]["p99_ms"], 1e-9)
            row["p99_ratio"], row["target"] = round(ratio, 2), f"<= {LATENCY_TARGET}"
            row["met"] = ratio <= LATENCY_TARGET
        else:
            ratio = row["replicated"]["msg_per_s"] / max(row["plain"]["msg_per_s"], 1)
            goal = PIPELINED_TARGET if scenario == "pipelined" else SYNC_TARGET
            row["rate_ratio"], row["target"] = round(ratio, 2), f">= {goal}"
            row["met"] = ratio >= goal
        result[scenario] = row
    return result


def bench_row(result: dict) -> dict:
    """``tools/bench``'s ``sync-repl`` row from ``run``'s report (every scenario run): the
    replicated synchronous producer's messages, time and rate, each scenario's ratio to the
    plain broker, and the CPU per message of the master and the slave under that producer."""
    sync, pipelined, latency = result["sync"], result["pipelined"], result["latency"]
    master_us, slave_us = sync["replicated"]["cpu_us_per_msg"]
    return {
        "messages": sync["replicated"]["messages"],
        "seconds": sync["replicated"]["seconds"],
        "msg_per_s": sync["replicated"]["msg_per_s"],
        "plain_msg_per_s": sync["plain"]["msg_per_s"],
        "sync_ratio": sync["rate_ratio"],
        "pipelined_ratio": pipelined["rate_ratio"],
        "pipelined_msg_per_s": pipelined["replicated"]["msg_per_s"],
        "p99_ratio": latency["p99_ratio"],
        "latency_msg_per_s": latency["replicated"]["msg_per_s"],
        "broker_cpu_us_per_msg": master_us,
        "slave_cpu_us_per_msg": slave_us,
        "plain_cpu_us_per_msg": sync["plain"]["cpu_us_per_msg"][0],
    }


def format_report(result: dict) -> str:
    lines = [
        "scenario   plain msg/s  repl msg/s  ratio  target  met  plain cpu us/msg  "
        "master+slave cpu us/msg",
    ]
    for scenario in ("pipelined", "sync", "latency"):
        row = result.get(scenario)
        if row is None:
            continue
        plain, replicated = row["plain"], row["replicated"]
        ratio = row.get("rate_ratio", row.get("p99_ratio"))
        lines.append(
            f"{scenario:<10} {plain['msg_per_s']:>11} {replicated['msg_per_s']:>11} "
            f"{ratio:>6} {row['target']:>7} {'yes' if row['met'] else 'NO':>4} "
            f"{plain['cpu_us_per_msg'][0]:>17} {' + '.join(map(str, replicated['cpu_us_per_msg']))}"
        )
        if "p99_ms" in plain:
            p99s = f"plain {plain['p99_ms']}, replicated {replicated['p99_ms']}"
            lines.append(f"{'':<10} p99 ms: {p99s}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return report_in_work_directory(
        parse_arguments(argv), "metaq-bench-sync-repl-", run, format_report
    )


if __name__ == "__main__":
    sys.exit(main())
