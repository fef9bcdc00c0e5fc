"""How ``meta-admin`` prints: tables, JSON, times, payload previews and progress bars.

* ``table(headers, rows)``: columns separated by two spaces, numbers right-aligned, ``None``
  printed as ``-``; no trailing spaces. A column is a number column when it holds at least one
  integer and nothing but integers and ``None``; a column of ``None`` alone is text (left), so
  a text column such as ``ATTRIBUTE`` keeps its alignment whether or not a row has a value.
* ``to_json(document)``: indented JSON with keys in the order the caller built them (the keys
  of every command's document are fixed, so scripts can rely on them).
* ``format_time_ms`` / ``parse_time``: ISO-8601 with milliseconds and a UTC offset, the form
  ``parse_time`` reads back (so a time printed by ``browse`` can be pasted into
  ``reset-offsets --to``). ``@<epoch ms>`` is accepted as well.
* ``Progress``: a one-line bar on stderr, drawn only when stderr is a terminal, at most ten
  times a second, erased when done; elsewhere (pipes, tests) it prints nothing.

Pure functions except ``Progress``, which writes to its stream. Single-threaded.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TextIO

PREVIEW_CHARACTERS = 60
PROGRESS_WIDTH = 30
PROGRESS_INTERVAL_S = 0.1


def cell(value: object) -> str:
    """One table cell: ``-`` for None, ``yes``/``no`` for booleans, else ``str``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table; a column of integers (and None), with at least one integer, is
    right-aligned, every other column left-aligned."""
    texts = [[cell(value) for value in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in texts:
        assert len(row) == len(headers)
        widths = [max(width, len(text)) for width, text in zip(widths, row, strict=True)]
    numeric = [
        all(_is_number(row[index]) for row in rows) and any(row[index] is not None for row in rows)
        for index in range(len(headers))
    ]
    lines = []
    for row in [list(headers), *texts]:
        parts = [
            text.rjust(width) if right else text.ljust(width)
            for text, width, right in zip(row, widths, numeric, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _is_number(value: object) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def key_values(pairs: Sequence[tuple[str, object]]) -> str:
    """``name  value`` lines, names padded to one width (the ``stats`` general block)."""
    width = max((len(name) for name, _value in pairs), default=0)
    return "\n".join(f"{name:<{width}}  {cell(value)}".rstrip() for name, value in pairs)


def to_json(document: object) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False)


def format_time_ms(time_ms: int) -> str:
    """``2024-05-01T12:00:00.123+00:00`` (UTC); out-of-range times as ``@<ms>``."""
    try:
        moment = datetime.fromtimestamp(time_ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return f"@{time_ms}"
    return moment.isoformat(timespec="milliseconds")


def parse_time(text: str) -> int | None:
    """Milliseconds since the Unix epoch of ``@<ms>`` or an ISO-8601 date or time, or None.

    A time without a zone is local time; ``Z`` means UTC.
    """
    if text.startswith("@"):
        digits = text[1:]
        return int(digits) if digits.isdigit() else None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as `date` reads it
    return int(moment.timestamp() * 1000)


def preview(data: bytes, characters: int = PREVIEW_CHARACTERS) -> str:
    """A one-line printable preview: UTF-8 text with control characters escaped, or the
    bytes as ``\\xNN`` escapes when they are not UTF-8; cut with ``...`` past ``characters``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = "".join(
            chr(byte) if 32 <= byte < 127 and byte != 92 else f"\\x{byte:02x}" for byte in data
        )
    else:
        text = "".join(
            character if character.isprintable() else repr(character)[1:-1] for character in text
        )
    return text if len(text) <= characters else text[: characters - 3] + "..."


class Progress:
    """A progress bar on ``stream`` (stderr) drawn only when it is a terminal.

    Args:
        label: what is being done, e.g. ``scanning orders 1-0``.
        total: the amount of work (bytes, partitions); 0 when unknown.
        stream: where to draw (default stderr).
        clock: seconds, for rate limiting (injectable for tests).
    """

    def __init__(
        self,
        label: str,
        total: int = 0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        isatty = getattr(self._stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self._clock = clock
        self._drawn_at = float("-inf")
        self._drawn = False

    def advance(self, amount: int = 1) -> None:
        self.update(self.done + amount)

    def update(self, done: int) -> None:
        self.done = done
        if not self.enabled:
            return
        now = self._clock()
        if now - self._drawn_at < PROGRESS_INTERVAL_S:
            return
        self._drawn_at = now
        self._stream.write("\r" + self.line())
        self._stream.flush()
        self._drawn = True

    def line(self) -> str:
        """The bar's text, e.g. ``scanning t 1-0 [#######-------] 50% 512/1024``."""
        if self.total <= 0:
            return f"{self.label} {self.done}"
        fraction = min(1.0, self.done / self.total)
        filled = int(fraction * PROGRESS_WIDTH)
        bar = "#" * filled + "-" * (PROGRESS_WIDTH - filled)
        return f"{self.label} [{bar}] {int(fraction * 100):3d}% {self.done}/{self.total}"

    def close(self) -> None:
        """Erase the bar (only if one was drawn)."""
        if self._drawn:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
