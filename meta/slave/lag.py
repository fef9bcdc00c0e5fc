"""Replication lag of an async slave, per partition, in bytes and seconds (pure).

Definitions (docs/operations.md, "Replication lag"), computed from two numbers per partition:

* the **master's end**: ``max_offset`` of the master's ``stats offsets`` (its visible end),
  read by the replicator once per ``POLL_INTERVAL_S`` (``LagTracker.observe``);
* the **slave's end**: the slave's own visible end (``max_offset`` of its partition), read
  when the lag is shown.

``lag_bytes`` = the master's end at its last observation minus the slave's end now, at least
0. ``lag_seconds`` = how long ago the master already had data that the slave still lacks:
``now - t`` for the oldest observation ``(t, end)`` whose ``end`` the slave has not reached
yet; 0 when the slave has reached every observed end. Its resolution is the observation
interval (one second), and it grows while the master is unreachable, since no newer end
is seen. Before the first observation, or for a partition the master does not report, both
are ``-``.

``stats slave`` on a slave answers one line per partition (wrapped in ``STATS``/``END``)::

    <topic> part <p> slave_end <n> master_end <n|-> lag_bytes <n|-> lag_seconds <n|-> state <s>

``state`` is ``copying``, ``halted`` (stopped with an ERROR, see the log), ``no-master``
(``ids/B/master`` is missing) or ``local-only`` (a local partition the master does not serve
to subscribers). Lines are sorted by (topic, partition).

Invariants: observations kept per partition are bounded (``PENDING_MAX``: the oldest one,
which decides ``lag_seconds``, is never dropped). Thread affinity: reactor thread only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

PENDING_MAX = 600
"""Unreached master ends kept per partition (the oldest and the newest are always kept)."""

COPYING, HALTED, NO_MASTER, LOCAL_ONLY = "copying", "halted", "no-master", "local-only"

Key = tuple[str, int]


@dataclass(frozen=True)
class PartitionLag:
    """One line of ``stats slave``; None prints as ``-``."""

    topic: str
    partition: int
    slave_end: int
    master_end: int | None
    lag_bytes: int | None
    lag_seconds: int | None
    state: str

    def line(self) -> str:
        def text(value: int | None) -> str:
            return "-" if value is None else str(value)

        return (
            f"{self.topic} part {self.partition} slave_end {self.slave_end} master_end "
            f"{text(self.master_end)} lag_bytes {text(self.lag_bytes)} lag_seconds "
            f"{text(self.lag_seconds)} state {self.state}"
        )


def parse_offsets(body: bytes) -> dict[Key, int]:
    """``(topic, partition) -> max_offset`` from a ``stats offsets`` reply body.

    Raises:
        ValueError: not a ``STATS`` ... ``END`` body of ``<t> part <p> min_offset <n>
            max_offset <n>`` lines.
    """
    lines = body.decode("utf-8", "replace").split("\r\n")
    if len(lines) < 3 or lines[0] != "STATS" or lines[-2:] != ["END", ""]:
        raise ValueError(f"not a stats reply: {body[:200]!r}")
    ends: dict[Key, int] = {}
    for line in lines[1:-2]:
        tokens = line.split(" ")
        if len(tokens) != 7 or tokens[1] != "part" or tokens[5] != "max_offset":
            raise ValueError(f"unexpected 'stats offsets' line {line!r}")
        ends[(tokens[0], int(tokens[2]))] = int(tokens[6])
    return ends


class LagTracker:
    """The observed master ends of every partition and the lag derived from them."""

    def __init__(self) -> None:
        self._master_ends: dict[Key, int] = {}
        self._pending: dict[Key, deque[tuple[float, int]]] = {}

    def observe(self, master_ends: Mapping[Key, int], slave_ends: Mapping[Key, int], now: float):
        """Record the master's ends read at ``now``; ``slave_ends`` are the slave's ends now."""
        for key, end in master_ends.items():
            self._master_ends[key] = end
            pending = self._pending.setdefault(key, deque())
            self._reached(key, slave_ends.get(key, 0))
            if end > slave_ends.get(key, 0) and (not pending or end > pending[-1][1]):
                pending.append((now, end))
                if len(pending) > PENDING_MAX:
                    del pending[1]

    def lag(self, key: Key, slave_end: int, now: float) -> tuple[int | None, int | None]:
        """``(lag_bytes, lag_seconds)`` of ``key`` now; ``(None, None)`` if never observed."""
        master_end = self._master_ends.get(key)
        if master_end is None:
            return None, None
        self._reached(key, slave_end)
        pending = self._pending.get(key)
        seconds = int(max(0.0, now - pending[0][0])) if pending else 0
        return max(0, master_end - slave_end), seconds

    def master_end(self, key: Key) -> int | None:
        return self._master_ends.get(key)

    def rows(
        self,
        slave_ends: Mapping[Key, int],
        copied: Iterable[Key],
        halted: Iterable[Key],
        has_master: bool,
        now: float,
    ) -> list[PartitionLag]:
        """One ``PartitionLag`` per partition that is local, copied or observed, sorted."""
        copied, halted = set(copied), set(halted)
        keys = set(slave_ends) | copied | halted | set(self._master_ends)
        rows = []
        for key in sorted(keys):
            slave_end = slave_ends.get(key, 0)
            lag_bytes, lag_seconds = self.lag(key, slave_end, now)
            if key in halted:
                state = HALTED
            elif not has_master:
                state = NO_MASTER
            elif key in copied:
                state = COPYING
            else:
                state = LOCAL_ONLY
            master_end = self._master_ends.get(key)
            rows.append(
                PartitionLag(key[0], key[1], slave_end, master_end, lag_bytes, lag_seconds, state)
            )
        return rows

    def _reached(self, key: Key, slave_end: int) -> None:
        pending = self._pending.get(key)
        while pending and pending[0][1] <= slave_end:
            pending.popleft()


def stats_body(rows: Iterable[PartitionLag]) -> bytes:
    """The ``stats slave`` reply body."""
    return ("STATS\r\n" + "".join(row.line() + "\r\n" for row in rows) + "END\r\n").encode()
