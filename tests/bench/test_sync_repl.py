"""``meta.bench.sync_repl``'s report: rates, CPU per message, p99s and targets from the
totals of both sides (the run itself needs a gregor slave and real brokers)."""

from __future__ import annotations

from types import SimpleNamespace

from meta.bench.sync_repl import Side, format_report, parse_arguments, report


def side(name: str, totals: dict) -> Side:
    result = Side(name, SimpleNamespace(address=("127.0.0.1", 1)), [])
    result.totals = totals
    return result


def test_the_report_compares_the_replicated_side_with_the_plain_one():
    plain = side(
        "plain",
        {
            "pipelined": {"messages": 1000, "seconds": 1.0, "cpu_s": [0.01], "lat": []},
            "latency": {"messages": 100, "seconds": 1.0, "cpu_s": [0.01], "lat": [0.001] * 100},
        },
    )
    replicated = side(
        "replicated",
        {
            "pipelined": {
                "messages": 300,
                "seconds": 1.0,
                "cpu_s": [0.006, 0.009],
                "lat": [],
                "rounds": [280, 320],
            },
            "latency": {
                "messages": 100,
                "seconds": 1.0,
                "cpu_s": [0.02, 0.01],
                "lat": [0.004] * 100,
            },
        },
    )
    result = report(parse_arguments([]), [plain, replicated])
    pipelined = result["pipelined"]
    assert (pipelined["rate_ratio"], pipelined["met"]) == (0.3, False)
    assert pipelined["plain"]["cpu_us_per_msg"] == [10.0]
    assert pipelined["replicated"]["cpu_us_per_msg"] == [20.0, 30.0]
    assert pipelined["replicated"]["rounds_msg_per_s"] == [280, 320]
    assert pipelined["plain"]["rounds_msg_per_s"] == []
    latency = result["latency"]
    assert (latency["p99_ratio"], latency["met"]) == (4.0, False)
    text = format_report(result)
    assert "pipelined" in text and "20.0 + 30.0" in text and "p99 ms: plain 1.0" in text
