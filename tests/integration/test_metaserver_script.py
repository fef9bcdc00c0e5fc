"""``tools/metaServer.sh`` start, status and stop against a real broker in a private run dir.

The brokers here run without ZooKeeper (``zk.zkEnable=false``): what is tested is the
script's view of the process, its port and its log.
"""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest

from tests.integration.broker_process import free_port, server_ini
from tests.integration.script_run import SCRIPT, ScriptRun


class RunDir(ScriptRun):
    """A config file and a run dir for one broker the script starts and stops."""

    def __init__(self, directory: Path, port: int) -> None:
        super().__init__(directory)
        self.conf.write_text(server_ini(port, directory / "data"))


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
