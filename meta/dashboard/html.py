"""HTML building blocks of the dashboard's pages: escaping, tables and inline SVG charts.

Every value that reaches a page goes through ``escape`` (``html.escape`` with quotes), so a
topic or group named ``<script>`` shows as text. Functions return ``str`` fragments; nothing
here loads anything from the network (no CDN, no fonts, no scripts: the pages' one script
is ``meta.dashboard.shell``'s file), and nothing writes a ``style`` or ``on...`` attribute,
which the pages' Content-Security-Policy would refuse.
Pure functions; any thread.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

CHART_WIDTH = 640
CHART_BAR_HEIGHT = 18
CHART_LABEL_WIDTH = 160
LINE_CHART_HEIGHT = 160
TIME_AXIS_HEIGHT = 16
TIME_TICKS_S = (10, 30, 60)
"""Seconds between a line chart's time labels: the first that needs at most
``TIME_TICKS_MAX`` labels for the chart's span (a minute beyond)."""
TIME_TICKS_MAX = 6
PALETTE = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b7791f", "#c53030", "#2c7a7b")


def escape(value: object) -> str:
    """``value`` as HTML text: ``& < > " '`` escaped; None shows as ``-``, a boolean as
    ``yes`` or ``no`` (every page's one rendering of them)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return html.escape(str(value), quote=True)


def heading(text: object) -> str:
    return f"<h2>{escape(text)}</h2>\n"


def paragraph(text: object, css_class: str = "") -> str:
    attribute = f' class="{escape(css_class)}"' if css_class else ""
    return f"<p{attribute}>{escape(text)}</p>\n"


def error_fragment(text: object) -> str:
    """The error box a page shows instead of its content (unknown topic, group...)."""
    return f'<div class="error" role="alert">{escape(text)}</div>\n'


def link(href: str, text: object) -> str:
    return f'<a href="{escape(href)}">{escape(text)}</a>'


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], raw_columns=()) -> str:
    """A table; cells are escaped except those in ``raw_columns`` (already-built HTML)."""
    head = "".join(f"<th>{escape(header)}</th>" for header in headers)
    body = []
    for row in rows:
        cells = (cell if index in raw_columns else escape(cell) for index, cell in enumerate(row))
        body.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>\n"
    )


def facts_table(pairs: Iterable[tuple[str, object]]) -> str:
    """A two-column table of names and values."""
    rows = "".join(
        f"<tr><th>{escape(name)}</th><td>{escape(value)}</td></tr>" for name, value in pairs
    )
    return f'<div class="scroll"><table class="facts"><tbody>{rows}</tbody></table></div>\n'


def bar_chart(title: str, bars: Sequence[tuple[str, float]], unit: str) -> str:
    """A horizontal bar chart as inline SVG, one bar per ``(label, value)``."""
    if not bars:
        return ""
    largest = max(value for _label, value in bars) or 1
    height = CHART_BAR_HEIGHT * len(bars) + 8
    span = CHART_WIDTH - CHART_LABEL_WIDTH - 90
    parts = []
    for index, (label, value) in enumerate(bars):
        y = 4 + index * CHART_BAR_HEIGHT
        width = max(1, round(span * value / largest)) if value > 0 else 0
        parts.append(
            f'<text x="{CHART_LABEL_WIDTH - 6}" y="{y + 13}" text-anchor="end">'
            f"{escape(label)}</text>"
            f'<rect x="{CHART_LABEL_WIDTH}" y="{y + 2}" width="{width}" '
            f'height="{CHART_BAR_HEIGHT - 4}" fill="{PALETTE[0]}"/>'
            f'<text x="{CHART_LABEL_WIDTH + width + 4}" y="{y + 13}">'
            f"{escape(_number(value))} {escape(unit)}</text>"
        )
    return _svg(title, height, "".join(parts))


def line_chart(
    title: str, series: Sequence[tuple[str, Sequence[float]]], unit: str, interval_s: float
) -> str:
    """Lines over time as inline SVG, with a time axis and a legend.

    Args:
        title: the caption.
        series: ``(name, values)``, oldest value first; every series ends now.
        unit: the values' unit, shown with the largest value.
        interval_s: seconds between two values, for the time axis's labels.
    """
    series = [(name, values) for name, values in series if values]
    if not series:
        return ""
    largest = max(max(values) for _name, values in series) or 1
    length = max(len(values) for _name, values in series)
    step = (CHART_WIDTH - 60) / max(1, length - 1)
    parts = [
        f'<text x="4" y="14">{escape(_number(largest))} {escape(unit)}</text>',
        f'<line x1="50" y1="{LINE_CHART_HEIGHT}" x2="{CHART_WIDTH}" '
        f'y2="{LINE_CHART_HEIGHT}" stroke="#999"/>',
        *_time_axis(length, step, interval_s),
    ]
    for index, (name, values) in enumerate(series):
        color = PALETTE[index % len(PALETTE)]
        offset = length - len(values)
        points = " ".join(
            f"{50 + (offset + i) * step:.1f},"
            f"{LINE_CHART_HEIGHT - (LINE_CHART_HEIGHT - 20) * value / largest:.1f}"
            for i, value in enumerate(values)
        )
        last_x, last_y = points.rsplit(" ", 1)[-1].split(",")
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}"/>'
            f'<circle cx="{last_x}" cy="{last_y}" r="3" fill="{color}"/>'
        )
        legend_y = LINE_CHART_HEIGHT + TIME_AXIS_HEIGHT + 18 + 16 * index
        parts.append(
            f'<rect x="50" y="{legend_y - 10}" width="10" height="10" fill="{color}"/>'
            f'<text x="66" y="{legend_y}">{escape(name)}</text>'
        )
    height = LINE_CHART_HEIGHT + TIME_AXIS_HEIGHT + 24 + 16 * len(series)
    return _svg(title, height, "".join(parts))


def _time_axis(length: int, step: float, interval_s: float) -> list[str]:
    """Ticks under a line chart of ``length`` values ``step`` apart, labelled with how long
    ago (``now``, ``-30 s``, ``-2 min``): one every 10 s, 30 s or minute, as the span asks."""
    span_s = (length - 1) * interval_s
    tick_s = next((tick for tick in TIME_TICKS_S if span_s <= tick * TIME_TICKS_MAX), 60)
    ticks = []
    for back_s in range(0, int(span_s) + 1, tick_s):
        x = 50 + (length - 1 - back_s / interval_s) * step
        if back_s == 0:
            label = "now"
        elif back_s % 60 == 0:
            label = f"-{back_s // 60} min"
        else:
            label = f"-{back_s} s"
        ticks.append(
            f'<line x1="{x:.1f}" y1="{LINE_CHART_HEIGHT}" x2="{x:.1f}" '
            f'y2="{LINE_CHART_HEIGHT + 4}" stroke="#999"/>'
            f'<text x="{x:.1f}" y="{LINE_CHART_HEIGHT + 15}" text-anchor="middle">'
            f"{escape(label)}</text>"
        )
    return ticks


def _svg(title: str, height: int, body: str) -> str:
    return (
        f"<figure><figcaption>{escape(title)}</figcaption>"
        f'<svg class="chart" viewBox="0 0 {CHART_WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(title)}</title>{body}</svg></figure>\n"
    )


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 or float(value).is_integer() else f"{value:,.2f}"
