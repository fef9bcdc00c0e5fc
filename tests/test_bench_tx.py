"""Tests of the transaction scenario of the benchmark (``meta.bench_tx``).

The frames of one transaction are checked through the shared decoder; a ``--quick`` run
against a broker it starts itself must report both rates (pipelined puts and transactions)
and their ratio on stdout and in the JSON. No timing assertions: the numbers only have to be
there and be positive.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from meta.bench_tx import TransactionFrames
from meta.protocol.codec import NEED_DATA, Decoder
from meta.protocol.commands import Put, Transaction
from meta.protocol.message import checksum

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 120


def test_transaction_frames_decode_as_begin_puts_and_one_phase_commit():
    frames = TransactionFrames("bench-tx", 100, 3)
    decoder = Decoder()
    decoder.receive_data(frames.transaction(b"s-1", 7, 41))
    commands = []
    while (command := decoder.next_command()) is not NEED_DATA:
        commands.append(command)
    assert [type(command) for command in commands] == [Transaction, Put, Put, Put, Transaction]
    begin, *puts, commit = commands
    assert (begin.tx_key, begin.session_id, begin.type, begin.opaque) == (
        "TX:s-1:7",
        "s-1",
        "BEGIN",
        41,
    )
    assert [put.opaque for put in puts] == [42, 43, 44]
    assert all(put.tx_key == "TX:s-1:7" and put.partition == 0 for put in puts)
    assert all(put.checksum == checksum(put.data) and len(put.data) == 100 for put in puts)
    assert (commit.type, commit.opaque) == ("COMMIT_ONE_PHASE", 45)
    assert frames.opaques == 5


@pytest.mark.integration
def test_bench_tx_help_runs():
    completed = subprocess.run(
        [sys.executable, "-m", "meta.bench_tx", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr
    assert "--tx-messages" in completed.stdout and "--quick" in completed.stdout


@pytest.mark.integration
def test_quick_run_reports_tx_and_pipelined_rates_and_their_ratio(tmp_path: Path):
    output = tmp_path / "bench-tx.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "meta.bench_tx",
            "--quick",
            "--max-transactions",
            "20",
            "--connections",
            "2",
            "--json",
            str(output),
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "tx / pipelined" in completed.stdout
    report = json.loads(output.read_text())
    assert report["errors"] == []
    rows = {row["scenario"]: row for row in report["results"]}
    assert set(rows) == {"pipelined", "tx"}
    tx = rows["tx"]
    assert tx["transactions"] == 20 and tx["messages"] == 200 and tx["msg_per_s"] > 0
    assert rows["pipelined"]["messages"] > 0 and rows["pipelined"]["msg_per_s"] > 0
    (comparison,) = report["comparisons"]
    assert comparison["mode"] == "0" and comparison["tx_over_pipelined"] > 0
    assert comparison["target_ratio"] == 0.5
    assert not list(tmp_path.glob("metaq-bench-tx-*")), "temporary broker dirs were left behind"
