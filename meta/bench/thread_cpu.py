"""CPU time of a benchmarked broker process per thread name, from Linux ``/proc``.

CPython 3.11 does not give its threads' names to the kernel, so every thread of a process
reads ``python`` in ``/proc/<pid>/task/<tid>/comm``. A bench that wants the split starts the
broker through ``naming_command`` instead of ``-m meta.server``: a few lines run with
``python -c`` that name the main thread ``reactor`` and every later thread after its
``threading.Thread.name`` (``prctl(PR_SET_NAME)``, which keeps the first 15 bytes) as it
starts, through the public ``threading.setprofile`` hook (removed from each thread at its
first call), then run ``meta.server`` as ``-m`` would. Nothing of the broker changes; the
bootstrap names only the process it runs in, whatever checkout ``PYTHONPATH`` points at.

``task_times(pid)`` samples every live thread's user and system CPU ticks; ``per_thread``
turns two samples into milliseconds per MiB by thread name (threads of one name summed,
a thread started between the samples counted from zero, one that ended meanwhile missing:
the process total still counts it). Linux only: elsewhere the samples are empty.
Single-threaded; no state of its own.
"""

from __future__ import annotations

import os
from pathlib import Path

NAMING_BOOTSTRAP = """\
import ctypes, runpy, sys, threading
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
def _name(name):
    _prctl(15, name.encode()[:15], 0, 0, 0)
def _started(frame, event, argument):
    sys.setprofile(None)
    _name(threading.current_thread().name)
if _prctl is not None:
    threading.setprofile(_started)
    _name("reactor")
runpy.run_module("meta.server", run_name="__main__", alter_sys=True)
"""
"""What ``python -c`` runs instead of ``-m meta.server`` (PR_SET_NAME is 15; without
``prctl``, off Linux, it names nothing)."""

Sample = dict[int, tuple[str, int, int]]
"""Thread id -> (name, user ticks, system ticks)."""


def naming_command() -> list[str]:
    """The interpreter arguments that run ``meta.server`` with its threads named."""
    return ["-c", NAMING_BOOTSTRAP]


def task_times(pid: int) -> Sample:
    """Every live thread of ``pid``: its name and CPU ticks so far (empty off Linux)."""
    sample: Sample = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return sample
    for task in tasks:
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # the thread ended meanwhile
        sample[int(task.name)] = (name, int(fields[11]), int(fields[12]))
    return sample


def per_thread(before: Sample, after: Sample, size_bytes: int) -> dict[str, dict[str, float]]:
    """CPU per MiB of ``size_bytes`` between two samples, by thread name, busiest first.

    Returns:
        name -> ``{"threads": n, "user_ms_per_mib": u, "system_ms_per_mib": s,
        "ms_per_mib": u + s}``.
    """
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    mib = max(size_bytes / (1 << 20), 1e-9)
    totals: dict[str, list[int]] = {}
    for tid, (name, user, system) in after.items():
        _name, user_before, system_before = before.get(tid, (name, 0, 0))
        row = totals.setdefault(name, [0, 0, 0])
        row[0] += 1
        row[1] += user - user_before
        row[2] += system - system_before
    rows = {
        name: {
            "threads": threads,
            "user_ms_per_mib": round(user * tick_ms / mib, 3),
            "system_ms_per_mib": round(system * tick_ms / mib, 3),
            "ms_per_mib": round((user + system) * tick_ms / mib, 3),
        }
        for name, (threads, user, system) in totals.items()
    }
    return dict(sorted(rows.items(), key=lambda item: -item[1]["ms_per_mib"]))
