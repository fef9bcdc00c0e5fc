"""The README and the docs run as written: every ``sh`` and ``python`` block, in file order.

Goal: an example a user copies from ``README.md`` or ``docs/*.md`` works against what
``tools/metaServer.sh start local`` starts: a broker on the shipped ``conf/server.ini`` (its
topics, its defaults) with ``hostName=127.0.0.1``, and a ZooKeeper. Method: one real
ZooKeeper and one real broker process on free loopback ports, the broker on a copy of the
shipped ``conf/server.ini`` in which only the ports, the data directory and the ZooKeeper
address differ. Each runnable block (``tests/doc_examples.py`` says which) runs in a
subprocess, with the addresses ``127.0.0.1:2181`` and ``127.0.0.1:8123`` in its text replaced
by the test's own; ``sh`` blocks run under ``bash -e`` (a failing command fails the block, as
in a script; a pipeline's status is its last command's, as in an interactive shell). A block
passes when it exits 0 with no Python traceback on stderr. The blocks marked ``not-run`` are
counted per file against ``NOT_RUN``, so the list of examples that are not run cannot grow
unnoticed.

Nothing in the checkout is written: the blocks run in a temporary directory (with a ``.venv``
link to the running virtual environment, for ``.venv/bin/meta-admin``) and a temporary
``HOME`` (for the client's local stores).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_examples import Block, blocks, with_addresses
from tests.integration.broker_process import REPO, BrokerProcess
from tests.integration.zookeeper import ZooKeeperServer

BLOCK_TIMEOUT_S = 120

# Blocks marked ``not-run``, per file, each with the reason it cannot run here.
NOT_RUN = {
    # start local and tools/test set up and start what this test provides; the metaServer.sh
    # commands would stop or reconfigure a broker of their own.
    "README.md": 3,
    # The HTTP client needs the HTTP protocol started (start --http).
    "docs/http.md": 1,
    # metaServer.sh: starts, stops and reloads a broker of its own.
    "docs/operations.md": 1,
    # Spark: a SparkSession and, for the pipeline and the stream, a cluster and /data paths.
    "docs/spark-datasource.md": 3,
    "docs/spark-exactly-once.md": 1,
    # A Spark standalone cluster and a job on it.
    "docs/spark.md": 2,
    # tools/test runs the whole suite.
    "docs/architecture.md": 1,
    # The builds write C extensions into the checkout (the compiled one: a minute of compiling).
    "docs/performance.md": 2,
}


def doc_files() -> list[str]:
    """README.md and every page under docs/, relative to the checkout."""
    pages = sorted(path.relative_to(REPO).as_posix() for path in (REPO / "docs").glob("*.md"))
    return ["README.md", *pages]


def runnable_files() -> list[str]:
    return [
        name
        for name in doc_files()
        if any(block.runs for block in blocks((REPO / name).read_text()))
    ]


def local_server_ini(shipped: str, port: int, data_path: Path, zookeeper: str) -> str:
    """The shipped server.ini as ``start local`` runs it, on the test's ports and directory.

    Each replaced key must occur exactly once, so a change of the shipped file shows here.
    """
    replacements = {
        r"^\[system\]$": f"[system]\nhostName=127.0.0.1\ndataPath={data_path}",
        r"^serverPort=.*$": f"serverPort={port}",
        r"^dashboardHttpPort=.*$": "dashboardHttpPort=0",
        r"^zk\.zkConnect=.*$": f"zk.zkConnect={zookeeper}",
    }
    for pattern, replacement in replacements.items():
        shipped, count = re.subn(pattern, replacement, shipped, flags=re.MULTILINE)
        assert count == 1, f"conf/server.ini: {pattern} matched {count} lines"
    return shipped


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory):
    """A ZooKeeper and a broker on the shipped conf/server.ini, as ``start local`` has them."""
    zookeeper = ZooKeeperServer(tmp_path_factory.mktemp("readme-zookeeper"))
    zookeeper.start()
    broker = BrokerProcess(tmp_path_factory.mktemp("readme-broker"))
    try:
        shipped = (REPO / "conf" / "server.ini").read_text()
        broker.config_path.write_text(
            local_server_ini(shipped, broker.port, broker.data_path, zookeeper.connect_string)
        )
        broker.start()
        yield zookeeper, broker
    finally:
        broker.stop()
        zookeeper.stop(remove_data=True)


def run_block(block: Block, text: str, directory: Path) -> subprocess.CompletedProcess:
    """Run one block's ``text`` in ``directory``; the environment is the test's own."""
    environment = {
        "HOME": str(directory / "home"),
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "LANG": "C.UTF-8",
    }
    if block.language == "python":
        script = directory / f"block-{block.line}.py"
        script.write_text(text)
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-e", "-c", text]
    return subprocess.run(
        command,
        cwd=directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )


def test_every_page_marks_exactly_the_known_blocks_not_run():
    counted = {}
    for name in doc_files():
        marked = sum(block.not_run for block in blocks((REPO / name).read_text()))
        if marked:
            counted[name] = marked
    assert counted == NOT_RUN


def test_the_readme_has_examples_that_run():
    assert sum(block.runs for block in blocks((REPO / "README.md").read_text())) >= 4


@pytest.mark.parametrize("name", runnable_files())
def test_examples_run_as_written(name, local_cluster, tmp_path):
    zookeeper, broker = local_cluster
    (tmp_path / "home").mkdir()
    venv = Path(sys.executable).parent.parent
    assert (venv / "bin" / "meta-admin").exists(), f"{venv} has no meta-admin: use tools/test"
    (tmp_path / ".venv").symlink_to(venv)
    for block in blocks((REPO / name).read_text()):
        if not block.runs:
            continue
        text = with_addresses(block.text, zookeeper.connect_string, "127.0.0.1", broker.port)
        done = run_block(block, text, tmp_path)
        where = f"{name}:{block.line} ({block.language})"
        assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stderr}"
        assert "Traceback" not in done.stderr, f"{where} printed a traceback:\n{done.stderr}"


def test_a_failing_block_fails_the_run(tmp_path):
    """The runner itself: a block that fails is seen as failed, in either language."""
    (tmp_path / "home").mkdir()
    failing_sh = Block(("sh",), 1, "true\nfalse\necho unreachable\n")
    failing_python = Block(("python",), 1, "raise SystemExit(3)\n")
    assert run_block(failing_sh, failing_sh.text, tmp_path).returncode != 0
    assert run_block(failing_python, failing_python.text, tmp_path).returncode == 3


def test_blocks_run_in_their_directory_with_their_own_home(tmp_path):
    (tmp_path / "home").mkdir()
    block = Block(("sh",), 1, 'pwd; echo "$HOME"\n')
    done = run_block(block, block.text, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(tmp_path), str(tmp_path / "home")]
