"""Smoke test of ``meta.bench.scrub`` at a tiny size (no timing assertions)."""

from __future__ import annotations

from meta.bench import scrub as bench_scrub


def test_the_bench_runs_turns_with_the_scrubber_on_and_off(capsys):
    argv = ["--fill-mib", "1", "--segment-mib", "1", "--seconds", "0.3", "--turns", "1"]
    assert bench_scrub.main([*argv, "--latency-rate", "50", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"median_sync_rate_ratio_on_off"' in out
    assert '"scrub_bytes_per_s": 4194304' in out and '"scrub_bytes_per_s": 0' in out


def test_the_broker_config_sets_the_scrub_rate(tmp_path):
    broker = bench_scrub.ScrubBroker(tmp_path, threshold=1000, scrub_bytes_per_s=123)
    assert "[system]\nscrubBytesPerSecond=123\n" in broker.server_ini()
