"""The record starts nearest to an offset that is not one, and how ``meta-admin`` names them.

An offset is a byte position; only some positions start a record. When an operator names one
that does not (``browse --from``, ``truncate-partition --end``), the refusal names the record
starts on either side of it, so the next attempt can use one. The starts come from the
caller (segment files read offline, or records read over the wire); the search and the text
live here, once.

Pure functions. Thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable


def nearest_starts(starts: Iterable[int], offset: int) -> tuple[int | None, int | None]:
    """The last start below ``offset`` and the first above it (None where there is none).

    Args:
        starts: record starts in ascending order; read only up to the first above ``offset``.
        offset: the offset that was asked for.
    """
    before = None
    for start in starts:
        if start > offset:
            return before, start
        if start < offset:
            before = start
    return before, None


def nearest_starts_text(before: int | None, after: int | None) -> str:
    """``the nearest records start at 0 (before it) and 43 (after it)``, or one side of it."""
    if before is not None and after is not None:
        return f"the nearest records start at {before} (before it) and {after} (after it)"
    if before is not None:
        return f"the nearest record starts at {before}, before it (none after it)"
    if after is not None:
        return f"the nearest record starts at {after}, after it"
    return "no record start was found near it"
