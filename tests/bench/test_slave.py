"""Smoke test of ``meta.bench.slave`` at a tiny size (no timing assertions)."""

from __future__ import annotations

import pytest

from meta.bench import slave as bench_slave
from tests.integration.broker_process import run_python

pytestmark = pytest.mark.integration


def test_bench_runs_end_to_end_and_reports_lag_and_replay(tmp_path):
    """Goal: the bench runs end to end (ZooKeeper, master, backlog, raw consume, slave
    catch-up, paced load with the lag measured) and stops everything. Method: 2 MB of
    backlog and one second of 1000 msg/s; check counts and the report's shape only."""
    args = bench_slave.parse_arguments(
        ["--megabytes", "2", "--seconds", "1", "--rate", "1000", "--segment-mb", "1"]
    )
    report = bench_slave.run(args, tmp_path)
    messages = 2_000_000 // 1024
    assert report["messages"] == messages
    for name in ("produce", "raw_consume", "checked_consume", "slave_replay"):
        assert report[name]["messages"] == messages
        assert report[name]["msg_per_s"] > 0
    for name in ("raw_consume", "checked_consume", "slave_replay"):
        # Present on Linux (/proc and thread_time); may round to 0 at this size, since
        # /proc counts CPU in 10 ms ticks.
        assert report[name]["cpu_ms_per_mib"] >= 0
    assert report["backlog_bytes"] == messages * (1024 + 20)
    lag = report["lag"]
    assert lag["messages"] == 1000
    assert 0 <= lag["p50_ms"] <= lag["p99_ms"] <= lag["max_ms"]
    assert lag["bound_ms"] > 500
    text = bench_slave.format_report(report)
    assert "of raw" in text and "p99" in text and "ms CPU/MiB" in text
    assert "x the pipelined put rate" in text
    replay = report["slave_replay"]
    assert replay["times_produce"] == round(replay["msg_per_s"] / report["produce"]["msg_per_s"], 2)
    assert replay["meets_cpu_target"] == (replay["cpu_ms_per_mib"] <= 1.3)
    floor = report["floor"]  # the durable write floor of the same backlog size
    assert floor["messages"] == messages and floor["fdatasyncs"] >= 1
    assert floor["cpu_ms_per_mib"] >= 0 and floor["user_ms_per_mib"] >= 0
    assert replay["fraction_of_floor"] == round(replay["msg_per_s"] / floor["msg_per_s"], 2)
    assert "of the floor's rate" in text and "fdatasyncs" in text
    assert list((tmp_path / "slave" / "data").glob("durable-write-floor*")) == []
    threads = report["slave_threads"]  # named by the bench's bootstrap
    assert {"reactor", "meta-fetch-0", "meta-store-flus"} <= set(threads)
    assert any(name.startswith("metaq-reader") for name in threads)
    busy = [name for name, row in threads.items() if row["ms_per_mib"]]
    thread_lines = [line for line in text.splitlines() if line.split()[0] == "thread"]
    assert len(thread_lines) == len(busy)
    assert all(f"thread {name:15} " in line for name, line in zip(busy, thread_lines, strict=True))
    assert (tmp_path / "zookeeper" / "zookeeper.log").exists()
    assert not (tmp_path / "zookeeper" / "zookeeper.pid").exists()  # ZooKeeper stopped
    for broker in ("master", "slave"):
        assert "stopped" in (tmp_path / broker / "broker.log").read_text()


def test_help_names_the_options():
    done = run_python("-m", "meta.bench.slave", "--help")
    options = (
        "--megabytes",
        "--rate",
        "--seconds",
        "--slave-max-delay-ms",
        "--json",
        "--slave-code",
    )
    for option in options:
        assert option in done.stdout
