"""Smoke test of ``tools/bench``: a ``--quick`` run against brokers it starts itself.

Checks the exit status, that every scenario produced a row with positive numbers in every
flush mode (and the machine's steal share over it), and that the JSON carries the
parameters, machine info and targets.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from meta.bench import abuse as bench_abuse
from meta.bench.steal import cpu_times

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "tools" / "bench"
RUN_TIMEOUT_S = 120


def test_bench_help_runs():
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--help"], capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    assert "--broker" in completed.stdout and "--quick" in completed.stdout


def test_broker_pid_needs_an_external_broker():
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--broker-pid", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 2
    assert "--broker-pid goes with --broker" in completed.stderr


def test_quick_run_reports_every_scenario(tmp_path: Path):
    output = tmp_path / "bench.json"
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(output), "--data-dir", tmp_path],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "targets" in completed.stdout
    report = json.loads(output.read_text())
    for key in ("timestamp", "parameters", "machine", "fsync", "results", "targets", "errors"):
        assert key in report
    assert report["errors"] == []
    assert report["machine"]["cpu_count"] >= 1 and report["machine"]["python"]
    assert report["fsync"]["per_s"] > 0
    rows = {(row["scenario"], row["mode"]): row for row in report["results"]}
    for mode in ("0", "1", "1000"):
        for scenario in ("sync", "pipelined", "unbatched", "concurrent"):
            row = rows[(scenario, mode)]
            assert row["messages"] > 0 and row["msg_per_s"] > 0 and row["mb_per_s"] > 0
            # Broker CPU is counted in clock ticks (10 ms): a short run may read as 0.
            assert row["broker_cpu_us_per_msg"] >= 0
            assert row["broker_cpu_us_per_msg"] == pytest.approx(
                row["broker_cpu_s"] / row["messages"] * 1e6
            )
    assert "brk us/msg" in completed.stdout
    # The machine's steal share over each row (meta.bench.steal), the table's last column.
    (header,) = [line for line in completed.stdout.splitlines() if line.startswith("scenario ")]
    assert header.split()[-1] == "steal"
    steal_column = cpu_times().steal_ticks is not None
    shares = [row["steal_share"] for row in report["results"]]
    if steal_column:
        # None only for a row shorter than a clock tick of the whole machine (nothing measured).
        assert all(share is None or 0 <= share <= 1 for share in shares)
        assert any(share is not None for share in shares)
    else:
        assert shares == [None] * len(shares)
    # The fsync target compares the mode-1 producer with the disk measured in turns with it.
    assert rows[("sync", "1")]["paired_fdatasync_per_s"] > 0
    (fsync_target,) = [entry for entry in report["targets"] if "fraction_of_fdatasync" in entry]
    assert fsync_target["fdatasync_paired"] is True
    assert fsync_target["fdatasync_per_s"] == rows[("sync", "1")]["paired_fdatasync_per_s"]
    assert "measured in turns with it" in completed.stdout
    consume = rows[("consume", "1000")]
    assert consume["messages"] == report["parameters"]["backlog_messages"]
    assert consume["mb_per_s"] > 0
    latency = rows[("latency", "0")]
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["p999_ms"]
    consumer = rows[("consumer", "1000")]
    assert consumer["messages"] == report["parameters"]["backlog_messages"]
    assert consumer["msg_per_s"] > 0
    http = rows[("http", "1000")]  # its own broker (meta.bench.http), HTTP and TCP in turns
    assert http["msg_per_s"] > 0 and http["tcp_msg_per_s"] > 0 and http["mb_per_s"] > 0
    assert http["broker_cpu_us_per_msg"] > 0 and http["tcp_broker_cpu_us_per_msg"] > 0
    assert {entry["scenario"] for entry in report["targets"]} >= {"http"}
    sync_repl = rows[("sync-repl", "1000")]  # a plain broker, a samsa master and its slave
    assert sync_repl["msg_per_s"] > 0 and sync_repl["plain_msg_per_s"] > 0
    for key in ("sync_ratio", "pipelined_ratio", "p99_ratio", "slave_cpu_us_per_msg"):
        assert sync_repl[key] > 0
    assert "sync replication (samsa master + gregor slave" in completed.stdout
    assert {"sync-repl"} <= {entry["scenario"] for entry in report["targets"]}
    group = rows[("group", "1000")]  # its own ZooKeeper and broker (meta.bench.group)
    assert group["messages"] == report["parameters"]["backlog_messages"]
    assert group["msg_per_s"] > 0 and group["client_cpu_us_per_msg"] > 0
    assert group["members"] == 2 and group["partitions"] == 4
    for key in ("join_s", "rebalance_join_s", "rebalance_leave_s"):
        assert 0 < group[key] < 60
    assert "consumer group of 2 over 4 partitions" in completed.stdout
    dashboard = rows[("dashboard", "0")]  # its own broker (meta.bench.dashboard)
    assert dashboard["messages"] > 0 and dashboard["alone_msg_per_s"] > 0
    # Broker CPU is counted in clock ticks (10 ms): five small scrapes may read as 0.
    assert dashboard["scrape_cpu_ms"] >= 0 and dashboard["scrapes"] == 5
    assert dashboard["partitions"] == 20
    assert "a /metrics scrape of 20 partitions costs" in completed.stdout
    abuse = rows[("abuse", "0")]  # its own broker (meta.bench.abuse)
    assert abuse["quiet_p99_ms"] > 0
    assert all(abuse[f"{name}_p99_ms"] > 0 for name in bench_abuse.ROW_NAMES)
    http_rows = [name for name in bench_abuse.ROW_NAMES if name.startswith("http_")]
    assert http_rows and all(abuse[f"{name}_http_failed"] >= 0 for name in http_rows)
    assert "abuse: a victim's version round trip p99 quiet" in completed.stdout
    e2e = rows[("e2e", "0")]
    assert e2e["messages"] > 0 and 0 < e2e["p50_ms"] <= e2e["p99_ms"]
    for mode in ("0", "1", "1000"):
        tx = rows[("tx", mode)]
        assert tx["transactions"] > 0 and tx["messages"] == 10 * tx["transactions"]
        # Measured in turns with the pipelined producer; the target compares the two so.
        assert tx["paired_pipelined_msg_per_s"] > 0 and len(tx["paired_ratios"]) > 1
        (tx_target,) = [
            entry
            for entry in report["targets"]
            if entry["scenario"] == "tx" and entry["mode"] == mode
        ]
        assert tx_target["target"] == 0.5 * tx["paired_pipelined_msg_per_s"]
    assert "pipelined msg/s measured in turns with them" in completed.stdout
    scenarios = {entry["scenario"] for entry in report["targets"]}
    assert scenarios >= {"pipelined", "consume", "tx", "consumer", "e2e", "dashboard"}
    assert all(entry["ratio"] > 0 for entry in report["targets"])
    assert not list(tmp_path.glob("metaq-bench-*")), "temporary broker dirs were left behind"


def test_a_subset_of_produce_scenarios_runs_in_every_mode_asked_for(tmp_path: Path):
    """``--scenarios tx`` (or ``client``) needs a broker in each mode, as sync does."""
    output = tmp_path / "bench.json"
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--scenarios", "tx", "--modes", "0,1"]
        + ["--json", str(output), "--data-dir", tmp_path],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    rows = {(row["scenario"], row["mode"]) for row in json.loads(output.read_text())["results"]}
    assert {("tx", "0"), ("tx", "1")} <= rows
