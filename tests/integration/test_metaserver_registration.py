"""``tools/metaServer.sh start`` returns once the broker is registered in ZooKeeper.

A real ZooKeeper and a broker the script starts in a private run dir. After a kill -9 the
broker's ``master`` node stays, held by the dead run's session, until ZooKeeper expires it
(``zk.zkSessionTimeoutMs``, 15 s here); the restarted broker accepts connections at once but
waits that out before it registers. The script must say so, with how long it can take, and
return only once the node is the new run's.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from tests.integration.broker_process import free_port, server_ini
from tests.integration.client_helpers import wait_for
from tests.integration.script_run import ScriptRun

SESSION_TIMEOUT_MS = 15000


class RunDir(ScriptRun):
    """A broker registered under ``zk_root`` of the test ZooKeeper."""

    def __init__(self, directory: Path, zookeeper, zk_root: str) -> None:
        super().__init__(directory)
        self.conf.write_text(
            server_ini(
                free_port(),
                directory / "data",
                zk_connect=zookeeper.connect_string,
                zk={"zk.zkRoot": zk_root, "zk.zkSessionTimeoutMs": SESSION_TIMEOUT_MS},
            )
        )


@pytest.fixture
def scripted(tmp_path, zookeeper, zk_root):
    run_dir = RunDir(tmp_path, zookeeper, zk_root)
    yield run_dir
    run_dir.stop_broker()


def test_start_after_a_kill_9_says_why_it_waits_and_returns_once_registered(
    scripted, admin, zk_root
):
    master = f"{zk_root}/brokers/ids/0/master"
    started = scripted.run("start")
    assert started.returncode == 0, started.stderr
    assert "registered in ZooKeeper" not in started.stdout  # nothing to wait out
    first_owner = admin.exists(master).ephemeralOwner
    pid = scripted.pid()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout_s=30, what="the kill")
    assert admin.exists(master).ephemeralOwner == first_owner  # the dead run's node stays
    restarted = scripted.run("start")
    assert restarted.returncode == 0, restarted.stderr
    assert "is not registered in ZooKeeper yet" in restarted.stdout
    said = re.search(
        r"It waits up to (\d+) s\s+\(zk.zkSessionTimeoutMs plus 5 s\)", restarted.stdout
    )
    assert said is not None and int(said.group(1)) <= SESSION_TIMEOUT_MS // 1000 + 5
    assert "meta-server started" in restarted.stdout
    node = admin.exists(master)
    assert node is not None and node.ephemeralOwner not in (0, first_owner)
