"""The driver of the exactly-once chaos test: a streaming copy of one topic to another.

``tests/spark/test_exactly_once_chaos.py`` starts it as a process of its own (so that it can
``kill -9`` it and start it again)::

    eos_chaos_job.py ZK_CONNECT ZK_ROOT SOURCE SINK CHECKPOINT TRANSACTIONAL MAX_BYTES

It copies the ``value`` of every message of ``SOURCE`` to ``SINK`` with a ``metaq`` stream
(a micro-batch every ``TRIGGER``, at most ``MAX_BYTES`` of the source each, the checkpoint in
``CHECKPOINT``), with ``transactional=TRANSACTIONAL`` (``true`` or ``false``), and runs
until it is killed: the test reads its progress from the checkpoint. Started again after a
crash, it goes on from the checkpoint. A query that fails (a broker went away, a task failed
``TASK_ATTEMPTS_MAX`` times) is started again from the checkpoint, up to
``QUERY_STARTS_MAX`` times in all, as an application that restarts its query would.

Prints ``query started`` at each start of the query and ``query failed: ...`` at each
failure.
"""

from __future__ import annotations

import sys
import time

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

import meta.spark

QUERY_STARTS_MAX = 20
RESTART_PAUSE_S = 1.0
TRIGGER = "1 second"
TRANSACTIONAL_ID = "chaos-copy"
TASK_ATTEMPTS_MAX = 4


def session() -> SparkSession:
    """A small local session: two cores, each task tried up to ``TASK_ATTEMPTS_MAX`` times."""
    return (
        SparkSession.builder.master(f"local[2,{TASK_ATTEMPTS_MAX}]")
        .appName("metaq-eos-chaos")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.streaming.stopTimeout", "10s")
        # Python workers connect back to the JVM within this bound; the default (15 s) is
        # too short on a loaded machine, where a worker may take that long to import.
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )


def run_query(spark: SparkSession, argv: list[str]) -> None:
    """Run the copy from the checkpoint until it fails (it raises) or the process ends."""
    zk_connect, zk_root, source, sink, checkpoint, transactional, max_bytes = argv
    zk = {"zk.connect": zk_connect, "zk.root": zk_root}
    stream = (
        spark.readStream.format("metaq")
        .options(**zk)
        .option("topic", source)
        .option("maxBytesPerTrigger", max_bytes)
        .load()
    )
    query = (
        stream.select("value")
        .writeStream.format("metaq")
        .options(**zk)
        .option("topic", sink)
        .option("transactional", transactional)
        .option("transactionalId", TRANSACTIONAL_ID)
        .option("transactionTimeoutMs", "10000")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=TRIGGER)
        .start()
    )
    print("query started", flush=True)
    try:
        query.awaitTermination()
    finally:
        query.stop()


def main(argv: list[str]) -> int:
    spark = session()
    spark.sparkContext.setLogLevel("ERROR")
    meta.spark.register(spark)
    try:
        for start in range(1, QUERY_STARTS_MAX + 1):
            try:
                run_query(spark, argv)
            except StreamingQueryException as error:
                if start == QUERY_STARTS_MAX:
                    raise
                first_line = str(error).strip().splitlines()[0][:300]
                print(f"query failed: {first_line}", flush=True)
                time.sleep(RESTART_PAUSE_S)  # A pause between restarts, as a supervisor's.
    finally:
        spark.stop()
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
