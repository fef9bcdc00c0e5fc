"""Example pipeline: access-log lines -> MetaQ -> Spark counts per status and minute -> MetaQ.

Run it against a running cluster (``tools/metaServer.sh start local`` starts ZooKeeper on
127.0.0.1:2181 and a broker serving the topics ``test`` and ``meta-test``). ``start local``
installs the broker and the client only; the script also needs PySpark (the ``spark`` extra),
and checks for it before it sends anything::

    .venv/bin/pip install -e '.[spark]' --config-settings editable_mode=compat
    .venv/bin/python examples/access_log_pipeline.py --zk-connect 127.0.0.1:2181

Steps, all through the public APIs:

1. a producer sends ``--lines`` synthetic access-log lines (Common Log Format) to the input
   topic, each tagged with this run's id as its attribute;
2. a Spark batch job (``spark.read.format("metaq")``) keeps this run's lines, counts them per
   minute and status code, and writes one JSON message per count to the output topic
   (``df.write.format("metaq")``);
3. a consumer group reads the output topic and prints the counts of this run, which the
   script checks against what it produced (exit status 1 on a mismatch).

Without the modules of the ``spark`` extra it exits with status 2 and one line naming the
command that installs them, before it connects to anything.

The run id makes reruns independent: older lines and counts stay in the topics but are
skipped. Spark's Python workers must import ``meta``: the script points ``PYSPARK_PYTHON``
at its own interpreter unless it is set.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))  # Run from a checkout too.

STATUSES = (200, 200, 200, 200, 301, 304, 404, 500)
PATHS = ("/", "/index.html", "/login", "/api/orders", "/static/app.js")
LINE_PATTERN = r'\[(\d{2}/\w{3}/\d{4}:\d{2}:\d{2}):\d{2} [^\]]+\] "[^"]*" (\d{3}) '
# The modules of the spark extra (setup.cfg) that the Spark job imports.
SPARK_MODULES = ("pyspark", "pyarrow", "pandas")


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zk-connect", default="127.0.0.1:2181", help="ZooKeeper connect string")
    parser.add_argument("--zk-root", default="/meta", help="MetaQ root in ZooKeeper")
    parser.add_argument("--input-topic", default="test", help="topic of the log lines")
    parser.add_argument("--output-topic", default="meta-test", help="topic of the counts")
    parser.add_argument("--lines", type=int, default=1000, help="log lines to produce")
    parser.add_argument("--minutes", type=int, default=3, help="minutes the lines span")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the lines")
    parser.add_argument("--master", default="local[2]", help="Spark master")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="bound on the consumer")
    return parser.parse_args(argv)


def missing_spark_modules() -> list[str]:
    """The modules of the ``spark`` extra that this interpreter cannot import."""
    return [name for name in SPARK_MODULES if importlib.util.find_spec(name) is None]


def spark_install_hint(missing: list[str]) -> str:
    """One line: what is missing and the exact command that installs the ``spark`` extra."""
    return (
        f"{', '.join(missing)} not installed for {sys.executable}; install the spark extra "
        f"with: {sys.executable} -m pip install -e '{CHECKOUT}[spark]' "
        "--config-settings editable_mode=compat"
    )


def synthetic_lines(count: int, minutes: int, seed: int) -> list[tuple[str, str, int]]:
    """``(line, minute, status)`` triples; minute is ``dd/Mon/yyyy:HH:MM`` as in the line."""
    generator = random.Random(seed)
    base = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=minutes)
    lines = []
    for _ in range(count):
        moment = base + timedelta(seconds=generator.randrange(minutes * 60))
        status = generator.choice(STATUSES)
        stamp = moment.strftime("%d/%b/%Y:%H:%M:%S +0000")
        host = f"10.0.{generator.randrange(4)}.{generator.randrange(1, 255)}"
        path = generator.choice(PATHS)
        size = generator.randrange(200, 20_000)
        line = f'{host} - - [{stamp}] "GET {path} HTTP/1.1" {status} {size}'
        lines.append((line, stamp[:17], status))
    return lines


def produce_lines(factory, topic: str, run_id: str, lines) -> None:
    from meta.client import Message

    producer = factory.create_producer()
    producer.publish(topic)
    futures = [
        producer.send_message_async(Message(topic, line.encode(), run_id)) for line, _, _ in lines
    ]
    failed = [f.result(30) for f in futures if not f.result(30).success]
    if failed:
        raise SystemExit(f"{len(failed)} sends failed, e.g. {failed[0].error_message}")


def count_with_spark(spark, args: argparse.Namespace, run_id: str) -> int:
    """The Spark job: read this run's lines, count per (minute, status), write the counts."""
    from pyspark.sql import functions as F

    source = (
        spark.read.format("metaq")
        .option("zk.connect", args.zk_connect)
        .option("zk.root", args.zk_root)
        .option("topic", args.input_topic)
        .load()
        .where(F.col("attribute") == run_id)
    )
    line = F.col("value").cast("string")
    counts = (
        source.select(
            F.regexp_extract(line, LINE_PATTERN, 1).alias("minute"),
            F.regexp_extract(line, LINE_PATTERN, 2).cast("int").alias("status"),
        )
        .groupBy("minute", "status")
        .count()
    )
    output = counts.select(
        F.to_json(F.struct("minute", "status", "count")).alias("value"),
        F.lit(run_id).alias("attribute"),
    ).cache()
    (
        output.write.format("metaq")
        .option("zk.connect", args.zk_connect)
        .option("zk.root", args.zk_root)
        .option("topic", args.output_topic)
        .mode("append")
        .save()
    )
    return output.count()


def consume_counts(factory, args: argparse.Namespace, run_id: str, expected: int) -> list[dict]:
    """A consumer group reads the counts of this run (at most ``--timeout-s`` seconds)."""
    from meta.client import ConsumerConfig

    received: list[dict] = []
    done = threading.Event()
    lock = threading.Lock()

    def on_message(message) -> None:
        if message.attribute != run_id:
            return  # A count of an earlier run.
        with lock:
            received.append(json.loads(message.data))
            if len(received) >= expected:
                done.set()

    consumer = factory.create_consumer(ConsumerConfig(group="access-log-report", zk_sync_s=0.5))
    consumer.subscribe(args.output_topic, 1 << 20, on_message)
    consumer.complete_subscribe()
    try:
        done.wait(args.timeout_s)
    finally:
        consumer.shutdown()
    with lock:
        return list(received)


def spark_session(master: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import meta.spark

    spark = (
        SparkSession.builder.master(master)
        .appName("metaq-access-log-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    meta.spark.register(spark)
    return spark


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    missing = missing_spark_modules()
    if missing:
        print(spark_install_hint(missing), file=sys.stderr)
        return 2
    from meta.client import MetaClientConfig, MetaMessageSessionFactory

    run_id = f"run-{uuid.uuid4().hex[:12]}"
    lines = synthetic_lines(args.lines, args.minutes, args.seed)
    config = MetaClientConfig(zk_connect=args.zk_connect, zk_root=args.zk_root)
    began = time.monotonic()
    with MetaMessageSessionFactory(config) as factory:
        produce_lines(factory, args.input_topic, run_id, lines)
        print(f"{run_id}: produced {len(lines)} lines to {args.input_topic}", flush=True)
        spark = spark_session(args.master)
        try:
            written = count_with_spark(spark, args, run_id)
        finally:
            spark.stop()
        print(f"{run_id}: Spark wrote {written} counts to {args.output_topic}", flush=True)
        counts = consume_counts(factory, args, run_id, written)
    for entry in sorted(counts, key=lambda e: (e["minute"], e["status"])):
        print(f"{entry['minute']}  {entry['status']}  {entry['count']}")
    expected = Counter((minute, status) for _line, minute, status in lines)
    got = Counter({(e["minute"], e["status"]): e["count"] for e in counts})
    if got != expected or len(counts) != len(expected):
        print(f"{run_id}: MISMATCH: expected {dict(expected)}", file=sys.stderr)
        return 1
    print(
        f"{run_id}: OK: {len(counts)} counts, {sum(got.values())} lines, "
        f"{time.monotonic() - began:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
