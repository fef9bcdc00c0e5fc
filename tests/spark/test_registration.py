"""Automatic registration: PySpark's data source lookup finds ``pyspark_metaq.DefaultSource``."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from pyspark.serializers import read_int

REPO = Path(__file__).resolve().parents[2]


def test_pyspark_lookup_finds_the_metaq_source(monkeypatch):
    """Goal: the worker PySpark runs at a session's first data source call lists ``metaq``.

    Method: run its ``_main`` in this process, with the repository on ``sys.path`` as it is
    for a worker started from a checkout (or after an install with ``py_modules``).
    """
    from pyspark.sql.worker.lookup_data_sources import _main

    import pyspark_metaq
    from meta.spark.datasource import MetaQDataSource

    monkeypatch.setattr(sys, "path", [str(REPO), *sys.path])
    output = io.BytesIO()
    _main(io.BytesIO(), output)
    output.seek(0)
    names = {}
    for _ in range(read_int(output)):
        name = output.read(read_int(output)).decode("utf-8")
        names[name] = output.read(read_int(output))  # The pickled class.
    assert "metaq" in names
    assert pyspark_metaq.DefaultSource is MetaQDataSource
