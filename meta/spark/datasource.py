"""The ``metaq`` PySpark data source: batch and streaming reads and writes of MetaQ topics.

``MetaQDataSource`` (``name() == "metaq"``) is a ``pyspark.sql.datasource.DataSource``.
Its ``reader`` plans on the driver (``meta.spark.planning``: ZooKeeper ``topics-sub``, broker
offsets, one ``RangePartition`` per broker, topic, partition and offset range) and reads on
executors (``meta.spark.reading``: the blocking client over the shared codec, no reactor, no
ZooKeeper, Arrow batches). Its ``writer`` sends rows through a producer per task
(``meta.spark.writing``). ``streamReader`` and ``streamWriter`` are in ``meta.spark.streaming``
and reuse both.

Options are parsed when the reader or writer is made, so a malformed option fails the
``load()`` or ``save()`` call with an ``OptionError`` naming it; the plan (ZooKeeper and
broker round trips) runs once, in ``partitions()``.

Thread-affinity: PySpark creates, pickles and calls these objects in its Python workers; an
instance is used by one thread at a time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from meta.spark.workers import missing_module_text, worker_import

try:
    from meta.spark.options import (
        ReadOptions,
        WriteOptions,
        parse_read_options,
        parse_write_options,
    )
    from meta.spark.planning import plan_ranges
    from meta.spark.schema import SPARK_SCHEMA
except ModuleNotFoundError as error:
    # A Python worker whose interpreter lacks a dependency: one line saying what to set
    # rather than an import trace (meta.spark.workers).
    raise ModuleNotFoundError(missing_module_text(error.name), name=error.name) from None

SOURCE_NAME = "metaq"


class MetaQDataSource(DataSource):
    """``spark.read.format("metaq")`` and ``df.write.format("metaq")``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return MetaQBatchReader(parse_read_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from meta.spark.writing import check_write_schema

        options = parse_write_options(self.options)
        check_write_schema(schema, options)
        return MetaQBatchWriter(options, "key" in schema.fieldNames())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from meta.spark.options import parse_stream_options
        from meta.spark.streaming import MetaQStreamReader

        return MetaQStreamReader(parse_stream_options(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from meta.spark.streaming import MetaQStreamWriter
        from meta.spark.writing import check_write_schema

        options = parse_write_options(self.options, stream=True)
        check_write_schema(schema, options)
        return MetaQStreamWriter(options, "key" in schema.fieldNames())


class MetaQBatchReader(DataSourceReader):
    """Plans once on the driver; ``read`` runs on executors."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        return list(plan_ranges(self.options))

    def read(self, partition: InputPartition) -> Iterator:
        reading = worker_import("meta.spark.reading")  # pyarrow is loaded on executors only

        return reading.read_partition(self.options, partition)


class MetaQBatchWriter(DataSourceWriter):
    """Each task writes its rows through its own producer.

    At least once by default: a stored message stays whatever happens to its job. With
    ``transactional=true``, exactly once: tasks write into prepared XA branches and
    ``commit`` commits them (``meta.spark.transaction_log``); a failed job leaves nothing
    visible, nor prepared. The write's id is ``transactionalId`` or a fresh one, and the
    job's fence token a fresh one, recorded as live in ZooKeeper: both are made here on the
    driver, before any task runs (every task gets this pickled object).

    Raises:
        ClientError: ``transactional=true`` and ZooKeeper is unreachable (no task runs).
    """

    def __init__(self, options: WriteOptions, keyed: bool) -> None:
        self.options = options
        self.keyed = keyed
        self.write_id: str | None = None
        self.job_token: str | None = None
        if options.transaction is not None:
            from meta.spark.transaction_log import TransactionLog

            self.write_id = options.transaction.write_id or f"batch-{uuid.uuid4().hex[:24]}"
            self.job_token = uuid.uuid4().hex
            TransactionLog(options, self.write_id).start_job(self.job_token)

    def write(self, iterator: Iterator) -> WriterCommitMessage:
        if self.write_id is not None:
            transactional = worker_import("meta.spark.transactional_write")
            return transactional.write_rows_transactionally(
                iterator, self.options, self.write_id, self.job_token
            )
        writing = worker_import("meta.spark.writing")
        return writing.write_rows(iterator, self.options, self.keyed)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Commit the tasks' branches (transactional); else nothing: every message was
        stored when its task ended."""
        if self.write_id is not None:
            from meta.spark.transaction_log import TransactionLog, branches_of

            transactions = TransactionLog(self.options, self.write_id)
            transactions.commit(branches_of(messages), 0, self.job_token)
            if self.options.transaction and self.options.transaction.write_id is None:
                transactions.forget()  # a fresh id: no later write can repeat this one

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Roll back the tasks' branches (transactional); else nothing can be undone:
        stored messages stay (at-least-once delivery)."""
        if self.write_id is not None:
            from meta.spark.transaction_log import TransactionLog, branches_of

            transactions = TransactionLog(self.options, self.write_id)
            transactions.abort(branches_of(messages), 0, self.job_token)
            if self.options.transaction and self.options.transaction.write_id is None:
                transactions.forget()  # made with the job's token; kept if a commit is in doubt
