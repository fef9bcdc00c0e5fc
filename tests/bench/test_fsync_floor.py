"""Smoke test of ``meta.bench.fsync_floor`` at a tiny duration (no timing assertions)."""

from __future__ import annotations

import json
import os
import select
import subprocess

import pytest

from meta.bench import fsync_floor as bench_fsync_floor
from tests.integration.broker_process import run_python


def run_module(*arguments: str) -> subprocess.CompletedProcess:
    return run_python("-m", "meta.bench.fsync_floor", *arguments)


def test_every_variant_serves_a_synchronous_producer(tmp_path):
    """Every server, the broker included, answers the producer; each rate is paired with an
    fdatasync rate; nothing is left in the data directory."""
    report = json.loads(
        run_module(
            "--seconds",
            "0.2",
            "--slices",
            "2",
            "--rounds",
            "1",
            "--data-dir",
            str(tmp_path),
            "--json",
        ).stdout
    )
    (round_,) = report["rounds"]
    for variant in bench_fsync_floor.VARIANTS:
        if variant == "aio" and not bench_fsync_floor.aio_available():
            assert round_[variant] is None
            continue
        row = round_[variant]
        assert row["per_s"] > 0 and row["fdatasync_per_s"] > 0, variant
        assert row["fraction"] == pytest.approx(row["per_s"] / row["fdatasync_per_s"])
        assert report["summary"][variant]["fractions"] == [row["fraction"]]
    assert list(tmp_path.iterdir()) == []


def test_help_names_the_options():
    out = run_module("--help").stdout
    for option in ("--seconds", "--slices", "--rounds", "--data-dir", "--json"):
        assert option in out


@pytest.mark.skipif(not bench_fsync_floor.aio_available(), reason="Linux AIO on x86_64 only")
def test_an_aio_fdatasync_completes_through_its_eventfd(tmp_path):
    fd = os.open(tmp_path / "file", os.O_CREAT | os.O_WRONLY, 0o600)
    aio = bench_fsync_floor.AioFdatasync(fd)
    try:
        os.write(fd, b"x" * 1024)
        aio.submit()
        ready, _, _ = select.select([aio.eventfd], [], [], 10)
        assert ready == [aio.eventfd]
        assert aio.completed() == 1
    finally:
        aio.close()
        os.close(fd)
