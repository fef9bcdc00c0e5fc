"""The abuse benchmark (``meta.bench.abuse``) runs end to end on tiny numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 180


def test_a_tiny_run_reports_the_quiet_round_trip_and_one_under_each_abuse():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "meta.bench.abuse",
            "--json",
            "--seconds",
            "0.5",
            "--get-connections",
            "2",
            "--poll-connections",
            "2",
            "--polls",
            "20",
            "--idle-connections",
            "5",
            "--slow-connections",
            "3",
            "--http-slow-connections",
            "70",
            "--http-pipelined-connections",
            "2",
            "--http-nonreading-connections",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["quiet"]["round_trips"] > 0
    assert [entry["abuse"] for entry in report["abuses"]] == [
        "gets",
        "long-poll",
        "idle",
        "slowloris",
        "http-slowloris",
        "http-pipelined",
        "http-nonreading",
    ]
    for entry in report["abuses"]:
        assert entry["round_trips"] > 0
        assert 0 < entry["p50_ms"] <= entry["p99_ms"] <= entry["max_ms"]
        assert entry["broker_rss_mib"] > 0
        if entry["abuse"].startswith("http-"):
            assert entry["http_failed"] >= 0
