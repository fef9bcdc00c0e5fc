"""A Spark application for a standalone cluster: an exactly-once write under speculation.

``tests/spark/test_cluster.py`` submits it with ``spark.speculation=true``:

    eos_cluster_job.py ZK_CONNECT ZK_ROOT TOPIC MARKER_DIR

It writes ``ROWS`` keyed rows (value ``row-<n>-`` and padding, key ``k<n % KEYS>``, so each
task writes to every broker) to ``TOPIC`` with ``transactional=true``, from ``PARTITIONS``
tasks. A UDF on the way marks each task attempt that runs with a file
``MARKER_DIR/<partition>-<attempt>`` and makes the value. The first attempt of partition 0
stops at row ``PAUSE_AT``, once its writer has received, written and prepared the rows before
it: ``rowsPerTransaction`` is small, the values' padding pushes the rows through the buffers
of the UDF's and the writer's Python workers, and the rows before ``PAUSE_AT`` give each
broker's branch thread several batches (``transactional_write.BATCH_ROWS``). It then waits
until a second attempt of partition 0 has started, then until it is killed (each
wait bounded by ``PAUSE_S``). Spark's speculation launches that second attempt on the other
host; it writes the whole partition and wins, and the first attempt is killed with prepared
branches that must never be committed. Exits 0 when the write succeeded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.functions import col, concat, lit, udf

import meta.spark

ROWS = 2400
PARTITIONS = 4
KEYS = 13
PAUSE_AT = 560
"""A row of partition 0 (rows 0 to ROWS / PARTITIONS - 1), near its end."""
PAUSE_S = 150.0
PADDING = "x" * 2000
ROWS_PER_TRANSACTION = 20
WRITE_ID = "speculated"
"""The write's ``transactionalId``: its commit record stays, for the test to read."""


def wait_for(condition, timeout_s: float) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout_s`` passed (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def mark_attempt(marker_dir: str):
    """The UDF: marks the task attempt, pauses the first attempt of partition 0."""
    markers = Path(marker_dir)

    @udf("string")
    def marked(number: int) -> str:
        context = TaskContext.get()
        partition, attempt = context.partitionId(), context.attemptNumber()
        marker = markers / f"{partition}-{attempt}"
        if not marker.exists():
            marker.touch()
        paused = (partition, attempt, number) == (0, 0, PAUSE_AT)
        if paused and wait_for((markers / "0-1").exists, PAUSE_S):
            wait_for(lambda: False, PAUSE_S)  # Killed meanwhile: the copy won.
        return f"row-{number}-{PADDING}"

    return marked


def main(argv: list[str]) -> int:
    zk_connect, zk_root, topic, marker_dir = argv
    spark = SparkSession.builder.appName("metaq-standalone-exactly-once").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # Small Arrow batches: the writer gets rows while the paused UDF still holds the rest.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    meta.spark.register(spark)
    try:
        numbers = spark.range(0, ROWS, 1, PARTITIONS)
        frame = numbers.select(
            mark_attempt(marker_dir)(col("id")).alias("value"),
            concat(lit("k"), (col("id") % KEYS).cast("string")).alias("key"),
        )
        frame.write.format("metaq").mode("append").options(
            **{
                "zk.connect": zk_connect,
                "zk.root": zk_root,
                "topic": topic,
                "transactional": "true",
                "rowsPerTransaction": str(ROWS_PER_TRANSACTION),
                "transactionalId": WRITE_ID,
            }
        ).save()
    finally:
        spark.stop()
    print("exactly-once cluster job: done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
