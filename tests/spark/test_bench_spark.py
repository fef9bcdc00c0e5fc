"""Smoke test of ``meta.bench.spark`` at a tiny size (no timing assertions)."""

from __future__ import annotations

import pytest

from meta.bench import spark as bench_spark
from meta.bench.spark_null import null_batches
from meta.spark.schema import ARROW_SCHEMA

pytestmark = pytest.mark.integration


def test_bench_reads_the_whole_backlog_and_reports_rates(spark, tmp_path):
    """Goal: the bench runs end to end (ZooKeeper, broker, produce, raw consume, Spark).

    Method: 2 MB in 1 MiB segments and pieces, and one turn of 500 rows per writer, through
    the session's Spark; check counts and the report's shape only (and that CPU is found for
    the reader and the Spark JVM). The bench itself checks that each writer's topic holds
    exactly the rows written to it.
    """
    sizes = ["--megabytes", "2", "--segment-mb", "1", "--piece-mb", "1"]
    args = bench_spark.parse_arguments([*sizes, "--write-messages", "500", "--write-turns", "1"])
    report = bench_spark.run(args, tmp_path, spark)
    assert report["messages"] == 2_000_000 // 1024
    names = ("raw_consume", "null_count", "null_parquet", "spark_count", "spark_parquet")
    for name in names:
        assert report[name]["messages"] == report["messages"]
        assert report[name]["msg_per_s"] > 0
    assert report["reader"]["messages"] == report["messages"]
    assert report["reader"]["cpu_us_per_msg"] > 0
    for name in names[1:]:
        roles = report[name]["cpu_us_per_msg"]
        assert set(roles) == {"broker", "jvm", "python_workers", "driver"}
        assert roles["jvm"] > 0
    for name in ("spark_count", "spark_parquet"):
        assert report[name]["fraction_of_null"] > 0
    for name in ("write", "write_tx"):
        assert report[name]["messages"] == 500
        assert report[name]["msg_per_s"] > 0
        assert report[name]["cpu_us_per_msg"]["jvm"] > 0
    assert len(report["write_tx"]["turn_ratios"]) == 1
    assert report["write_tx"]["ratio"] > 0
    text = bench_spark.format_report(report)
    assert "of the null source" in text and "CPU microseconds per message" in text
    assert "of write, median of turns" in text
    assert (tmp_path / "parquet").is_dir() and (tmp_path / "null").is_dir()


def test_the_null_source_yields_exactly_the_rows_asked_in_the_source_schema():
    batches = list(null_batches(20_000, 100))
    assert sum(batch.num_rows for batch in batches) == 20_000
    assert all(batch.schema.equals(ARROW_SCHEMA) for batch in batches)
    assert all(len(value) == 100 for value in batches[-1].column("value").to_pylist())


def test_help_names_the_sizes(capsys):
    with pytest.raises(SystemExit):
        bench_spark.parse_arguments(["--help"])
    out = capsys.readouterr().out
    assert "--megabytes" in out and "--write-messages" in out
