"""HTML building blocks: every value is escaped, charts are inline SVG."""

from __future__ import annotations

import re

from meta.dashboard.html import bar_chart, escape, facts_table, line_chart, table

HOSTILE = "<script>alert(1)</script>"


def test_escape_turns_markup_and_quotes_into_text():
    assert escape(HOSTILE) == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert escape("\"x'") == "&quot;x&#x27;"
    assert escape(None) == "-"


def test_booleans_read_yes_and_no_everywhere():
    assert (escape(True), escape(False)) == ("yes", "no")
    assert "<td>yes</td>" in facts_table([("Publish", True)])
    assert "<td>no</td>" in table(("Subscribe",), [(False,)])


def test_table_cells_are_escaped_unless_marked_raw():
    html = table(("name", "link"), [(HOSTILE, "<a href='#x'>x</a>")], raw_columns=(1,))
    assert HOSTILE not in html
    assert "&lt;script&gt;" in html
    assert "<a href='#x'>x</a>" in html


def test_facts_table_escapes_names_and_values():
    html = facts_table([(HOSTILE, HOSTILE)])
    assert "<script>" not in html


def test_bar_chart_is_svg_with_escaped_labels_and_one_bar_per_value():
    svg = bar_chart(HOSTILE, [(HOSTILE, 10), ("b", 5)], "B")
    assert svg.count("<rect") == 2
    assert "<svg" in svg
    assert "<script>" not in svg


def test_charts_without_data_are_left_out():
    assert bar_chart("t", [], "B") == ""
    assert line_chart("t", [("a", [])], "/s", 2.0) == ""


def test_line_chart_marks_the_newest_value_of_each_series():
    svg = line_chart("rates", [("a", [1.0, 2.0]), ("b", [3.0])], "/s", 2.0)
    assert svg.count("<polyline") == 2
    assert svg.count("<circle") == 2


def time_labels(svg: str) -> list[str]:
    return re.findall(r'text-anchor="middle">([^<]*)</text>', svg)


def test_line_chart_labels_its_time_axis_by_how_long_ago():
    five_minutes = line_chart("rates", [("a", [1.0] * 150)], "/s", 2.0)
    assert time_labels(five_minutes) == ["now", "-1 min", "-2 min", "-3 min", "-4 min"]
    twenty_seconds = line_chart("rates", [("a", [1.0] * 11)], "/s", 2.0)
    assert time_labels(twenty_seconds) == ["now", "-10 s", "-20 s"]
    two_minutes = line_chart("rates", [("a", [1.0] * 61)], "/s", 2.0)
    assert time_labels(two_minutes) == ["now", "-30 s", "-1 min", "-90 s", "-2 min"]
