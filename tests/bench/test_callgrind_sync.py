"""``meta.bench.callgrind_sync``: its arguments, rows and report (the pure parts).

A run under valgrind starts two brokers and counts thousands of puts, over a minute on the
2-core VM, so the whole tool is not run here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from meta.bench import callgrind_sync


def test_counts_below_one_and_a_negative_threshold_are_refused():
    for argv in (["--messages", "0"], ["--warmup", "-1"], ["--unflush-threshold", "-1"]):
        with pytest.raises(SystemExit):
            callgrind_sync.parse_arguments(argv)
    arguments = callgrind_sync.parse_arguments(["--no-plain", "--messages", "10"])
    assert (arguments.plain, arguments.messages, arguments.unflush_threshold) == (False, 10, 1000)


def test_each_process_gets_its_instructions_per_put_and_the_pair_is_set_against_plain():
    arguments = callgrind_sync.parse_arguments(["--messages", "4"])
    rows = [
        callgrind_sync.row("plain", 4, 400_000, arguments),
        callgrind_sync.row("master", 4, 800_000, arguments),
        callgrind_sync.row("slave", 4, 440_000, arguments),
    ]
    assert [row["instructions_per_message"] for row in rows] == [100_000, 200_000, 110_000]
    lines = callgrind_sync.format_rows(rows).splitlines()
    assert lines[1].startswith("master  unflushThreshold=1000")
    assert lines[1].endswith("200000 instructions per put")
    assert lines[-1] == "master + slave 310000: 3.10 plain puts"
    assert len(callgrind_sync.format_rows(rows[1:]).splitlines()) == 2  # no plain: no ratio


def test_each_broker_counts_into_its_own_dump_with_counting_off_at_start(tmp_path: Path):
    command = callgrind_sync.launcher(tmp_path)
    assert command[:2] == ("env", "PYTHONHASHSEED=0")
    assert command[2:5] == ("valgrind", "--tool=callgrind", "--instr-atstart=no")
    assert command[5] == f"--callgrind-out-file={tmp_path / 'callgrind.out'}"
