"""``LogRing``: the last log records, bounded, filtered by time."""

from __future__ import annotations

import logging

from meta.dashboard.logring import LINE_CHARS_MAX, LogRing


def record(message: str, created_s: float) -> logging.LogRecord:
    made = logging.LogRecord("meta.test", logging.INFO, __file__, 1, message, None, None)
    made.created = created_s
    return made


def test_the_ring_keeps_only_the_newest_lines():
    ring = LogRing(lines_max=3)
    for index in range(5):
        ring.handle(record(f"line {index}", 100.0 + index))
    texts = [line.text for line in ring.lines()]
    assert [text.rsplit(": ", 1)[1] for text in texts] == ["line 2", "line 3", "line 4"]
    assert len(ring.lines()) == 3


def test_lines_after_a_time_and_at_most_a_count():
    ring = LogRing()
    for index in range(10):
        ring.handle(record(f"line {index}", 100.0 + index))
    newer = ring.lines(since_ms=105_000, count_max=3)
    assert [line.created_ms for line in newer] == [107_000, 108_000, 109_000]


def test_a_long_line_is_cut():
    ring = LogRing()
    ring.handle(record("x" * (LINE_CHARS_MAX * 2), 1.0))
    assert len(ring.lines()[0].text) <= LINE_CHARS_MAX + 4
