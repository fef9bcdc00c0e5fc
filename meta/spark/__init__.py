"""The ``metaq`` Spark data source (PySpark 4.x ``pyspark.sql.datasource``).

Register it once per ``SparkSession``, then read and write topics::

    import meta.spark
    meta.spark.register(spark)
    df = (spark.read.format("metaq")
          .option("zk.connect", "zk1:2181").option("topic", "logs").load())

Streams use ``spark.readStream.format("metaq")`` and ``df.writeStream.format("metaq")``
(``meta.spark.streaming``). Where the top-level module ``pyspark_metaq`` is importable by
Spark's Python workers, PySpark registers the source by itself and ``register`` is optional.

``register`` also makes sure Spark's Python workers can import the source: with a local master
and ``PYSPARK_PYTHON`` unset they run this interpreter, and an interpreter that cannot import
it is refused with one line saying what to set (``meta.spark.workers``).

Importing this package imports neither PySpark nor kazoo; ``register`` does.
"""

from __future__ import annotations

from typing import Any

SOURCE_NAME = "metaq"


def register(spark: Any) -> None:
    """Register the ``metaq`` format with ``spark`` (``spark.dataSource.register``).

    Safe to call when PySpark already registered the source through ``pyspark_metaq``:
    PySpark 4.0 and 4.1 refuse to register a name their automatic lookup registered
    (``DATA_SOURCE_ALREADY_EXISTS``), later versions replace it; either way ``metaq`` is
    this source afterwards.

    The source is registered with the interpreter ``meta.spark.workers.worker_python``
    picks for Spark's Python workers; the session's own setting is left as it was.

    Args:
        spark: a ``pyspark.sql.SparkSession`` (PySpark 4.0 or later).

    Raises:
        OptionError: Spark's workers would run an interpreter that cannot import the source.
    """
    from pyspark.errors import AnalysisException

    from meta.spark.datasource import MetaQDataSource
    from meta.spark.workers import worker_python

    context = _classic_context(spark)
    configured = getattr(context, "pythonExec", None)
    if configured is not None:
        context.pythonExec = worker_python(configured, context.master)
    try:
        spark.dataSource.register(MetaQDataSource)
    except AnalysisException as error:
        if error.getCondition() != "DATA_SOURCE_ALREADY_EXISTS":
            raise
    finally:
        if configured is not None:
            context.pythonExec = configured


def _classic_context(spark: Any) -> Any:
    """The session's ``SparkContext``; None for Spark Connect, whose server starts workers."""
    try:
        return spark.sparkContext
    except Exception:  # noqa: BLE001 - Connect raises PySparkNotImplementedError here.
        return None
