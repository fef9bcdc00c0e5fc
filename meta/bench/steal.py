"""The machine's steal time over a bench row, from Linux ``/proc/stat``.

On a virtual machine the host may run other guests on the CPUs this one was given; the time
the guest wanted to run and could not is its *steal* (the eighth value of the ``cpu`` line
of ``/proc/stat``). A row whose steal share is high was disturbed by the host, and its rates
and CPU times are not to be compared with a quiet row's.

``cpu_times`` samples the ``cpu`` line (every CPU summed) in clock ticks; ``steal_share``
turns two samples into the share of all CPU time that was stolen between them, or None where
the kernel gives no steal column (or ``/proc/stat`` is missing). Pure apart from reading the
file; no state of its own; any thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
STEAL_INDEX = 7
"""The steal column's place among the ``cpu`` line's values: user, nice, system, idle,
iowait, irq, softirq, steal (then guest and guest_nice, already counted in user and nice)."""


@dataclass(frozen=True)
class CpuTimes:
    """One sample of the ``cpu`` line: all CPU time so far and its stolen part, in ticks.

    ``steal_ticks`` is None when the line has no steal column.
    """

    total_ticks: int
    steal_ticks: int | None


def parse_cpu_line(text: str) -> CpuTimes | None:
    """The ``cpu`` line of ``/proc/stat``'s ``text`` as ``CpuTimes``; None without one.

    The total is the sum of the values up to and including steal (guest time is already in
    user and nice, so it is not added twice).
    """
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(value) for value in fields[1 : STEAL_INDEX + 2]]
            steal = values[STEAL_INDEX] if len(values) > STEAL_INDEX else None
            return CpuTimes(sum(values), steal)
    return None


def cpu_times(path: Path = PROC_STAT) -> CpuTimes | None:
    """A sample of the machine's CPU times from ``path``; None where it cannot be read."""
    try:
        return parse_cpu_line(path.read_text())
    except (OSError, ValueError):
        return None


def steal_share(before: CpuTimes | None, after: CpuTimes | None) -> float | None:
    """The share (0 to 1) of all CPU time between two samples that the host stole; None
    when either sample or its steal column is missing, or no time passed between them."""
    if before is None or after is None:
        return None
    if before.steal_ticks is None or after.steal_ticks is None:
        return None
    total_ticks = after.total_ticks - before.total_ticks
    if total_ticks <= 0:
        return None
    return (after.steal_ticks - before.steal_ticks) / total_ticks
