"""The in-memory log ring behind ``/logging``: the last ``LINES_MAX`` log records.

``LogRing`` is a ``logging.Handler`` on the root logger. ``emit`` runs on whichever thread
logs (the reactor, kazoo's, the flusher's) under the handler's lock, as does ``lines``, so
readers never see the deque change under them. Memory is bounded by ``LINES_MAX`` records
of at most ``LINE_CHARS_MAX`` characters each.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass

LINES_MAX = 1000
LINE_CHARS_MAX = 2000
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass(frozen=True)
class LogLine:
    """One formatted record and its time in milliseconds since the epoch."""

    created_ms: int
    text: str


class LogRing(logging.Handler):
    """Keeps the last ``lines_max`` formatted records."""

    def __init__(self, lines_max: int = LINES_MAX) -> None:
        super().__init__()
        assert lines_max >= 1
        self.setFormatter(logging.Formatter(FORMAT))
        self._lines: deque[LogLine] = deque(maxlen=lines_max)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:
            self.handleError(record)
            return
        if len(text) > LINE_CHARS_MAX:
            text = text[:LINE_CHARS_MAX] + " ..."
        self._lines.append(LogLine(int(record.created * 1000), text))

    def lines(self, since_ms: int = 0, count_max: int = 20) -> list[LogLine]:
        """The newest ``count_max`` lines logged after ``since_ms``, oldest first."""
        self.acquire()
        try:
            newer = [line for line in self._lines if line.created_ms > since_ms]
        finally:
            self.release()
        return newer[-count_max:]
