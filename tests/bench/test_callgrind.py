"""``meta.bench.callgrind``: the broker's instructions per message under callgrind.

The pure parts (arguments, a dump's totals) are checked directly; one short run of the
``sync`` and ``concurrent`` shapes against a real broker under valgrind checks the whole tool.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from meta.bench import callgrind
from meta.bench.load import BenchError

REPO = Path(__file__).resolve().parents[2]


def test_a_dumps_totals_line_gives_the_instructions(tmp_path):
    dump = tmp_path / "callgrind.out.1"
    dump.write_text("# callgrind format\nevents: Ir\nsummary: 0\n\nfn=(1) f\n1 5\ntotals: 1234\n")
    assert callgrind.dump_totals(dump) == 1234
    dump.write_text("events: Ir\n")
    with pytest.raises(BenchError):
        callgrind.dump_totals(dump)


def test_unknown_shapes_and_counts_below_one_are_refused():
    with pytest.raises(SystemExit):
        callgrind.parse_arguments(["--shapes", "sync,bogus"])
    with pytest.raises(SystemExit):
        callgrind.parse_arguments(["--messages", "0"])
    assert callgrind.parse_arguments(["--shapes", "sync"]).shapes == ["sync"]


def test_a_counted_broker_runs_with_a_fixed_hash_seed(tmp_path: Path):
    """Attribute names' hashes index CPython's type attribute cache; a random seed per run
    moved the same build's count by up to 2%."""
    command = callgrind.launcher(tmp_path / "callgrind.out")
    assert command[:2] == ("env", f"PYTHONHASHSEED={callgrind.HASH_SEED}")
    assert command[2:5] == ("valgrind", "--tool=callgrind", "--instr-atstart=no")
    assert command[5] == f"--callgrind-out-file={tmp_path / 'callgrind.out'}"


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_a_short_run_counts_instructions_for_each_shape_asked_for():
    completed = subprocess.run(
        [sys.executable, "-m", "meta.bench.callgrind", "--shapes", "sync,concurrent"]
        + ["--messages", "40", "--warmup", "10", "--connections", "4", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr
    rows = json.loads(completed.stdout)
    assert [row["shape"] for row in rows] == ["sync", "concurrent"]
    for row in rows:
        assert row["messages"] == 40
        # A put costs the broker tens of thousands of instructions; far fewer means the
        # counting missed the shape, far more that it counted the broker's start.
        assert 5_000 < row["instructions_per_message"] < 2_000_000
