"""``tools/metaServer.sh start|restart samsa|gregor`` against real brokers in private run dirs.

Goal: the script starts the synchronous-replication roles with Java's files, as Java's
``metaServer.sh start samsa|gregor`` does. Method: the script starts a broker with a config
of the test's; the test reads the broker's command line and asks it ``stats sync``. The
gregor slave's ZooKeeper is enabled towards a closed port: it must start without one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from meta.client.net.connection import BrokerConnection
from meta.protocol.commands import Stats
from tests.integration.broker_process import REPO, free_port, server_ini
from tests.integration.script_run import ScriptRun


class RunDir(ScriptRun):
    def __init__(self, directory: Path, port: int, **ini: object) -> None:
        super().__init__(directory)
        self.port = port
        self.conf.write_text(server_ini(port, directory / "data", **ini))

    def command_line(self) -> list[str]:
        return Path(f"/proc/{self.pid()}/cmdline").read_bytes().decode().rstrip("\0").split("\0")

    def stats_sync(self) -> tuple[int, str]:
        with BrokerConnection("127.0.0.1", self.port) as connection:
            reply = connection.request(Stats("sync", connection.next_opaque()))
        return reply.code, reply.body.decode()


@pytest.fixture
def scripted(tmp_path):
    run_dir = RunDir(
        tmp_path, free_port(), zk={"zk.zkEnable": "true", "zk.zkConnect": "127.0.0.1:1"}
    )
    yield run_dir
    run_dir.stop_broker()


def test_start_gregor_passes_the_shipped_gregor_file_and_restart_keeps_the_role(scripted):
    started = scripted.run("start", "gregor")
    assert started.returncode == 0, started.stdout + started.stderr
    shipped = str(REPO / "conf" / "gregor_slave.properties")
    assert scripted.command_line()[-2:] == ["--gregor", shipped]
    code, body = scripted.stats_sync()
    assert (code, body.splitlines()[0]) == (200, "role gregor")
    first_pid = scripted.pid()
    assert f"running as gregor slave (pid {first_pid}, " in scripted.run("status").stdout

    restarted = scripted.run("restart", "gregor")

    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert scripted.pid() != first_pid
    assert scripted.command_line()[-2:] == ["--gregor", shipped]
    assert scripted.stats_sync()[1].startswith("role gregor")


def test_start_samsa_reads_meta_samsa_conf(scripted, tmp_path):
    samsa = tmp_path / "samsa.properties"
    samsa.write_text(f"slave=127.0.0.1:{free_port()}\n")
    scripted.conf.write_text(server_ini(scripted.port, tmp_path / "data"))  # no ZooKeeper

    started = scripted.run("start", "samsa", META_SAMSA_CONF=str(samsa))

    assert started.returncode == 0, started.stdout + started.stderr
    assert scripted.command_line()[-2:] == ["--samsa", str(samsa)]
    assert f"running as samsa master (pid {scripted.pid()}, " in scripted.run("status").stdout


@pytest.mark.parametrize(
    ("mode", "variable", "text"),
    [
        ("samsa", "META_SAMSA_CONF", "samsa config file"),
        ("gregor", "META_GREGOR_CONF", "gregor config file"),
    ],
)
def test_a_missing_role_file_is_named_and_nothing_starts(scripted, tmp_path, mode, variable, text):
    missing = tmp_path / "missing.properties"
    started = scripted.run("start", mode, **{variable: str(missing)})
    assert started.returncode == 1
    assert f"{text} {missing} not found (set {variable})" in started.stderr
    assert scripted.pid() is None


def test_start_takes_one_mode_of_samsa_and_gregor(scripted):
    shown = scripted.run("start", "gregor", "samsa")
    assert shown.returncode == 1
    assert "too many arguments" in shown.stderr
