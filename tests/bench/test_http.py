"""Smoke test of ``meta.bench.http`` at a tiny size (no timing assertions)."""

from __future__ import annotations

import pytest

from meta.bench import http as bench_http

pytestmark = pytest.mark.integration


def test_bench_runs_both_transports_in_turns_and_reports_ratios(tmp_path):
    """Goal: the HTTP bench runs end to end and stops its broker. Method: 2 connections for
    0.2 s per turn and a 1 MB backlog; check the report's shape only."""
    arguments = bench_http.parse_arguments(
        ["--connections", "2", "--duration-s", "0.2", "--rounds", "1", "--backlog-mb", "1"]
    )
    report = bench_http.run(arguments, tmp_path)
    for name in ("tcp", "http"):
        assert report["put_msg_per_s"][name][0] > 0
        assert report["get_mb_per_s"][name][0] > 0
    assert report["put_ratio"] > 0
    assert report["get_ratio"] > 0
    text = bench_http.format_report(report)
    assert "http/tcp" in text
    assert "stopped" in (tmp_path / "broker" / "broker.log").read_text()
