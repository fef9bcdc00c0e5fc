"""Registration: PySpark's lookup finds ``pyspark_metaq.DefaultSource``; ``register`` is safe."""

from __future__ import annotations

import importlib
import io
import json
import os
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from pyspark.serializers import read_int

import meta.spark

REPO = Path(__file__).resolve().parents[2]
SETUP_PYTHON = REPO / ".venv" / "bin" / "python"
JOB = Path(__file__).with_name("auto_registration_job.py")
JOB_TIMEOUT_S = 300


def test_pyspark_lookup_finds_the_metaq_source(monkeypatch):
    """Goal: the worker PySpark runs at a session's first data source call lists ``metaq``.

    Method: run its ``_main`` in this process, with the repository on ``sys.path`` as it is
    for a worker started from a checkout (or after an install with ``py_modules``). PySpark
    4.0 has no ``_main`` (its ``main`` speaks the worker protocol first): there, run the
    same discovery its ``main`` runs (``pyspark_*`` modules with a ``DefaultSource``).
    """
    from pyspark.sql import datasource
    from pyspark.sql.worker import lookup_data_sources

    import pyspark_metaq
    from meta.spark.datasource import MetaQDataSource

    monkeypatch.setattr(sys, "path", [str(REPO), *sys.path])
    names = {}
    if hasattr(lookup_data_sources, "_main"):
        output = io.BytesIO()
        lookup_data_sources._main(io.BytesIO(), output)
        output.seek(0)
        for _ in range(read_int(output)):
            name = output.read(read_int(output)).decode("utf-8")
            names[name] = output.read(read_int(output))  # The pickled class.
    else:
        for info in pkgutil.iter_modules():
            if info.name == "pyspark_metaq":
                module = importlib.import_module(info.name)
                if issubclass(module.DefaultSource, datasource.DataSource):
                    names[module.DefaultSource.name()] = module.DefaultSource
    assert "metaq" in names
    assert pyspark_metaq.DefaultSource is MetaQDataSource


class RefusingRegistry:
    """``spark.dataSource`` of PySpark 4.0/4.1 when ``pyspark_metaq`` registered ``metaq``.

    The JVM's error reaches Python as an ``AnalysisException`` whose condition is the JVM's
    (not in PySpark's own error table, so the test sets it the way the JVM wrapper does).
    """

    def __init__(self, condition: str) -> None:
        self.condition = condition
        self.calls = 0

    def register(self, source: type) -> None:
        from pyspark.errors import AnalysisException

        self.calls += 1
        error = AnalysisException(message=f"[{self.condition}] refused")
        error.getCondition = lambda: self.condition
        raise error


def test_register_accepts_a_source_pyspark_registered_already():
    spark = types.SimpleNamespace(dataSource=RefusingRegistry("DATA_SOURCE_ALREADY_EXISTS"))
    meta.spark.register(spark)
    assert spark.dataSource.calls == 1


def test_register_reports_other_registration_errors():
    from pyspark.errors import AnalysisException

    spark = types.SimpleNamespace(dataSource=RefusingRegistry("SOMETHING_ELSE"))
    with pytest.raises(AnalysisException):
        meta.spark.register(spark)


def test_register_twice_in_a_session_keeps_the_source_usable(spark):
    meta.spark.register(spark)
    meta.spark.register(spark)
    with pytest.raises(Exception) as caught:  # noqa: B017 - Spark wraps the Python error.
        spark.read.format("metaq").option("topic", "t").load().collect()
    assert "zk.connect is required" in str(caught.value)


@pytest.mark.integration
@pytest.mark.slow
def test_the_set_up_environment_reads_a_topic_without_register(
    tmp_path, tmp_path_factory, zookeeper
):
    """Goal: in the ``.venv`` that ``tools/setup-env.sh`` installs, ``format("metaq")`` works
    without ``meta.spark.register``, in a fresh process as a user's job runs.

    Method: one broker holds a topic with a few messages; the job
    (``auto_registration_job.py``) runs under ``.venv/bin/python`` with that interpreter as
    ``PYSPARK_PYTHON``, from a directory outside the checkout and without ``PYTHONPATH``, so
    only the environment's install can let PySpark's lookup list ``pyspark_metaq``.
    """
    from meta.client import Message, MetaMessageSessionFactory
    from tests.integration.client_helpers import broker_cluster, zk_config

    assert SETUP_PYTHON.exists(), f"{SETUP_PYTHON} is missing: run tools/setup-env.sh"
    topic = "auto-registration"
    values = [f"value-{number}" for number in range(5)]
    with broker_cluster(tmp_path_factory, zookeeper, {topic: {}}, broker_ids=(1,)) as (root, _):
        with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
            producer = factory.create_producer()
            producer.publish(topic)
            for value in values:
                result = producer.send_message(Message(topic, value.encode()))
                assert result.success, result.error_message
        environment = {
            name: value
            for name, value in os.environ.items()
            if name != "PYTHONPATH" and not name.startswith("PYSPARK_")
        }
        environment["PYSPARK_PYTHON"] = str(SETUP_PYTHON)
        done = subprocess.run(
            [str(SETUP_PYTHON), str(JOB), zookeeper.connect_string, root, topic],
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT_S,
            cwd=tmp_path,
            env=environment,
        )
    # The JVM's stack frames ("\tat ...") would push Spark's error message out of view.
    errors = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("\tat "))
    assert done.returncode == 0, errors[-6000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == values
