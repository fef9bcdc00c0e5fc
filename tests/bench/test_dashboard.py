"""The dashboard benchmark (``meta.bench.dashboard``) runs end to end on tiny numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 180


def test_a_tiny_run_reports_the_scrape_cost_and_both_rates():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "meta.bench.dashboard",
            "--json",
            "--partitions",
            "5",
            "--scrapes",
            "3",
            "--turns",
            "1",
            "--seconds",
            "0.5",
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["partitions"] == 5
    assert report["scrape"]["scrapes"] == 3
    assert report["scrape"]["bytes_per_scrape"] > 0
    assert len(report["turns"]["alone_msg_per_s"]) == 1
    assert all(rate > 0 for rate in report["turns"]["polled_msg_per_s"])
    assert report["turns"]["ratio"] > 0
