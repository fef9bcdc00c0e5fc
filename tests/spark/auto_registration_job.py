"""A Spark job that reads a topic with ``format("metaq")`` and never calls ``register``.

``tests/spark/test_registration.py`` runs it as a script, with the interpreter of the
environment under test, from a directory outside the checkout, so that only what that
environment installs can make PySpark find the source.

    python auto_registration_job.py ZK_CONNECT ZK_ROOT TOPIC

Prints one JSON line: the sorted values of the topic's messages, decoded as UTF-8.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession


def main(argv: list[str]) -> int:
    zk_connect, zk_root, topic = argv
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("metaq-auto-registration")
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
