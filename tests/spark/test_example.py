"""The example pipeline (``examples/access_log_pipeline.py``) runs from its documented command.

It runs as a subprocess, exactly as the README shows it, against two real brokers under a
fresh ZooKeeper root; the script checks the counts it reads back against the lines it
produced and exits 0 only when they match. Bounded by ``RUN_TIMEOUT_S``. Its Spark starts
with the settings of the other test sessions (``SPARK_SUBMIT_ARGS``, in
``PYSPARK_SUBMIT_ARGS``): a JVM that compiles with C1 only, no code generation and no
adaptive re-planning start a small job sooner and leave what it computes as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.integration.broker_process import REPO
from tests.integration.client_helpers import broker_cluster

pytestmark = pytest.mark.integration

SCRIPT = REPO / "examples" / "access_log_pipeline.py"
TOPICS = {"access-log": {"numPartitions": 2}, "access-counts": {"numPartitions": 1}}
RUN_TIMEOUT_S = 240.0
SPARK_SUBMIT_ARGS = (
    "--conf 'spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC'"
    " --conf spark.sql.codegen.wholeStage=false"
    " --conf spark.sql.adaptive.enabled=false"
    " pyspark-shell"
)


def test_help_describes_the_pipeline():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    assert "--zk-connect" in done.stdout


def test_pipeline_counts_status_codes_per_minute(tmp_path_factory, zookeeper):
    with broker_cluster(tmp_path_factory, zookeeper, TOPICS) as (root, _brokers):
        command = [
            sys.executable,
            str(SCRIPT),
            "--zk-connect",
            zookeeper.connect_string,
            "--zk-root",
            root,
            "--input-topic",
            "access-log",
            "--output-topic",
            "access-counts",
            "--lines",
            "400",
        ]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            cwd=tmp_path_factory.mktemp("run"),
            env=dict(os.environ, PYSPARK_SUBMIT_ARGS=SPARK_SUBMIT_ARGS),
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert ": OK: " in done.stdout
    assert "produced 400 lines to access-log" in done.stdout


def test_without_pyspark_it_names_the_install_command_before_sending(tmp_path):
    """Goal: a checkout set up by ``start local`` (no spark extra) gets one line saying what
    to install, and nothing is sent. Method: run the script with ``pyspark`` made
    unimportable (``sys.modules["pyspark"] = None``) against a ZooKeeper address where
    nothing listens; the check must come before any connection."""
    runner = (
        "import runpy, sys\n"
        "sys.modules['pyspark'] = None\n"
        f"sys.argv = [{str(SCRIPT)!r}, '--zk-connect', '127.0.0.1:1']\n"
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", runner], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"pyspark not installed for {sys.executable}; ")
    assert f"{sys.executable} -m pip install -e '{REPO}[spark]'" in done.stderr
