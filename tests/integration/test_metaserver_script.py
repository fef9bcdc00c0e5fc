"""``tools/metaServer.sh`` start, status and stop against a real broker in a private run dir.

The brokers here run without ZooKeeper (``zk.zkEnable=false``): what is tested is the
script's view of the process, its port and its log. The ZooKeeper that 'start local' would
start on 2181 is started on a free port instead, from the run dir, as the script starts it.
"""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest

from tests.integration.broker_process import free_port, server_ini
from tests.integration.script_run import SCRIPT, StandaloneRunDir

ZOOKEEPER_SCRIPT = SCRIPT.parent / "zookeeper.sh"


@pytest.fixture
def any_port(tmp_path):
    scripted = StandaloneRunDir(tmp_path, 0)
    yield scripted
    scripted.stop_broker()


@pytest.fixture
def fixed_port(tmp_path):
    scripted = StandaloneRunDir(tmp_path, free_port())
    yield scripted
    scripted.stop_broker()


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
        [str(SCRIPT), "stop", "everything"], capture_output=True, text=True, timeout=30
    )
    assert shown.returncode == 1
    assert "unknown stop target: everything" in shown.stderr


class LocalZooKeeper:
    """A real ZooKeeper on a free port, started from ``run_dir`` as 'start local' starts its
    own (``tools/zookeeper.sh``, and the marker that says the script started it)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.port = free_port()
        self.marker = run_dir / "zookeeper.started-by-metaServer"

    def command(self, name: str) -> subprocess.CompletedProcess:
        arguments = [name, "--port", str(self.port), "--run-dir", str(self.run_dir)]
        return subprocess.run(
            [str(ZOOKEEPER_SCRIPT), *arguments], capture_output=True, text=True, timeout=60
        )

    def start(self) -> None:
        started = self.command("start")
        assert started.returncode == 0, started.stdout + started.stderr
        self.marker.touch()

    def runs(self) -> bool:
        return self.command("status").returncode == 0


@pytest.fixture
def two_brokers(tmp_path):
    """Two brokers of this checkout in their own run dirs, as on one machine for HA, and the
    ZooKeeper the first one's 'start local' left running; all stopped after the test."""
    first, second = (StandaloneRunDir(tmp_path / name, free_port()) for name in ("first", "second"))
    zookeeper = LocalZooKeeper(first.run_dir)
    for scripted in (first, second):
        started = scripted.run("start")
        assert started.returncode == 0, started.stdout + started.stderr
    zookeeper.start()
    yield first, second, zookeeper
    for scripted in (first, second):
        scripted.stop_broker()
    zookeeper.command("stop")


def test_stop_leaves_the_local_zookeeper_to_another_broker_of_the_checkout(two_brokers):
    """Goal: stopping one broker does not take ZooKeeper from another broker this script
    started from the same checkout, and says so. Method: two real brokers in two run dirs,
    a real ZooKeeper started as 'start local' starts it from the first's; 'stop' there, then
    'stop zookeeper' as its line says."""
    first, second, zookeeper = two_brokers

    stopped = first.run("stop")

    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert first.run("status").returncode != 0
    assert zookeeper.runs() and zookeeper.marker.exists()
    (line,) = [line for line in stopped.stdout.splitlines() if "ZooKeeper" in line]
    assert f"{second.run_dir} (pid {second.pid()})" in line
    assert f"META_RUN_DIR={first.run_dir} tools/metaServer.sh stop zookeeper" in line
    assert first.run("stop", "zookeeper").returncode == 0
    assert not zookeeper.runs() and not zookeeper.marker.exists()
    assert second.run("status").returncode == 0
    assert first.run("stop", "zookeeper").returncode == 1


def test_stop_stops_the_local_zookeeper_once_no_other_broker_of_the_checkout_runs(two_brokers):
    first, second, zookeeper = two_brokers
    assert second.run("stop").returncode == 0  # its run dir started no ZooKeeper
    assert zookeeper.runs()

    stopped = first.run("stop")

    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not zookeeper.runs() and not zookeeper.marker.exists()
