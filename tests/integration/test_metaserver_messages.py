"""What ``tools/metaServer.sh`` tells the operator: a refused second start, the role and the
ports it names.

The brokers here run without ZooKeeper (``zk.zkEnable=false``) in a private run dir; what is
tested is the script's own output.
"""

from __future__ import annotations

import pytest

from tests.integration.broker_process import free_port
from tests.integration.script_run import StandaloneRunDir


@pytest.fixture
def scripted(tmp_path):
    run_dir = StandaloneRunDir(tmp_path, free_port())
    yield run_dir
    run_dir.stop_broker()


def test_a_second_start_while_one_runs_is_refused_and_names_the_running_pid(scripted):
    started = scripted.run("start")
    assert started.returncode == 0, started.stdout + started.stderr
    pid = scripted.pid()

    again = scripted.run("start")

    assert again.returncode == 1
    assert f"meta-server is already running (pid {pid}); use 'restart' or 'stop'" in again.stderr
    assert scripted.pid() == pid
    assert scripted.run("status").returncode == 0


def test_status_names_a_plain_broker_as_master(scripted):
    assert scripted.run("start").returncode == 0

    status = scripted.run("status")

    assert status.returncode == 0, status.stdout + status.stderr
    assert f"meta-server is running as master (pid {scripted.pid()}, port " in status.stdout


def test_start_and_restart_with_http_name_the_http_port(scripted, tmp_path):
    http_port = free_port()
    (tmp_path / "jettyBroker.properties").write_text(f"serverPort={http_port}\n")
    http_conf = str(tmp_path / "jettyBroker.properties")

    started = scripted.run("start", "--http", META_HTTP_CONF=http_conf)
    restarted = scripted.run("restart", "--http", META_HTTP_CONF=http_conf)

    for done in (started, restarted):
        assert done.returncode == 0, done.stdout + done.stderr
        assert f", HTTP 127.0.0.1:{http_port}, log " in done.stdout
