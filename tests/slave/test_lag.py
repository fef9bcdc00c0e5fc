"""Replication lag (``meta.slave.lag``) and its ``meta-admin slaves`` parsing."""

from __future__ import annotations

import pytest

from meta.admin.client import BrokerRefusedError
from meta.admin.slaves import parse_lag_line
from meta.slave.lag import PENDING_MAX, LagTracker, parse_offsets, stats_body

A0 = ("a", 0)


def test_bytes_are_the_last_master_end_minus_the_slave_end_now():
    lag = LagTracker()
    lag.observe({A0: 1000}, {A0: 400}, now=10.0)
    assert lag.lag(A0, 400, now=10.0) == (600, 0)
    assert lag.lag(A0, 1000, now=11.0) == (0, 0)
    assert lag.lag(A0, 1200, now=11.0) == (0, 0)  # the slave is past the last observation


def test_seconds_count_from_the_oldest_master_end_the_slave_has_not_reached():
    lag = LagTracker()
    lag.observe({A0: 100}, {A0: 0}, now=10.0)
    lag.observe({A0: 200}, {A0: 50}, now=11.0)
    lag.observe({A0: 300}, {A0: 50}, now=12.0)
    assert lag.lag(A0, 50, now=15.5) == (250, 5)  # 100 was on the master at t=10
    assert lag.lag(A0, 150, now=15.5) == (150, 4)  # 100 reached; 200 was there at t=11
    assert lag.lag(A0, 300, now=15.5) == (0, 0)


def test_a_steady_slave_that_keeps_up_has_no_lag_in_seconds():
    lag = LagTracker()
    for second in range(5):
        end = 1000 * (second + 1)
        lag.observe({A0: end}, {A0: end}, now=float(second))
    assert lag.lag(A0, 5000, now=5.0) == (0, 0)


def test_unknown_partitions_have_no_lag_yet():
    assert LagTracker().lag(A0, 0, now=1.0) == (None, None)


def test_pending_observations_are_bounded_and_keep_the_oldest():
    lag = LagTracker()
    for n in range(PENDING_MAX * 2):
        lag.observe({A0: n + 1}, {A0: 0}, now=float(n))
    assert len(lag._pending[A0]) <= PENDING_MAX
    assert lag.lag(A0, 0, now=2000.0)[1] == 2000


def test_rows_render_states_and_parse_back_in_meta_admin():
    lag = LagTracker()
    lag.observe({A0: 900, ("b", 1): 50}, {A0: 300, ("b", 1): 50}, now=1.0)
    rows = lag.rows(
        {A0: 300, ("b", 1): 50, ("old", 0): 7},
        copied=[A0, ("b", 1)],
        halted=[("b", 1)],
        has_master=True,
        now=4.0,
    )
    body = stats_body(rows)
    lines = body.decode().split("\r\n")
    assert lines[0] == "STATS" and lines[-2:] == ["END", ""]
    assert lines[1] == (
        "a part 0 slave_end 300 master_end 900 lag_bytes 600 lag_seconds 3 state copying"
    )
    parsed = [parse_lag_line(line) for line in lines[1:-2]]
    assert [(r["topic"], r["partition"], r["state"]) for r in parsed] == [
        ("a", 0, "copying"),
        ("b", 1, "halted"),
        ("old", 0, "local-only"),
    ]
    assert parsed[2]["master_end"] is None and parsed[2]["lag_seconds"] is None
    assert parsed[0]["lag_bytes"] == 600


def test_no_master_state_while_the_master_is_gone():
    rows = LagTracker().rows({A0: 5}, copied=[], halted=[], has_master=False, now=0.0)
    assert rows[0].state == "no-master"


def test_stats_offsets_body_is_parsed():
    body = (
        b"STATS\r\na part 0 min_offset 0 max_offset 120\r\n"
        b"b-c part 3 min_offset 5 max_offset 9\r\nEND\r\n"
    )
    assert parse_offsets(body) == {("a", 0): 120, ("b-c", 3): 9}
    with pytest.raises(ValueError):
        parse_offsets(b"STATS\r\nslave\r\nresultCode 1\r\nEND\r\n")


def test_a_line_that_is_not_a_lag_line_is_refused():
    with pytest.raises(BrokerRefusedError, match="unexpected 'stats slave' line"):
        parse_lag_line("resultCode 1")
