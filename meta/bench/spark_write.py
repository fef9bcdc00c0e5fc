"""The ``write`` and ``write-tx`` rows of ``meta.bench.spark``: the Spark writers' rates.

In one Spark session against one broker, ``measure_writes`` writes the same DataFrame
(``messages`` rows of a ``message_bytes`` value, in ``partitions`` tasks) in alternating
turns: with the at-least-once writer to ``WRITE_TOPIC``, then with ``transactional=true``
(a fresh write id per save: prepared XA branches, a ZooKeeper decision record, a commit per
branch) to ``WRITE_TX_TOPIC``. Turns alternate because the machine may be shared: a load
that comes and goes then weighs on both writers alike. Each turn's ratio is the
transactional rate over the at-least-once rate of that turn; the report gives every
turn's ratio and their median, against ``TARGET_RATIO``. Each rate is the rows over the
wall time of ``save()``, which includes the driver's commit.

After the turns, each topic must hold exactly ``turns * messages`` records: every record
has the same size, so the count is read from the partitions' offsets (``stats offsets``),
which also shows that no transactional row landed twice or was lost.

Single-threaded; the caller owns the session and the broker.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from meta.admin.client import AdminClient
from meta.admin.reads import partition_stats
from meta.bench.broker import BenchError
from meta.protocol.message import HEADER_SIZE

WRITE_TOPIC = "bench-spark-write"
WRITE_TX_TOPIC = "bench-spark-write-tx"
TARGET_RATIO = 0.70
"""Target: the transactional writer's rate as a fraction of the at-least-once writer's."""
WARM_UP_MESSAGES = 2000


def measure_writes(
    spark,
    zk_connect: str,
    zk_root: str,
    broker_address: tuple[str, int],
    messages: int,
    message_bytes: int,
    turns: int,
    partitions: int,
    cpu_by_role: Callable[[], dict[str, float]],
) -> dict:
    """Both writers in ``turns`` alternating turns, after a warm-up of each (at most
    ``WARM_UP_MESSAGES`` rows: it starts the Python workers before either is timed).

    ``cpu_by_role()``: CPU seconds so far by process role (``meta.bench.spark``), whose
    differences give each writer's CPU.

    Returns:
        ``{"turns": [{"write_s", "write_tx_s", "ratio"}...], "write_cpu_s",
        "write_tx_cpu_s"}`` (CPU summed over the turns).

    Raises:
        BenchError: a topic does not hold exactly the rows written to it.
    """
    from pyspark.sql.functions import lit

    def save(rows: int, topic: str, transactional: bool) -> float:
        frame = spark.range(0, rows, 1, partitions).select(lit(b"v" * message_bytes).alias("value"))
        writer = frame.write.format("metaq").mode("append")
        writer = writer.option("zk.connect", zk_connect).option("zk.root", zk_root)
        writer = writer.option("topic", topic).option("transactional", str(transactional))
        began = time.monotonic()
        writer.save()
        return time.monotonic() - began

    warm_up = min(WARM_UP_MESSAGES, messages)
    save(warm_up, WRITE_TOPIC, False)
    save(warm_up, WRITE_TX_TOPIC, True)
    rows: list[dict] = []
    cpu = {"write": {}, "write_tx": {}}
    for _turn in range(turns):
        row = {}
        for name, topic, transactional in (
            ("write", WRITE_TOPIC, False),
            ("write_tx", WRITE_TX_TOPIC, True),
        ):
            before = cpu_by_role()
            row[f"{name}_s"] = save(messages, topic, transactional)
            after = cpu_by_role()
            for role in before.keys() & after.keys():
                cpu[name][role] = cpu[name].get(role, 0.0) + after[role] - before[role]
        row["ratio"] = round(row["write_s"] / max(row["write_tx_s"], 1e-9), 3)
        rows.append(row)
    expected = warm_up + turns * messages
    for topic in (WRITE_TOPIC, WRITE_TX_TOPIC):
        stored = stored_records(broker_address, topic, message_bytes)
        if stored != expected:
            raise BenchError(f"{topic} holds {stored} records, {expected} were written")
    return {"turns": rows, "write_cpu_s": cpu["write"], "write_tx_cpu_s": cpu["write_tx"]}


def stored_records(address: tuple[str, int], topic: str, message_bytes: int) -> int:
    """The records of ``topic`` on one broker, all of ``message_bytes`` with no attribute."""
    with AdminClient(address) as client:
        stats = partition_stats(client)
    stored_bytes = sum(
        row.max_offset - row.min_offset for (name, _), row in stats.items() if name == topic
    )
    return stored_bytes // (HEADER_SIZE + message_bytes)


def write_report(measured: dict, messages: int, message_bytes: int, rates) -> dict:
    """The ``write`` and ``write_tx`` rows: rates over all turns, CPU per message by role,
    every turn's ratio, their median and the verdict against ``TARGET_RATIO``.

    ``rates(messages, message_bytes, seconds)``: ``meta.bench.spark.rates``.
    """
    turns = measured["turns"]
    total = messages * len(turns)
    report = {}
    for name in ("write", "write_tx"):
        row = rates(total, message_bytes, sum(turn[f"{name}_s"] for turn in turns))
        row["cpu_us_per_msg"] = {
            role: round(seconds * 1e6 / max(total, 1), 2)
            for role, seconds in measured[f"{name}_cpu_s"].items()
        }
        report[name] = row
    report["write"]["turns"] = len(turns)
    ratios = [turn["ratio"] for turn in turns]
    median = statistics.median(ratios)
    report["write_tx"].update(
        turn_ratios=ratios,
        ratio=round(median, 2),
        target_ratio=TARGET_RATIO,
        meets_target=median >= TARGET_RATIO,
    )
    return report


def format_write_rows(report: dict) -> list[str]:
    """The text lines of the ``write`` and ``write_tx`` rows and their CPU."""
    lines = []
    for name in ("write", "write_tx"):
        row = report[name]
        line = f"{name:14} {row['msg_per_s']:>10} msg/s {row['mb_per_s']:>8} MB/s"
        line += f" {row['seconds']:>8} s"
        if "ratio" in row:
            verdict = "meets" if row["meets_target"] else "MISSES"
            turns = " ".join(f"{ratio:.2f}" for ratio in row["turn_ratios"])
            line += (
                f"  {row['ratio']:.0%} of write, median of turns {turns} ({verdict} the "
                f"target >= {row['target_ratio']:.0%})"
            )
        lines.append(line)
    for name in ("write", "write_tx"):
        roles = report[name]["cpu_us_per_msg"]
        text = ", ".join(f"{role} {value}" for role, value in roles.items()) or "n/a (no /proc)"
        lines.append(f"  {name} CPU microseconds per message: {text}")
    return lines
