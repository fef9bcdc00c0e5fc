"""A private run dir for one broker that ``tools/metaServer.sh`` starts, reloads and stops.

Shared by the script's own tests and the reload tests: the environment that points the script
at a config file and a run dir of the test's, running the checkout's code, and the clean-up
that kills the broker a failed test left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.integration.broker_process import REPO, server_ini

SCRIPT = REPO / "tools" / "metaServer.sh"
SCRIPT_TIMEOUT_S = 120.0  # metaServer.sh waits at most 60 s to start and 30 s to stop.


class ScriptRun:
    """``directory/server.ini`` (written by the subclass) and ``directory/run``."""

    timeout_s = SCRIPT_TIMEOUT_S
    """How long one script call may take."""

    def __init__(self, directory: Path) -> None:
        self.run_dir = directory / "run"
        self.conf = directory / "server.ini"
        self.env = dict(
            os.environ,
            META_RUN_DIR=str(self.run_dir),
            META_CONF=str(self.conf),
            META_PYTHON=sys.executable,
            PYTHONPATH=str(REPO),
        )

    def run(self, *arguments: str, **env: str) -> subprocess.CompletedProcess:
        """``tools/metaServer.sh *arguments`` with this run dir (and ``env`` added)."""
        return subprocess.run(
            [str(SCRIPT), *arguments],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=self.timeout_s,
            cwd=REPO,
        )

    def pid(self) -> int | None:
        pid_file = self.run_dir / "meta-server.pid"
        return int(pid_file.read_text()) if pid_file.exists() else None

    def stop_broker(self) -> None:
        """A test's clean-up: ``stop broker``, then ``kill_leftover`` if it did not stop."""
        self.run("stop", "broker")
        self.kill_leftover()

    def kill_leftover(self) -> None:
        """After a failed test: kill the broker this test started, by its pid."""
        pid = self.pid()
        if pid is not None and Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)


class StandaloneRunDir(ScriptRun):
    """A broker without ZooKeeper (``server_ini``) on ``port`` (0: any free port), its data
    in ``directory/data``."""

    def __init__(self, directory: Path, port: int) -> None:
        super().__init__(directory)
        directory.mkdir(exist_ok=True)
        self.conf.write_text(server_ini(port, directory / "data"))
