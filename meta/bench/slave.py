"""Benchmark of the async slave: replication lag under steady load, and backlog replay rate.

``python -m meta.bench.slave --megabytes 1000`` does, in one run:

1. starts a standalone ZooKeeper (``tools/zookeeper.sh`` on a free port, in a temporary run
   directory) and a master broker registered in it (one topic, one partition,
   ``--segment-mb`` segments, ``unflushThreshold=--unflush-threshold``);
2. **backlog**: produces ``--megabytes`` MB of ``--message-bytes`` messages to the master
   (``meta.bench.load.run_pipelined``), then measures the raw client's consume rate of that
   backlog from the master (``meta.bench.load.run_consume``: one connection, 1 MiB gets), the
   same loop ``tools/bench consume`` uses. That loop checks only the length fields (at C
   speed); for context the same loop is also timed with every record's CRC checked as the
   slave does (``run_checked_consume``, reported as ``checked_consume``);
3. **durable write floor**: receives the backlog's size over 127.0.0.1 TCP in a separate
   receiver process (1 MiB reads into a reused buffer, ``pwrite`` into a new file in the
   slave's data directory, a flusher thread group-committing ``fdatasync``: with
   ``--unflush-threshold`` N >= 1, once N messages' bytes are unflushed), sent from this
   thread (``meta.bench.slave_floor``): its rate (and fraction of the raw consume rate) and the
   receiver process's CPU per MiB, user and system apart. The slave's replay is reported as
   fractions of it (``fraction_of_floor``: rate; ``cpu_times_floor``: CPU per MiB), so each
   run's figures can be read against what this machine's loopback and disk allowed then;
4. starts the async slave (same ``brokerId``, ``--slave`` with ``slaveMaxDelayInMills =
   --slave-max-delay-ms``) once the master is serving, and times its catch-up: from the
   moment the slave answers until its end (the ``offset`` command at ``Long.MAX_VALUE``,
   polled every ``CATCH_UP_POLL_S``) reaches the master's end. Replay rate = backlog bytes / that
   time; targets: at least ``TARGET_FRACTION`` of the raw consume rate and
   ``TARGET_PRODUCE_MULTIPLE`` times the pipelined put rate of step 2 (the master's group
   commit), at most ``TARGET_CPU_MS_PER_MIB`` of the slave's CPU per MiB. The slave process's
   CPU time over the same interval (user + system, all its threads, from
   ``/proc/<pid>/stat``) is reported per MiB of backlog (``cpu_ms_per_mib``), as is the
   bench thread's own CPU per MiB for the two consume loops: CPU time, unlike the rates, is
   not skewed by other load on the machine. The slave runs with its threads named
   (``meta.bench.thread_cpu``), so the same interval's CPU is also split by thread (the
   reactor, the fetch threads, the connection's reader and writer, the flusher), user and
   system time apart (``slave_threads``; not with ``--profile-slave``). ``--slave-code DIR``
   runs the slave from another checkout (the master and the loops stay this one's), so two
   versions of the slave can be compared on one machine in turns;
5. **lag**: a paced producer puts ``--rate`` messages/s for ``--seconds`` seconds (batches
   every ``TICK_S``, replies read as they come, each put's offset and ack time recorded)
   while a second thread polls the slave's end every ``POLL_S``. A message's lag is the
   time from its ack on the producer to the first poll that saw the slave's end cover it
   (0 if the slave had it before the ack arrived). p50/p99/max are reported and p99 is
   compared with ``slaveMaxDelayInMills`` + one fetch round trip (the mean time of one
   1 MiB get in step 2);
6. prints a table, or JSON with ``--json``.

The probes of steps 4 and 5 (the slave's end, the paced producer) live in
``meta.bench.slave_lag``. Everything it starts is stopped on exit (slave, master,
ZooKeeper); the temporary directory is removed unless ``--keep``. Every wait has a
deadline. Runs on the caller's thread plus one polling thread during step 5; only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from meta.bench.broker import REPO, report_in_work_directory
from meta.bench.load import (
    MAX_SIZE_DEFAULT,
    BenchBroker,
    BenchError,
    PutFrames,
    connect,
    read_reply,
    run_consume,
    run_pipelined,
)
from meta.bench.slave_floor import measure_floor
from meta.bench.slave_lag import (
    POLL_S,
    TOPIC,
    EndPoller,
    EndReader,
    lags,
    percentile,
    run_paced,
    wait_for_end,
)
from meta.bench.spark import ZooKeeper, rates
from meta.bench.thread_cpu import Sample, naming_command, per_thread, task_times
from meta.protocol.codec import HEADER_BYTES_MAX
from meta.protocol.message import HEADER_SIZE
from meta.slave.record_check import check_records, record_ends

BROKER_ID = 1
TARGET_FRACTION = 0.4
TARGET_PRODUCE_MULTIPLE = 2.0
TARGET_CPU_MS_PER_MIB = 1.3
CATCH_UP_TIMEOUT_S = 3600.0
CATCH_UP_POLL_S = 0.02
"""How often step 3 reads the slave's end: often enough for a replay of seconds (the rate's
error is at most one poll), rarely enough that answering them costs the slave next to
nothing: at the lag's ``POLL_S`` (2 ms) the answers made up a visible part of the slave's CPU
per MiB, which step 3 reports."""
LAG_TAIL_TIMEOUT_S = 60.0
"""After the last put, how long the slave may take to reach the master's end."""


@dataclass
class SlaveBenchBroker(BenchBroker):
    """``BenchBroker`` registered in ZooKeeper (pass ``zk_connect``) as broker ``BROKER_ID``
    serving ``TOPIC``; a slave if ``slave_max_delay_ms`` >= 0 (then started with ``--slave``)."""

    broker_id: int = BROKER_ID
    segment_bytes: int = 64 << 20
    topics: dict[str, int] | None = field(default_factory=lambda: {TOPIC: 1})
    slave_max_delay_ms: int = -1
    name_threads: bool = False

    def server_command(self) -> list[str]:
        if self.name_threads and self.profile_path is None:
            return naming_command()
        return super().server_command()

    def extra_arguments(self) -> list[str]:
        if self.slave_max_delay_ms < 0:
            return []
        properties = self.directory / "async_slave.properties"
        properties.write_text(
            f"slaveId=0\nslaveGroup=bench-slave-group\n"
            f"slaveMaxDelayInMills={self.slave_max_delay_ms}\n"
        )
        return ["--slave", str(properties)]


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (all threads); None off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_ms_per_mib(cpu_s: float | None, size_bytes: int) -> float | None:
    if cpu_s is None:
        return None
    return round(cpu_s * 1000 / max(size_bytes / (1 << 20), 1e-9), 3)


def run_checked_consume(address: tuple[str, int], timeout_s: float) -> dict:
    """``meta.bench.load.run_consume``'s loop, each record's length and CRC checked (the slave's
    ``record_ends`` and ``check_records``): what a client that verifies what it reads gets."""
    offset = records = gets = 0
    buffer = bytearray(MAX_SIZE_DEFAULT + HEADER_BYTES_MAX + 2)
    start = time.monotonic()
    deadline = start + timeout_s
    with connect(address) as sock:
        while time.monotonic() < deadline:
            gets += 1
            command = b"get %s bench 0 %d %d %d\r\n" % (
                TOPIC.encode(), offset, MAX_SIZE_DEFAULT, gets
            )  # fmt: skip
            sock.sendall(command)
            tokens, body = read_reply(sock, buffer)
            if tokens[0] == b"result" and tokens[1] == b"404":
                break
            if tokens[0] != b"value" or int(tokens[-1]) != gets:
                raise BenchError(f"get at {offset} failed: {tokens!r}")
            ends = record_ends(body, offset)
            if not ends:
                raise BenchError(f"get at {offset} returned no complete record")
            check_records(body, ends, offset)
            records, offset = records + len(ends), offset + ends[-1]
    return {"messages": records, "bytes": offset, "seconds": time.monotonic() - start}


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m meta.bench.slave",
        description="Async slave: replication lag under a steady load, and backlog replay "
        "rate vs the raw consume rate (starts ZooKeeper, a master and a slave).",
    )
    parser.add_argument("--megabytes", type=int, default=200, help="backlog size (MB)")
    parser.add_argument("--message-bytes", type=int, default=1024, help="message body size")
    parser.add_argument("--rate", type=float, default=20_000, help="lag phase: messages/s")
    parser.add_argument("--seconds", type=float, default=10.0, help="lag phase duration (s)")
    parser.add_argument(
        "--slave-max-delay-ms", type=int, default=500, help="slaveMaxDelayInMills of the slave"
    )
    parser.add_argument("--segment-mb", type=int, default=64, help="segment size (MiB)")
    parser.add_argument(
        "--unflush-threshold",
        type=int,
        default=0,
        help="unflushThreshold of both brokers (0: group commit, the shipped default)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--profile-slave", type=Path, help="run the slave under cProfile, stats written here"
    )
    parser.add_argument(
        "--slave-code",
        type=Path,
        help="run the slave from this checkout (default: this one), to compare versions",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return parser.parse_args(argv)


def run(args: argparse.Namespace, work: Path) -> dict:
    """Steps 1-5 of the module docstring; returns the report."""
    messages = max(1, args.megabytes * 1_000_000 // args.message_bytes)
    frames = PutFrames(TOPIC, args.message_bytes)
    with ZooKeeper(work / "zookeeper") as zookeeper:
        common = {
            "threshold": args.unflush_threshold,
            "zk_connect": zookeeper.connect,
            "segment_bytes": args.segment_mb << 20,
        }
        with SlaveBenchBroker(work / "master", **common) as master:
            produced = run_pipelined(master.address, frames, CATCH_UP_TIMEOUT_S, messages)
            if produced["messages"] != messages:
                raise BenchError(f"produced {produced['messages']} of {messages} messages")
            raw, checked = measure_consumes(master.address, messages)
            backlog_end = raw["bytes"]
            slave = SlaveBenchBroker(
                work / "slave",
                slave_max_delay_ms=args.slave_max_delay_ms,
                profile_path=args.profile_slave,
                name_threads=True,
                python_path=str(args.slave_code or REPO),
                **common,
            )
            floor = measure_floor(slave.data_path, backlog_end, floor_flush_bytes(args))
            with slave:
                replay_s, slave_cpu_s, threads = measure_catch_up(slave, backlog_end)
                lag_report = measure_lag(args, master, slave, frames)
            slave_log = slave.log_tail()
    fetch_round_trip_ms = raw["seconds"] / max(raw["gets"], 1) * 1000
    produce = rates(messages, args.message_bytes, produced["seconds"])
    raw_rates = rates(messages, args.message_bytes, raw["seconds"])
    replay = rates(messages, args.message_bytes, replay_s)
    checked_rates = rates(messages, args.message_bytes, checked["seconds"])
    replay.update(replay_shares(replay, raw_rates, checked_rates, produce))
    raw_rates["cpu_ms_per_mib"] = cpu_ms_per_mib(raw["cpu_s"], backlog_end)
    checked_rates["cpu_ms_per_mib"] = cpu_ms_per_mib(checked["cpu_s"], backlog_end)
    replay["cpu_ms_per_mib"] = cpu_ms_per_mib(slave_cpu_s, backlog_end)
    slave_threads = per_thread(*threads, backlog_end)
    floor_rates = floor_report(floor, messages, args.message_bytes, raw_rates)
    replay.update(against_floor(replay, floor_rates))
    replay["meets_cpu_target"] = (
        replay["cpu_ms_per_mib"] is not None and replay["cpu_ms_per_mib"] <= TARGET_CPU_MS_PER_MIB
    )
    bound_ms = args.slave_max_delay_ms + fetch_round_trip_ms
    lag_report["bound_ms"] = round(bound_ms, 1)
    lag_report["meets_target"] = lag_report["p99_ms"] < bound_ms
    if " ERROR " in slave_log:
        raise BenchError(f"the slave logged an error:\n{slave_log}")
    return {
        "messages": messages,
        "message_bytes": args.message_bytes,
        "backlog_bytes": backlog_end,
        "slave_max_delay_ms": args.slave_max_delay_ms,
        "unflush_threshold": args.unflush_threshold,
        "fetch_round_trip_ms": round(fetch_round_trip_ms, 2),
        "produce": produce,
        "raw_consume": raw_rates,
        "checked_consume": checked_rates,
        "floor": floor_rates,
        "slave_replay": replay,
        "slave_threads": slave_threads,
        "slave_code": str(args.slave_code or REPO),
        "lag": lag_report,
        "target_fraction": TARGET_FRACTION,
        "target_produce_multiple": TARGET_PRODUCE_MULTIPLE,
        "target_cpu_ms_per_mib": TARGET_CPU_MS_PER_MIB,
    }


def floor_flush_bytes(args: argparse.Namespace) -> int:
    """The floor's flush rule for ``--unflush-threshold``: 0 (a flush asked for after every
    write, group commit), else the bytes of that many stored messages."""
    return max(args.unflush_threshold, 0) * (args.message_bytes + HEADER_SIZE)


def floor_report(floor: dict, messages: int, message_bytes: int, raw_rates: dict) -> dict:
    """Step 3's row: the floor's rates, its fraction of the raw consume rate, and the
    receiver's CPU per MiB (user and system apart)."""
    row = rates(messages, message_bytes, floor["seconds"])
    row["fraction_of_raw"] = round(row["msg_per_s"] / max(raw_rates["msg_per_s"], 1), 2)
    row["user_ms_per_mib"] = cpu_ms_per_mib(floor["user_s"], floor["bytes"])
    row["system_ms_per_mib"] = cpu_ms_per_mib(floor["system_s"], floor["bytes"])
    row["cpu_ms_per_mib"] = cpu_ms_per_mib(floor["user_s"] + floor["system_s"], floor["bytes"])
    row["fdatasyncs"] = floor["fdatasyncs"]
    return row


def replay_shares(replay: dict, raw_rates: dict, checked_rates: dict, produce: dict) -> dict:
    """The replay's rate against the two consume loops' and the pipelined put rate, and the
    verdicts on its rate targets."""
    shares = {
        "fraction_of_raw": round(replay["msg_per_s"] / max(raw_rates["msg_per_s"], 1), 2),
        "fraction_of_checked": round(replay["msg_per_s"] / max(checked_rates["msg_per_s"], 1), 2),
        "times_produce": round(replay["msg_per_s"] / max(produce["msg_per_s"], 1), 2),
    }
    shares["meets_target"] = shares["fraction_of_raw"] >= TARGET_FRACTION
    shares["meets_produce_target"] = shares["times_produce"] >= TARGET_PRODUCE_MULTIPLE
    return shares


def against_floor(replay: dict, floor_rates: dict) -> dict:
    """The replay's rate as a fraction of the floor's (``fraction_of_floor``) and its CPU
    per MiB as a multiple of the floor receiver's (``cpu_times_floor``, when both are known)."""
    shares = {"fraction_of_floor": round(replay["msg_per_s"] / max(floor_rates["msg_per_s"], 1), 2)}
    if replay["cpu_ms_per_mib"] is not None and floor_rates["cpu_ms_per_mib"] > 0:
        shares["cpu_times_floor"] = round(
            replay["cpu_ms_per_mib"] / floor_rates["cpu_ms_per_mib"], 2
        )
    return shares


def measure_consumes(address: tuple[str, int], messages: int) -> tuple[dict, dict]:
    """Step 2's two consume loops over the backlog, each with this thread's CPU (``cpu_s``)."""
    cpu_began = time.thread_time()
    raw = run_consume(address, TOPIC, CATCH_UP_TIMEOUT_S, 1 << 62)
    raw["cpu_s"] = time.thread_time() - cpu_began
    if raw["messages"] != messages:
        raise BenchError(f"raw consume read {raw['messages']} of {messages} messages")
    cpu_began = time.thread_time()
    checked = run_checked_consume(address, CATCH_UP_TIMEOUT_S)
    checked["cpu_s"] = time.thread_time() - cpu_began
    if checked["messages"] != messages:
        raise BenchError(f"checked consume read {checked['messages']} of {messages}")
    return raw, checked


def measure_catch_up(
    slave: SlaveBenchBroker, backlog_end: int
) -> tuple[float, float | None, tuple[Sample, Sample]]:
    """Step 3: seconds until the slave's end reaches ``backlog_end``, the slave process's CPU
    seconds meanwhile (None off Linux), and its threads' CPU at the start and at the end."""
    assert slave.process is not None
    began = time.monotonic()
    threads_began = task_times(slave.process.pid)
    cpu_began = process_cpu_s(slave.process.pid)
    reader = EndReader(slave.address)
    try:
        caught_up = wait_for_end(reader, backlog_end, CATCH_UP_TIMEOUT_S, CATCH_UP_POLL_S)
    finally:
        reader.close()
    cpu_s = process_cpu_s(slave.process.pid)
    threads_ended = task_times(slave.process.pid)
    if cpu_s is not None and cpu_began is not None:
        cpu_s -= cpu_began
    return caught_up - began, cpu_s, (threads_began, threads_ended)


def measure_lag(
    args: argparse.Namespace, master: SlaveBenchBroker, slave: SlaveBenchBroker, frames: PutFrames
) -> dict:
    """Step 4: paced puts to the master, the slave's end polled meanwhile."""
    poller = EndPoller(slave.address)
    poller.start()
    try:
        ack_times, ends, seconds = run_paced(master.address, frames, args.rate, args.seconds)
        deadline = time.monotonic() + LAG_TAIL_TIMEOUT_S
        while not poller.ends or poller.ends[-1] < ends[-1]:
            if time.monotonic() > deadline or not poller.is_alive():
                raise BenchError(
                    f"the slave did not reach offset {ends[-1]} within {LAG_TAIL_TIMEOUT_S} s"
                    f" ({poller.error!r})"
                )
            time.sleep(POLL_S)
    finally:
        poller.stop()
    if poller.error is not None:
        raise BenchError(f"polling the slave failed: {poller.error!r}")
    values = lags(ack_times, ends, poller.times, poller.ends)
    return {
        "messages": len(values),
        "offered_msg_per_s": args.rate,
        "achieved_msg_per_s": round(len(values) / max(seconds, 1e-9)),
        "p50_ms": round(percentile(values, 0.50) * 1000, 2),
        "p99_ms": round(percentile(values, 0.99) * 1000, 2),
        "max_ms": round(max(values) * 1000, 2),
    }


def format_report(report: dict) -> str:
    lag = report["lag"]
    lines = [
        f"backlog: {report['messages']} messages of {report['message_bytes']} bytes; "
        f"slaveMaxDelayInMills {report['slave_max_delay_ms']}, unflushThreshold "
        f"{report['unflush_threshold']}, one 1 MiB fetch round trip "
        f"{report['fetch_round_trip_ms']} ms",
    ]
    for name in ("produce", "raw_consume", "checked_consume", "floor", "slave_replay"):
        row = report[name]
        line = f"{name:15} {row['msg_per_s']:>10} msg/s {row['mb_per_s']:>8} MB/s"
        line += f" {row['seconds']:>8} s"
        if row.get("cpu_ms_per_mib") is not None:
            line += f" {row['cpu_ms_per_mib']:>7.3f} ms CPU/MiB"
        if name == "floor":
            line += floor_columns(row)
        elif "fraction_of_raw" in row:
            verdict = "meets" if row["meets_target"] else "MISSES"
            line += (
                f"  {row['fraction_of_raw']:.0%} of raw ({verdict} the target >= "
                f"{report['target_fraction']:.0%}), {row['fraction_of_checked']:.0%} of checked"
            )
            lines.append(line)
            line = replay_targets_line(report)
        lines.append(line)
    lines += thread_lines(report["slave_threads"])
    verdict = "meets" if lag["meets_target"] else "MISSES"
    lines.append(
        f"lag             {lag['messages']} messages at {lag['achieved_msg_per_s']} msg/s "
        f"(offered {lag['offered_msg_per_s']:g}): p50 {lag['p50_ms']} ms, p99 "
        f"{lag['p99_ms']} ms, max {lag['max_ms']} ms ({verdict} the target p99 < "
        f"{lag['bound_ms']} ms)"
    )
    return "\n".join(lines)


def floor_columns(row: dict) -> str:
    """The floor row's own columns: its share of the raw rate and its CPU split."""
    return (
        f"  {row['fraction_of_raw']:.0%} of raw (user {row['user_ms_per_mib']:.3f}, system "
        f"{row['system_ms_per_mib']:.3f}; {row['fdatasyncs']} fdatasyncs)"
    )


def replay_targets_line(report: dict) -> str:
    """The replay's produce-rate and CPU targets, then its share of the floor, on two lines."""
    replay = report["slave_replay"]
    produce_verdict = "meets" if replay["meets_produce_target"] else "MISSES"
    cpu_verdict = "meets" if replay["meets_cpu_target"] else "MISSES"
    return (
        f"{'':15} replay {replay['times_produce']}x the pipelined put rate ({produce_verdict} "
        f"the target >= {report['target_produce_multiple']:g}x); {cpu_verdict} the target "
        f"<= {report['target_cpu_ms_per_mib']:g} ms CPU/MiB\n"
        f"{'':15} replay {replay['fraction_of_floor']:.0%} of the floor's rate, "
        f"{replay.get('cpu_times_floor', float('nan')):g}x the floor's CPU/MiB"
    )


def thread_lines(threads: dict[str, dict[str, float]]) -> list[str]:
    """The replay's CPU per MiB by slave thread, one line each (threads that used no CPU
    tick are in the JSON only)."""
    return [
        f"{'':15} thread {name:15} x{row['threads']:<2} {row['ms_per_mib']:6.3f} ms CPU/MiB "
        f"(user {row['user_ms_per_mib']:.3f}, system {row['system_ms_per_mib']:.3f})"
        for name, row in threads.items()
        if row["ms_per_mib"]
    ]


def main(argv: list[str] | None = None) -> int:
    return report_in_work_directory(parse_arguments(argv), "metaq-bench-slave-", run, format_report)


if __name__ == "__main__":
    sys.exit(main())
