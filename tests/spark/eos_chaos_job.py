"""The driver of the exactly-once chaos test: streaming copies of one topic to other topics.

``tests/spark/test_exactly_once_chaos.py`` starts it as a process of its own (so that it can
``kill -9`` it and start it again)::

    eos_chaos_job.py ZK_CONNECT ZK_ROOT SOURCE MAX_BYTES (SINK CHECKPOINT TRANSACTIONAL)...

For each ``SINK CHECKPOINT TRANSACTIONAL`` triple it runs one streaming query, side by side
in one application: the query copies the ``value`` of every message of ``SOURCE`` to ``SINK``
with a ``metaq`` stream (a micro-batch every ``TRIGGER``, at most ``MAX_BYTES`` of the source
each, the checkpoint in ``CHECKPOINT``), with ``transactional=TRANSACTIONAL`` (``true`` or
``false``). It runs until it is killed: the test reads the progress of each query from its
checkpoint. Started again after a crash, each query goes on from its checkpoint. A query
that fails (a broker went away, a task failed ``TASK_ATTEMPTS_MAX`` times) is started again
from its checkpoint, up to ``QUERY_STARTS_MAX`` times per query, as an application that
restarts its queries would; the other queries keep running meanwhile.

Prints ``query started: SINK`` at each start of a query and ``query failed: ...`` at each
failure.
"""

from __future__ import annotations

import sys
import time

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

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


def start_query(
    spark: SparkSession, zk: dict[str, str], source: str, max_bytes: str, copy: tuple[str, ...]
) -> StreamingQuery:
    """Start the copy ``(sink, checkpoint, transactional)`` from its checkpoint."""
    sink, checkpoint, transactional = copy
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
    print(f"query started: {sink}", flush=True)
    return query


def failure_line(query: StreamingQuery) -> str:
    """The first line of why ``query`` ended."""
    error = query.exception()
    return str(error).strip().splitlines()[0][:300] if error else "ended without an error"


def run_queries(spark: SparkSession, argv: list[str]) -> None:
    """Run every copy, restarting a failed one, until one fails too often (it raises)."""
    zk_connect, zk_root, source, max_bytes, *triples = argv
    assert triples and len(triples) % 3 == 0, triples
    zk = {"zk.connect": zk_connect, "zk.root": zk_root}
    copies = [tuple(triples[index : index + 3]) for index in range(0, len(triples), 3)]
    queries = {copy: start_query(spark, zk, source, max_bytes, copy) for copy in copies}
    starts = dict.fromkeys(copies, 1)
    while True:
        try:
            spark.streams.awaitAnyTermination()
        except StreamingQueryException:
            pass  # Each ended query says why below.
        # Forget the terminations first, then look: a query that ends after this look is a
        # new termination, and the next wait returns at once.
        spark.streams.resetTerminated()
        for copy, query in queries.items():
            if query.isActive:
                continue
            print(f"query failed: {copy[0]}: {failure_line(query)}", flush=True)
            if starts[copy] == QUERY_STARTS_MAX:
                raise RuntimeError(f"the copy to {copy[0]} failed {QUERY_STARTS_MAX} times")
            time.sleep(RESTART_PAUSE_S)  # A pause between restarts, as a supervisor's.
            queries[copy] = start_query(spark, zk, source, max_bytes, copy)
            starts[copy] += 1


def main(argv: list[str]) -> int:
    spark = session()
    spark.sparkContext.setLogLevel("ERROR")
    meta.spark.register(spark)
    try:
        run_queries(spark, argv)
    finally:
        for query in spark.streams.active:
            query.stop()
        spark.stop()
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
