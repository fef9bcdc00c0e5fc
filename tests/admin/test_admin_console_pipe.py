"""``meta-admin consume TOPIC | head``: a reader that goes away ends the run quietly.

Goal: as with any Unix filter, when the reader of stdout exits early the console consumer
stops, says nothing about a broken pipe, and exits 0. Method: a real shell pipeline on the
cluster of ``conftest.admin_cluster`` (real brokers and ZooKeeper): ``meta-admin consume``
into ``head -n 3``, with far more output waiting than a pipe holds (so a write after
``head`` exited is certain), and the shell reports meta-admin's own exit status.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from meta.admin.main import main

REPO = Path(__file__).resolve().parents[2]
TOPIC = "console-pipe"  # its own: the thousands of lines here are no other test's data
LINE_BYTES = 200
LINES = 2_000  # 400 KB: several times what a pipe buffers


@pytest.fixture(scope="module")
def much_output(admin_cluster):
    """Enough messages in ``TOPIC`` that printing them all overflows any pipe."""
    lines = b"".join(b"%s\n" % (b"p" * (LINE_BYTES - 1)) for _ in range(LINES))
    process = subprocess.run(
        [sys.executable, "-m", "meta.admin", "produce", TOPIC, *admin_cluster.options],
        input=lines,
        capture_output=True,
        cwd=REPO,
        timeout=120,
    )
    assert process.returncode == 0, process.stderr.decode()


def consume_into_head(admin_cluster, *argv: str) -> subprocess.CompletedProcess:
    """``meta-admin consume TOPIC ARGV | head -n 3``; meta-admin's status on fd 3's line."""
    admin = " ".join(
        [sys.executable, "-m", "meta.admin", "consume", TOPIC, *argv, *admin_cluster.options]
    )
    script = f'{admin} | head -n 3\necho "meta-admin exited ${{PIPESTATUS[0]}}" >&2\n'
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120
    )


def assert_quiet_end(done: subprocess.CompletedProcess) -> None:
    assert len(done.stdout.splitlines()) == 3  # the module's tests share the topic: any three
    lines = done.stderr.splitlines()
    assert lines[-1] == "meta-admin exited 0", done.stderr
    assert lines[:-1] == [line for line in lines[:-1] if "message(s) printed from" in line]


def test_a_direct_consume_into_head_exits_0_without_a_word_about_the_pipe(
    admin_cluster, much_output
):
    assert_quiet_end(consume_into_head(admin_cluster, "--from-beginning"))


def test_a_group_consume_into_head_exits_0_and_commits_no_more_than_it_wrote(
    admin_cluster, much_output, zookeeper
):
    group = f"pipe-{uuid.uuid4().hex[:8]}"
    assert_quiet_end(consume_into_head(admin_cluster, "--group", group))
    client = KazooClient(hosts=zookeeper.connect_string, timeout=10)
    client.start(timeout=10)
    try:
        path = f"{admin_cluster.root}/consumers/{group}/offsets/{TOPIC}"
        committed = {
            name: int(client.get(f"{path}/{name}")[0].decode().rsplit("-", 1)[1])
            for name in client.get_children(path)
        }
    finally:
        client.stop()
        client.close()
    # The run could write at most a few pipe buffers before head left, far less than the
    # topic holds (this module's messages alone are LINES * (LINE_BYTES + 20) bytes on disk).
    assert sum(committed.values()) < LINES * (LINE_BYTES + 20)


def test_a_write_error_other_than_a_closed_pipe_still_fails_the_run(
    admin_cluster, much_output, monkeypatch, capsys
):
    class FullDisk:
        def write(self, data: bytes) -> int:
            raise OSError(28, "No space left on device")

        def flush(self) -> None:
            pass

    class Stdout:
        buffer = FullDisk()

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stdout", Stdout())
    status = main(["consume", TOPIC, "--max-messages", "1", *admin_cluster.options])
    assert status == 2
    assert "cannot write to stdout: No space left on device" in capsys.readouterr().err
