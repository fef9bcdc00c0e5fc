"""Runs a real broker process (``python -m meta.server``) for integration tests.

``BrokerProcess`` writes a server.ini into a test directory, starts the broker in its own
process group on a free 127.0.0.1 port, waits (bounded) until it accepts connections, and
always stops it: SIGTERM, then SIGKILL after a timeout. ``kill()`` is a real ``kill -9``.
A broker that a failing test left running is killed when the test process exits
(``_kill_leftovers``), so no run leaves a broker behind.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from meta.client.net.connection import BrokerConnection
from meta.ports import free_port

__all__ = ["REPO", "BrokerProcess", "free_port", "run_python", "server_ini"]

REPO = Path(__file__).resolve().parents[2]


def run_python(*arguments: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """``python *arguments`` in the checkout with only ``PYTHONPATH`` and ``PATH`` set (no
    reactor imported yet, no inherited settings); it must exit 0. Output is text."""
    done = subprocess.run(
        [sys.executable, *arguments],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return done


START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0

_launched: list[subprocess.Popen] = []  # every broker process started by this test process


@atexit.register
def _kill_leftovers() -> None:
    """Kill the process groups of brokers still running when the test process exits."""
    for process in _launched:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(STOP_TIMEOUT_S)


def server_ini(
    port: int,
    data_path: Path,
    system: dict[str, object] | None = None,
    topics: dict[str, dict[str, object]] | None = None,
    zk_connect: str | None = None,
    zk: dict[str, object] | None = None,
) -> str:
    """A complete server.ini; ``system``/``zk`` add or override keys, ``topics`` maps sections."""
    values: dict[str, object] = {
        "brokerId": 0,
        "hostName": "127.0.0.1",
        "serverPort": port,
        "dashboardHttpPort": 0,  # any free port: brokers of parallel tests never collide
        "dataPath": data_path,
        "numPartitions": 1,
        "unflushThreshold": 0,
        "unflushInterval": 10000,
        "maxSegmentSize": 1024 * 1024 * 1024,
        "maxTransferSize": 1024 * 1024,
        "updateConsumerOffsets": "false",
    }
    values.update(system or {})
    zk_values: dict[str, object] = {
        "zk.zkEnable": "true" if zk_connect else "false",
        "zk.zkConnect": zk_connect or "127.0.0.1:1",
        "zk.zkSessionTimeoutMs": 4000,
        "zk.zkConnectionTimeoutMs": 10000,
        "zk.zkSyncTimeMs": 0,
    }
    zk_values.update(zk or {})
    lines = ["[system]", *(f"{k}={v}" for k, v in values.items()), "", "[zookeeper]"]
    lines += [f"{k}={v}" for k, v in zk_values.items()]
    for name, keys in (topics or {"test": {}}).items():
        lines += ["", f"[topic={name}]", *(f"{k}={v}" for k, v in keys.items())]
    return "\n".join(lines) + "\n"


class BrokerProcess:
    """One broker process with its own config, data directory and log file."""

    def __init__(self, directory: Path, port: int | None = None, **ini: object) -> None:
        # ``module`` and ``arguments`` run another entry point (tests.integration.crash_broker).
        self.module = "meta.server"
        self.arguments: list[str] = []
        # Run in the child before the broker starts (a low ``RLIMIT_NOFILE``, for example).
        self.preexec_fn: Callable[[], None] | None = None
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.data_path = self.directory / "data"
        self.data_path.mkdir(exist_ok=True)
        self.config_path = self.directory / "server.ini"
        self.log_path = self.directory / "broker.log"
        self.write_config(**ini)
        self.process: subprocess.Popen | None = None
        self._log_start = 0

    def write_config(self, **ini: object) -> None:
        self.config_path.write_text(server_ini(self.port, self.data_path, **ini))

    def start(self, timeout_s: float = START_TIMEOUT_S) -> BrokerProcess:
        """Launch the broker and wait until it serves (see ``launch``)."""
        self.launch()
        self.wait_until_serving(timeout_s)
        return self

    def launch(self) -> BrokerProcess:
        """Start the broker process without waiting for it: brokers of a cluster start side
        by side, each then waited for with ``wait_until_serving``."""
        assert self.process is None or self.process.poll() is not None
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps it open
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.module, *self.arguments, "-f", str(self.config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
            env=env,
            start_new_session=True,
            preexec_fn=self.preexec_fn,
        )
        log.close()
        _launched[:] = [process for process in _launched if process.poll() is None]
        _launched.append(self.process)
        return self

    def wait_until_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{self.log()}")
            if "serving meta://" in self.log(since=self._log_start):
                return
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"broker did not start within {timeout_s} s:\n{self.log()}")

    def log(self, since: int = 0) -> str:
        """The broker's log from byte ``since`` on (default: all runs)."""
        if not self.log_path.exists():
            return ""
        return self.log_path.read_bytes()[since:].decode(errors="replace")

    def connect(self, timeout_s: float = 10.0) -> BrokerConnection:
        return BrokerConnection("127.0.0.1", self.port, timeout_s=timeout_s)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit status."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """``kill -9`` the broker and reap it."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(STOP_TIMEOUT_S)

    def rss_bytes(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
        return int(line.split()[1]) * 1024
