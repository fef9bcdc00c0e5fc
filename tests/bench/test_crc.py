"""Smoke test of ``meta.bench.crc`` at a tiny size (no timing assertions)."""

from __future__ import annotations

import zlib

import pytest

from meta.bench import crc as bench_crc


def test_bench_times_every_installed_implementation_per_record_and_in_bulk():
    report = bench_crc.measure([100, 1024], bulk_kib=64, rounds=1)
    assert report["implementations"][:2] == ["zlib", "zlib-ng"]
    for size in ("100", "1024"):
        assert set(report["per_record_ms_per_mib"][size]) == set(report["implementations"])
    assert all(ms >= 0 for ms in report["bulk_ms_per_mib"].values())
    text = bench_crc.format_report(report)
    assert "per record, 1024 B" in text and "bulk, 64 KiB" in text


def test_an_implementation_that_disagrees_with_zlib_is_refused():
    def wrong(data, value=0):
        return zlib.crc32(data, value) ^ 1

    with pytest.raises(AssertionError, match="wrong"):
        bench_crc.check_agreement({"zlib": zlib.crc32, "wrong": wrong}, b"123456789")


def test_help_and_json_output(capsys):
    assert bench_crc.main(["--sizes", "64", "--bulk-kib", "4", "--rounds", "1", "--json"]) == 0
    assert '"per_record_ms_per_mib"' in capsys.readouterr().out
