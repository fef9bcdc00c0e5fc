"""A local Spark job run with ``PYSPARK_PYTHON`` unset: ``register`` picks the workers' Python.

``tests/spark/test_workers.py`` runs it with a ``python3`` first on ``PATH`` that cannot
import kazoo (PySpark's default interpreter for Python workers).

    python worker_python_job.py ZK_CONNECT ZK_ROOT TOPIC

Prints one JSON line: the sorted values of the topic's messages, decoded as UTF-8.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

import meta.spark


def main(argv: list[str]) -> int:
    zk_connect, zk_root, topic = argv
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("metaq-worker-python")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        meta.spark.register(spark)
        frame = (
            spark.read.format("metaq")
            .option("zk.connect", zk_connect)
            .option("zk.root", zk_root)
            .option("topic", topic)
            .load()
        )
        values = sorted(bytes(row.value).decode("utf-8") for row in frame.collect())
    finally:
        spark.stop()
    print(json.dumps(values))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
