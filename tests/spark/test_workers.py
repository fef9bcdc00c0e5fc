"""The Python of Spark's workers: picked or checked at ``register``, explained when missing.

A "broken" interpreter is this one behind a ``python3`` script whose ``PYTHONPATH`` starts
with a ``kazoo`` package that fails to import, as a system Python without the project's
dependencies does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import meta.spark
from meta.spark.options import OptionError
from meta.spark.workers import missing_module_text, worker_python
from tests.integration.broker_process import REPO
from tests.integration.client_helpers import broker_cluster, produce, zk_config

JOB = Path(__file__).with_name("worker_python_job.py")
JOB_TIMEOUT_S = 300


@pytest.fixture
def broken_python(tmp_path) -> Path:
    """A directory holding ``python3``: this interpreter, unable to import kazoo."""
    blocker = tmp_path / "blocker" / "kazoo"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'kazoo'\", name='kazoo')\n"
    )
    directory = tmp_path / "bin"
    directory.mkdir()
    script = directory / "python3"
    script.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="{blocker.parent}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} "$@"\n'
    )
    script.chmod(0o755)
    return directory


def test_a_local_session_without_pyspark_python_runs_workers_on_this_interpreter():
    assert worker_python("python3", "local[2]", {}) == sys.executable


def test_this_interpreter_is_kept_as_configured():
    assert worker_python(sys.executable, "spark://h:7077", {}) == sys.executable


def test_an_interpreter_absent_from_this_host_is_left_to_the_executors():
    assert worker_python("/no/such/python", "spark://h:7077", {}) == "/no/such/python"


@pytest.mark.parametrize("master", ["spark://127.0.0.1:7077", "local[1]"])
def test_a_set_interpreter_without_kazoo_is_refused_in_one_line(broken_python, master):
    python = str(broken_python / "python3")
    with pytest.raises(OptionError) as caught:
        worker_python(python, master, {"PYSPARK_PYTHON": python})
    text = str(caught.value)
    assert "\n" not in text
    assert f"cannot import kazoo in the Python of Spark's workers ({python})" in text
    assert "set PYSPARK_PYTHON" in text


def test_a_worker_lacking_a_dependency_says_what_to_set_in_one_line():
    code = "import sys; sys.modules['kazoo'] = None; import meta.spark.datasource"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last == "ModuleNotFoundError: " + missing_module_text("kazoo")


class RecordingRegistry:
    """``spark.dataSource``: records the interpreter the source is registered with."""

    def __init__(self, context: types.SimpleNamespace) -> None:
        self.context = context
        self.pythons: list[str] = []

    def register(self, source: type) -> None:
        self.pythons.append(self.context.pythonExec)


def test_register_leaves_the_session_setting_as_it_was(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    context = types.SimpleNamespace(pythonExec="python3", master="local[2]")
    registry = RecordingRegistry(context)
    meta.spark.register(types.SimpleNamespace(sparkContext=context, dataSource=registry))
    assert registry.pythons == [sys.executable]
    assert context.pythonExec == "python3"


@pytest.mark.integration
def test_a_job_without_pyspark_python_reads_despite_a_python3_without_kazoo(
    tmp_path_factory, zookeeper, broken_python, tmp_path
):
    """Goal: the ``ModuleNotFoundError: kazoo`` of a local job cannot happen.

    Method: a real local Spark job (a subprocess, ``PYSPARK_PYTHON`` unset, the broken
    ``python3`` first on ``PATH``) reads three messages from a real broker.
    """
    topics = {"worker-python": {"numPartitions": 1}}
    with broker_cluster(tmp_path_factory, zookeeper, topics, broker_ids=(1,)) as (root, _):
        from meta.client import MetaMessageSessionFactory

        with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
            produce(factory, "worker-python", 3, prefix="w")
        environment = {
            key: value
            for key, value in os.environ.items()
            if key not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
        }
        environment["PATH"] = f"{broken_python}{os.pathsep}{environment.get('PATH', '')}"
        command = [sys.executable, str(JOB), zookeeper.connect_string, root, "worker-python"]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT_S,
            cwd=tmp_path,
            env=environment,
        )
    assert done.returncode == 0, done.stderr[-5000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["w0", "w1", "w2"]
