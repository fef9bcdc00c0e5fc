"""HTML building blocks: every value is escaped, charts are inline SVG."""

from __future__ import annotations

from meta.dashboard.html import bar_chart, escape, facts_table, line_chart, table

HOSTILE = "<script>alert(1)</script>"


def test_escape_turns_markup_and_quotes_into_text():
    assert escape(HOSTILE) == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert escape("\"x'") == "&quot;x&#x27;"
    assert escape(None) == "-"


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
    assert line_chart("t", [("a", [])], "/s") == ""


def test_line_chart_marks_the_newest_value_of_each_series():
    svg = line_chart("rates", [("a", [1.0, 2.0]), ("b", [3.0])], "/s")
    assert svg.count("<polyline") == 2
    assert svg.count("<circle") == 2
