"""A Spark application for a standalone cluster: every kind of ``metaq`` job, once.

``tests/spark/test_cluster.py`` submits it with ``spark-submit --master spark://...``:

    cluster_job.py ZK_CONNECT ZK_ROOT TOPIC STREAM_TOPIC BATCH_TOPIC OUT_DIR

1. a batch read of ``TOPIC``, collected to ``OUT_DIR/batch.json`` (one object per row);
2. a Parquet write of the same read to ``OUT_DIR/parquet``;
3. a streaming read of ``TOPIC`` with ``Trigger.AvailableNow``, written by the streaming
   writer to ``STREAM_TOPIC`` (value and attribute);
4. a batch write of ``TOPIC``'s values and attributes to ``BATCH_TOPIC``.

Only options reach the executors: they find brokers through the ZooKeeper metadata the plan
carries (reads) or through ZooKeeper itself (writes). Exits 0 when all four ran.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession

import meta.spark

STREAM_TIMEOUT_S = 90


def main(argv: list[str]) -> int:
    zk_connect, zk_root, topic, stream_topic, batch_topic, out = argv
    out_dir = Path(out)
    spark = SparkSession.builder.appName("metaq-standalone-cluster").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    meta.spark.register(spark)
    zk = {"zk.connect": zk_connect, "zk.root": zk_root}
    try:
        frame = spark.read.format("metaq").options(**zk).option("topic", topic).load()
        rows = [
            {
                "msg_id": row.msg_id,
                "partition": row.partition,
                "offset": row.offset,
                "value": bytes(row.value).decode("utf-8"),
                "attribute": row.attribute,
            }
            for row in frame.collect()
        ]
        (out_dir / "batch.json").write_text(json.dumps(rows))
        frame.write.mode("overwrite").parquet(str(out_dir / "parquet"))

        stream = spark.readStream.format("metaq").options(**zk).option("topic", topic).load()
        query = (
            stream.select("value", "attribute")
            .writeStream.format("metaq")
            .options(**zk)
            .option("topic", stream_topic)
            .option("checkpointLocation", str(out_dir / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(STREAM_TIMEOUT_S):
            query.stop()
            raise RuntimeError(f"the AvailableNow query did not end in {STREAM_TIMEOUT_S} s")

        frame.select("value", "attribute").write.format("metaq").options(**zk).option(
            "topic", batch_topic
        ).mode("append").save()
    finally:
        spark.stop()
    print("cluster job: done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
