"""``tools/metaServer.sh`` start, status and stop against a real broker in a private run dir.

The brokers here run without ZooKeeper (``zk.zkEnable=false``): what is tested is the
script's view of the process, its port and its log.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.broker_process import REPO, free_port, server_ini

SCRIPT = REPO / "tools" / "metaServer.sh"
SCRIPT_TIMEOUT_S = 120.0  # metaServer.sh waits at most 60 s to start and 30 s to stop.


class RunDir:
    """A config file and a run dir for one broker the script starts and stops."""

    def __init__(self, directory: Path, port: int) -> None:
        self.run_dir = directory / "run"
        self.conf = directory / "server.ini"
        self.conf.write_text(server_ini(port, directory / "data"))
        self.env = dict(
            os.environ,
            META_RUN_DIR=str(self.run_dir),
            META_CONF=str(self.conf),
            META_PYTHON=sys.executable,
            PYTHONPATH=str(REPO),
        )

    def run(self, *arguments: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(SCRIPT), *arguments],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT_S,
            cwd=REPO,
        )

    def pid(self) -> int | None:
        pid_file = self.run_dir / "meta-server.pid"
        return int(pid_file.read_text()) if pid_file.exists() else None

    def kill_leftover(self) -> None:
        """After a failed test: kill the broker this test started, by its pid."""
        pid = self.pid()
        if pid is not None and Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def any_port(tmp_path):
    scripted = RunDir(tmp_path, 0)
    yield scripted
    scripted.run("stop", "broker")
    scripted.kill_leftover()


@pytest.fixture
def fixed_port(tmp_path):
    scripted = RunDir(tmp_path, free_port())
    yield scripted
    scripted.run("stop", "broker")
    scripted.kill_leftover()


def accepts(port: int) -> bool:
    with socket.socket() as client:
        client.settimeout(3)
        return client.connect_ex(("127.0.0.1", port)) == 0


def test_start_with_server_port_0_waits_for_the_port_taken_and_status_shows_it(any_port):
    started = any_port.run("start")

    assert started.returncode == 0, started.stdout + started.stderr
    port = int(re.search(r"127\.0\.0\.1:(\d+), log", started.stdout).group(1))
    assert port != 0 and accepts(port)
    status = any_port.run("status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"(pid {any_port.pid()}, port {port})" in status.stdout


def test_status_reads_the_running_brokers_config_not_meta_conf(fixed_port, tmp_path):
    started = fixed_port.run("start")
    assert started.returncode == 0, started.stdout + started.stderr
    port = int(re.search(r"^serverPort=(\d+)$", fixed_port.conf.read_text(), re.M).group(1))
    other = tmp_path / "other.ini"
    other.write_text(server_ini(free_port(), tmp_path / "other-data"))

    status = fixed_port.run("status", META_CONF=str(other))

    assert status.returncode == 0, status.stdout + status.stderr
    assert f"port {port})" in status.stdout


def test_stop_broker_stops_only_the_broker(fixed_port):
    started = fixed_port.run("start")
    assert started.returncode == 0, started.stdout + started.stderr
    pid = fixed_port.pid()
    # What 'start local' leaves when it started ZooKeeper; 'stop' alone would stop it.
    marker = fixed_port.run_dir / "zookeeper.started-by-metaServer"
    marker.touch()

    stopped = fixed_port.run("stop", "broker")

    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert (
        not Path(f"/proc/{pid}").exists()
        or b"meta.server" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    )
    assert marker.exists()
    assert fixed_port.run("stop", "broker").returncode == 1
    marker.unlink()


def test_stop_refuses_an_unknown_target():
    shown = subprocess.run(
        [str(SCRIPT), "stop", "zookeeper"], capture_output=True, text=True, timeout=30
    )
    assert shown.returncode == 1
    assert "unknown stop target: zookeeper" in shown.stderr
