"""Benchmark of the ``metaq`` Spark batch read against the null source and the raw client.

``python -m meta.bench.spark --megabytes 200`` does, in one run:

1. starts a standalone ZooKeeper (``tools/zookeeper.sh`` on a free port, in a temporary
   run directory) and one broker registered in it (``SparkBenchBroker``: the
   ``meta.bench.broker.BenchBroker`` process with ZooKeeper enabled and ``--segment-mb`` segments);
2. produces the backlog: ``--megabytes`` MB of ``--message-bytes`` messages to one partition
   (``meta.bench.load.run_pipelined``);
3. measures the raw consume rate: one connection, 1 MiB gets from offset 0
   (``meta.bench.load.run_consume``), the same loop ``tools/bench consume`` uses;
4. measures the executor-side reader alone: ``meta.spark.reading.read_range`` over the whole
   partition in this process (no Spark), as CPU microseconds per message (target:
   ``READER_TARGET_CPU_US``);
5. measures Spark (``local[--cores]``), after a small warm-up count and Parquet write of
   both sources (it starts the Python workers and compiles the JVM's paths): ``df.count()``
   and a Parquet write of the null source (``meta.bench.spark_null``: prebuilt Arrow
   batches of the same schema, row count and number of partitions, no broker: the ceiling
   of PySpark's Python Data Source API here), then the same two of the topic;
6. measures the writers (``meta.bench.spark_write``): ``--write-messages`` rows written
   with the at-least-once writer and with ``transactional=true``, in ``--write-turns``
   alternating turns, the second's rate as a ratio of the first's (``write_tx``, target:
   ``spark_write.TARGET_RATIO``); ``--write-only`` skips steps 2 to 5;
7. prints msg/s and MB/s, each Spark rate of the topic as a fraction of the null source's
   (targets: ``TARGET_FRACTION_OF_NULL``) and of the raw rate, as text or JSON (``--json``),
   and for each Spark phase the CPU microseconds per message of the JVM, the Python workers,
   the driver and the broker (Linux ``/proc``, process trees), which says where a Spark read
   or write spends its time whatever else loads the machine.

The read is split with ``maxBytesPerPartition`` = ``--piece-mb``; every cut lands on a
segment start (``meta.spark.planning`` moves a cut forward to a segment start just after
it), so no piece re-reads bytes.

Everything it starts is stopped on exit (ZooKeeper, broker, Spark). Single-threaded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from meta.bench.broker import report_in_work_directory
from meta.bench.load import (
    HOST,
    REPO,
    ZK_ROOT,
    BenchBroker,
    BenchError,
    PutFrames,
    free_port,
    run_consume,
    run_pipelined,
)
from meta.bench.spark_write import (
    WRITE_TOPIC,
    WRITE_TX_TOPIC,
    format_write_rows,
    measure_writes,
    write_report,
)

TOPIC = "bench-spark"
ZOOKEEPER_SCRIPT = REPO / "tools" / "zookeeper.sh"
TARGET_FRACTION_OF_NULL = {"count": 0.5, "parquet": 0.75}
"""Targets: the real source's rates as fractions of the null source's, in the same run."""
READER_TARGET_CPU_US = 1.2
"""Target: CPU microseconds per message of the executor-side reader alone."""


@dataclass
class SparkBenchBroker(BenchBroker):
    """``BenchBroker`` registered in ZooKeeper as broker 1, serving ``TOPIC``, 64 MiB segments
    (pass ``zk_connect``)."""

    broker_id: int = 1
    segment_bytes: int = 64 << 20
    topics: dict[str, int] | None = field(
        default_factory=lambda: {TOPIC: 1, WRITE_TOPIC: 2, WRITE_TX_TOPIC: 2}
    )


class ZooKeeper:
    """``tools/zookeeper.sh`` on a free port in ``run_dir``; a context manager."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.port = free_port()

    @property
    def connect(self) -> str:
        return f"{HOST}:{self.port}"

    def __enter__(self) -> ZooKeeper:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._script("start", "--port", str(self.port))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._script("stop")

    def _script(self, action: str, *arguments: str) -> None:
        command = [str(ZOOKEEPER_SCRIPT), action, *arguments, "--run-dir", str(self.run_dir)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=90)
        if done.returncode != 0:
            raise BenchError(f"tools/zookeeper.sh {action} failed: {done.stdout}{done.stderr}")


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m meta.bench.spark",
        description="Spark batch read of a topic (count and Parquet) vs the raw consume rate, "
        "and the transactional Spark writer vs the at-least-once writer.",
    )
    parser.add_argument("--megabytes", type=int, default=200, help="backlog size (MB)")
    parser.add_argument("--message-bytes", type=int, default=1024, help="message body size")
    parser.add_argument("--segment-mb", type=int, default=64, help="broker segment size (MiB)")
    parser.add_argument("--piece-mb", type=int, default=64, help="maxBytesPerPartition (MiB)")
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument(
        "--write-messages", type=int, default=100_000, help="rows per writer and turn"
    )
    parser.add_argument(
        "--write-turns", type=int, default=3, help="alternating turns of the two writers"
    )
    parser.add_argument(
        "--write-only", action="store_true", help="measure the writers only (no read)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return parser.parse_args(argv)


def spark_session(cores: int):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import meta.spark

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("metaq-bench-spark")
        .config("spark.driver.host", HOST)
        .config("spark.driver.bindAddress", HOST)
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    meta.spark.register(spark)
    return spark


def measure_spark(
    args: argparse.Namespace,
    zk_connect: str,
    work: Path,
    spark=None,
    broker_pid: int | None = None,
    pieces: int = 1,
) -> dict:
    """Time ``df.count()`` and a Parquet write of the whole topic, and the same two of the
    null source (``meta.bench.spark_null``: as many rows, in ``pieces`` partitions, as the
    real plan has), each with CPU by process role.

    ``spark``: a session to use (left running); None starts one and stops it.
    ``broker_pid``: the broker process, whose CPU is reported too.
    """
    own = spark is None
    spark = spark_session(args.cores) if own else spark
    try:
        from meta.bench.spark_null import NullDataSource

        spark.dataSource.register(NullDataSource)

        def topic(**options: str):
            # A new DataFrameReader each time: option() changes the reader it is called on.
            reader = spark.read.format("metaq").option("zk.connect", zk_connect)
            reader = reader.option("topic", TOPIC)
            reader = reader.option("maxBytesPerPartition", str(args.piece_mb << 20))
            for name, value in options.items():
                reader = reader.option(name, value)
            return reader.load()

        def null(rows: int):
            reader = spark.read.format("metaq_null").option("rows", str(rows))
            reader = reader.option("partitions", str(pieces))
            return reader.option("messageBytes", str(args.message_bytes)).load()

        # Warm-up of both sources and both phases, at a small size: starts the Python
        # workers and compiles the JVM's read and Parquet paths before either is timed.
        warm_end = json.dumps({TOPIC: {"1-0": 8 << 20}})
        for frame in (topic(endingOffsets=warm_end), null(8000)):
            frame.count()
            frame.write.mode("overwrite").parquet(str(work / "warm-up"))
        messages = args.megabytes * 1_000_000 // args.message_bytes
        timed = {"null": time_phases(lambda: null(messages), work / "null", broker_pid)}
        timed["metaq"] = time_phases(topic, work / "parquet", broker_pid)
    finally:
        if own:
            spark.stop()
    return timed


def time_phases(frame_of, parquet_path: Path, broker_pid: int | None) -> dict:
    """``count()`` then a Parquet write of ``frame_of()``: seconds and CPU by role of each."""
    cpu_before = cpu_by_role(broker_pid)
    began = time.monotonic()
    count = frame_of().count()
    count_s = time.monotonic() - began
    cpu_between = cpu_by_role(broker_pid)
    began = time.monotonic()
    frame_of().write.mode("overwrite").parquet(str(parquet_path))
    parquet_s = time.monotonic() - began
    cpu_after = cpu_by_role(broker_pid)
    return {
        "messages": count,
        "count_s": count_s,
        "parquet_s": parquet_s,
        "count_cpu_s": cpu_delta(cpu_before, cpu_between),
        "parquet_cpu_s": cpu_delta(cpu_between, cpu_after),
    }


def _proc_table() -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, CPU seconds of it and its reaped children, command name)."""
    table = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue  # It exited meanwhile.
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu_ticks = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
        table[int(entry.name)] = (int(fields[1]), cpu_ticks / ticks, Path(command).name)
    return table


def _descendants(table: dict[int, tuple[int, float, str]], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _cpu, _name) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def cpu_by_role(broker_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of the broker, the Spark JVM, its Python workers and this process.

    The JVM is the ``java`` descendant of this process (PySpark starts it); Python workers
    are its ``python`` descendants. Empty where ``/proc`` is missing (not Linux).
    """
    if not Path("/proc/self/stat").exists():
        return {}
    table = _proc_table()
    me = os.getpid()
    broker = _descendants(table, broker_pid) if broker_pid else set()
    roles = {"broker": 0.0, "jvm": 0.0, "python_workers": 0.0, "driver": table[me][1]}
    for pid in broker:
        roles["broker"] += table[pid][1]
    for pid in _descendants(table, me) - broker - {me}:
        _parent, cpu, name = table[pid]
        if name == "java":
            roles["jvm"] += cpu
            for worker in _descendants(table, pid) - {pid}:
                if table[worker][2].startswith("python"):
                    roles["python_workers"] += table[worker][1]
    return roles


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {role: round(after[role] - before[role], 2) for role in before if role in after}


def measure_reader(address: tuple[str, int], end: int) -> dict:
    """CPU of ``read_range`` over ``[0, end)`` of the bench partition, in this process."""
    from meta.spark.planning import RangePartition
    from meta.spark.reading import read_range

    warm = RangePartition(TOPIC, 1, 0, address[0], address[1], 0, min(end, 1 << 20), 0)
    for _batch in read_range(warm, "bench-reader", 1 << 20, 30.0, True):
        pass  # Pays the first-use costs (imports, Arrow's type setup) outside the timing.
    piece = RangePartition(TOPIC, 1, 0, address[0], address[1], 0, end, 0)
    rows = 0
    cpu_start, start = time.process_time(), time.monotonic()
    batches: Iterator = read_range(piece, "bench-reader", 1 << 20, 30.0, True)
    for batch in batches:
        rows += batch.num_rows
    cpu_s = time.process_time() - cpu_start
    return {"messages": rows, "seconds": time.monotonic() - start, "cpu_s": cpu_s}


def wait_until_registered(
    zk_connect: str, topics: tuple[str, ...] = (TOPIC,), timeout_s: float = 30.0
) -> None:
    """Wait until the broker lists ``topics`` under ``topics-sub`` (it registers them lazily)."""
    from meta.client.zk.spark import ZkSparkReader

    deadline = time.monotonic() + timeout_s
    with ZkSparkReader(zk_connect, ZK_ROOT) as reader:
        while not set(topics) <= set(reader.topics()):
            if time.monotonic() > deadline:
                raise BenchError(f"the broker did not register {topics} within {timeout_s} s")
            time.sleep(0.1)


def rates(messages: int, message_bytes: int, seconds: float) -> dict:
    seconds = max(seconds, 1e-9)
    return {
        "messages": messages,
        "seconds": round(seconds, 3),
        "msg_per_s": round(messages / seconds),
        "mb_per_s": round(messages * message_bytes / seconds / 1e6, 1),
    }


def run(args: argparse.Namespace, work: Path, spark=None) -> dict:
    """Steps 1-6 of the module docstring; returns the report.

    ``spark``: a session to use (left running); None starts one and stops it.
    """
    own = spark is None
    spark = spark_session(args.cores) if own else spark
    try:
        with ZooKeeper(work / "zookeeper") as zookeeper:
            broker = SparkBenchBroker(
                work / "broker",
                0,
                zk_connect=zookeeper.connect,
                segment_bytes=args.segment_mb << 20,
            )
            with broker:
                report = {"message_bytes": args.message_bytes, "cores": args.cores}
                if not args.write_only:
                    report.update(read_report(args, work, zookeeper.connect, broker, spark))
                report.update(write_rows(args, zookeeper.connect, broker, spark))
    finally:
        if own:
            spark.stop()
    return report


def write_rows(args: argparse.Namespace, zk_connect: str, broker, spark) -> dict:
    """Step 6: the ``write`` and ``write_tx`` rows."""
    wait_until_registered(zk_connect, (WRITE_TOPIC, WRITE_TX_TOPIC))
    pid = broker.process.pid
    measured = measure_writes(
        spark,
        zk_connect,
        ZK_ROOT,
        broker.address,
        args.write_messages,
        args.message_bytes,
        args.write_turns,
        args.cores,
        lambda: cpu_by_role(pid),
    )
    return write_report(measured, args.write_messages, args.message_bytes, rates)


def read_report(args: argparse.Namespace, work: Path, zk_connect: str, broker, spark) -> dict:
    """Steps 2-5: the read rows."""
    messages = args.megabytes * 1_000_000 // args.message_bytes
    frames = PutFrames(TOPIC, args.message_bytes)
    produced = run_pipelined(broker.address, frames, 3600.0, messages)
    if produced["messages"] != messages:
        raise BenchError(f"produced {produced['messages']} of {messages} messages")
    raw = run_consume(broker.address, TOPIC, 600.0, 1 << 62)
    reader = measure_reader(broker.address, raw["bytes"])
    wait_until_registered(zk_connect)
    pieces = -(-raw["bytes"] // (args.piece_mb << 20))
    timed = measure_spark(args, zk_connect, work, spark, broker.process.pid, pieces)
    read = {
        "Spark": timed["metaq"]["messages"],
        "null source": timed["null"]["messages"],
        "raw": raw["messages"],
        "reader": reader["messages"],
    }
    if set(read.values()) != {messages}:
        raise BenchError(f"read {read} of {messages} messages")
    report = {
        "messages": messages,
        "produce": rates(messages, args.message_bytes, produced["seconds"]),
        "raw_consume": rates(messages, args.message_bytes, raw["seconds"]),
        "reader": rates(messages, args.message_bytes, reader["seconds"]),
    }
    report["raw_consume"]["cpu_us_per_msg"] = per_message_us(raw["client_cpu_s"], messages)
    report["reader"]["cpu_us_per_msg"] = per_message_us(reader["cpu_s"], messages)
    report["reader"]["target_cpu_us_per_msg"] = READER_TARGET_CPU_US
    report["reader"]["meets_target"] = reader["cpu_s"] * 1e6 / messages <= READER_TARGET_CPU_US
    for source, prefix in (("null", "null"), ("metaq", "spark")):
        for phase in ("count", "parquet"):
            row = rates(messages, args.message_bytes, timed[source][f"{phase}_s"])
            cpu = timed[source][f"{phase}_cpu_s"]
            row["cpu_us_per_msg"] = {
                role: per_message_us(seconds, messages) for role, seconds in cpu.items()
            }
            report[f"{prefix}_{phase}"] = row
    for phase in ("count", "parquet"):
        row, ceiling = report[f"spark_{phase}"], report[f"null_{phase}"]
        fraction = row["msg_per_s"] / max(ceiling["msg_per_s"], 1)
        row["fraction_of_null"] = round(fraction, 2)
        row["target_fraction_of_null"] = TARGET_FRACTION_OF_NULL[phase]
        row["meets_target"] = fraction >= TARGET_FRACTION_OF_NULL[phase]
        row["fraction_of_raw"] = round(
            row["msg_per_s"] / max(report["raw_consume"]["msg_per_s"], 1), 2
        )
    return report


def per_message_us(seconds: float, messages: int) -> float:
    return round(seconds * 1e6 / max(messages, 1), 2)


def format_report(report: dict) -> str:
    """The report as text: the read rows (unless ``--write-only``), then the write rows."""
    lines = []
    if "produce" in report:
        lines += format_read_rows(report)
    turns = report["write"]["turns"]
    lines.append(
        f"Writers: {turns} alternating turns of {report['write']['messages'] // turns} rows "
        f"of {report['message_bytes']} bytes per writer, Spark local[{report['cores']}]"
    )
    lines += format_write_rows(report)
    return "\n".join(lines)


def format_read_rows(report: dict) -> list[str]:
    lines = [
        f"{report['messages']} messages of {report['message_bytes']} bytes, "
        f"Spark local[{report['cores']}]; every Spark rate is also given as a fraction of the "
        "null source's (prebuilt Arrow batches, no broker), measured in the same run"
    ]
    names = ("produce", "raw_consume", "reader", "null_count", "null_parquet")
    for name in (*names, "spark_count", "spark_parquet"):
        row = report[name]
        line = f"{name:14} {row['msg_per_s']:>10} msg/s {row['mb_per_s']:>8} MB/s"
        line += f" {row['seconds']:>8} s"
        if "fraction_of_null" in row:
            verdict = "meets" if row["meets_target"] else "MISSES"
            line += (
                f"  {row['fraction_of_null']:.0%} of the null source ({verdict} the target "
                f">= {row['target_fraction_of_null']:.0%}), {row['fraction_of_raw']:.0%} of raw"
            )
        lines.append(line)
    lines.append("CPU microseconds per message:")
    lines.append(f"  raw consume client {report['raw_consume']['cpu_us_per_msg']}")
    reader = report["reader"]
    verdict = "meets" if reader["meets_target"] else "MISSES"
    lines.append(
        f"  reader (read_range in one process, no Spark) {reader['cpu_us_per_msg']} "
        f"({verdict} the target <= {reader['target_cpu_us_per_msg']})"
    )
    for name in ("null_count", "null_parquet", "spark_count", "spark_parquet"):
        roles = report[name]["cpu_us_per_msg"]
        text = ", ".join(f"{role} {value}" for role, value in roles.items()) or "n/a (no /proc)"
        lines.append(f"  {name}: {text}")
    return lines


def main(argv: list[str] | None = None) -> int:
    return report_in_work_directory(parse_arguments(argv), "metaq-bench-spark-", run, format_report)


if __name__ == "__main__":
    sys.exit(main())
