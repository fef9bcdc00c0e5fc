"""The machine's steal share over a bench row (``meta.bench.steal``), from ``/proc/stat``
texts written here: with a steal column, without one, and without a ``cpu`` line."""

from __future__ import annotations

import pytest

from meta.bench.steal import CpuTimes, cpu_times, parse_cpu_line, steal_share

WITH_STEAL = """cpu  100 10 50 800 20 0 5 15 40 0
cpu0 50 5 25 400 10 0 2 7 20 0
intr 12345
"""
"""user 100, nice 10, system 50, idle 800, iowait 20, irq 0, softirq 5, steal 15 (then guest
40 and guest_nice 0, already in user and nice): 1000 ticks, 15 of them stolen."""

OLD_KERNEL = "cpu  100 10 50 800 20 0 5\nintr 12345\n"
"""A kernel older than the steal column (before 2.6.11): seven values."""


def test_the_cpu_line_gives_the_ticks_up_to_steal_and_the_steal_ticks():
    assert parse_cpu_line(WITH_STEAL) == CpuTimes(1000, 15)


def test_a_cpu_line_without_a_steal_column_gives_no_steal():
    assert parse_cpu_line(OLD_KERNEL) == CpuTimes(985, None)


def test_a_text_without_a_cpu_line_gives_nothing():
    assert parse_cpu_line("intr 12345\n") is None


def test_the_steal_share_is_the_stolen_part_of_all_the_time_between_two_samples():
    assert steal_share(CpuTimes(1000, 15), CpuTimes(1400, 115)) == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (CpuTimes(985, None), CpuTimes(1385, None)),  # no steal column
        (None, CpuTimes(1400, 115)),  # no /proc/stat
        (CpuTimes(1000, 15), CpuTimes(1000, 15)),  # no time between the samples
    ],
)
def test_the_steal_share_is_none_where_it_cannot_be_told(before, after):
    assert steal_share(before, after) is None


def test_a_missing_file_gives_no_sample(tmp_path):
    assert cpu_times(tmp_path / "stat") is None


def test_a_sample_reads_the_file_it_is_given(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(WITH_STEAL)
    assert cpu_times(stat) == CpuTimes(1000, 15)
