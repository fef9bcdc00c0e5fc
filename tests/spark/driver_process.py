"""A Spark driver as a process of its own, and the Python workers its Spark starts.

``DriverProcess`` runs a job script (``python SCRIPT ARGS``) in a session of its own, with
its output in a log file. With a ``local`` master the driver's process tree holds the
driver's Python, Spark's JVM and the Python processes the JVM starts: ``pyspark.daemon``
processes (each in a process group of its own) and the workers they fork, and Python
runners of the data source. ``kill`` is a driver crash: ``kill -9`` of the driver's process
group and of every process of its tree, each by its pid, reaped or waited for (bounded).

``python_workers`` lists the workers that run Spark tasks: the processes forked by a
``pyspark.daemon pyspark.worker`` of the tree (the daemon itself is left alone, as an
executor's worker crash leaves it). Processes are found through ``/proc`` (Linux).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.broker_process import REPO

KILL_WAIT_S = 30.0
TASK_WORKER_COMMAND = ("-m", "pyspark.daemon", "pyspark.worker")


def _parent_of(pid: int) -> int | None:
    """The parent pid of ``pid``, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields after it start
    # after the last ')'.
    return int(stat.rpartition(")")[2].split()[1])


def _command_of(pid: int) -> tuple[str, ...]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ()
    return tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def descendants(root_pid: int) -> list[int]:
    """Every process below ``root_pid`` (children, their children, ...), found now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _parent_of(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    found: list[int] = []
    pending = [root_pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _is_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


class DriverProcess:
    """``python script *arguments`` in a session of its own; see the module docstring.

    Args:
        script: the job script.
        arguments: its arguments.
        log_path: where its stdout and stderr go (appended to).
    """

    def __init__(self, script: Path, arguments: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self._log_start = log_path.stat().st_size if log_path.exists() else 0
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        env.pop("PYSPARK_PYTHON", None)  # meta.spark.register picks this interpreter
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(script), *arguments],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env=env,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        """What this run of the driver printed."""
        return self.log_path.read_bytes()[self._log_start :].decode(errors="replace")

    def python_workers(self) -> list[int]:
        """The pids of the Python workers running (or ready to run) Spark tasks."""
        # A forked worker keeps its daemon's command line: a worker is a process with that
        # command line whose parent has it too.
        tree = descendants(self.process.pid)
        daemon_like = {pid for pid in tree if _command_of(pid)[-3:] == TASK_WORKER_COMMAND}
        return sorted(pid for pid in daemon_like if _parent_of(pid) in daemon_like)

    def kill(self) -> None:
        """``kill -9`` the driver and every process of its tree; wait until all are gone.

        Raises:
            TimeoutError: a process outlived ``KILL_WAIT_S``.
        """
        tree = descendants(self.process.pid)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(KILL_WAIT_S)
        deadline = time.monotonic() + KILL_WAIT_S
        while any(_is_alive(pid) for pid in tree):
            if time.monotonic() > deadline:
                raise TimeoutError(f"processes of the driver outlived kill -9: {tree}")
            time.sleep(0.05)


def kill_process(pid: int) -> bool:
    """``kill -9`` one process; False when it was gone already."""
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False
