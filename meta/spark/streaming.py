"""The ``metaq`` Structured Streaming source and sink (``pyspark.sql.datasource``).

``MetaQStreamReader`` is a ``DataSourceStreamReader``. Its offsets are Kafka-style JSON
``{"topic": {"B-P": offset}}`` (``meta.spark.stream_offsets``):

* ``initialOffset``: ``startingOffsets`` (``earliest``, ``latest``, JSON) or, with ``group``,
  the group's committed offsets;
* ``latestOffset(start, limit)``: the brokers' current ends, read every trigger, so new
  partitions and topics are picked up (new partitions are read from their earliest);
  ``maxBytesPerTrigger`` is the default read limit (``ReadMaxBytes``), cut at message
  boundaries (``meta.spark.stream_planning``);
* ``partitions(start, end)``: the batch planner's pieces (``maxBytesPerPartition`` applies),
  each carrying its broker's address; ``read`` is the batch reader's (no ZooKeeper);
* ``commit(end)``: with ``commitToGroup=G``, writes ``end`` as G's offsets in ZooKeeper
  (``<msgId>-<offset>``, msgId -1), so ``meta-admin lag`` shows the query's progress (also
  written from ``latestOffset(start)``: see ``commit``);
* ``Trigger.AvailableNow`` (``SupportsTriggerAvailableNow``): the ends at the start of the
  query are the target, and the query stops once it is reached.

PySpark versions: read limits, ``reportLatestOffset`` and ``SupportsTriggerAvailableNow``
came in 4.2. On 4.0 and 4.1 ``latestOffset()`` is called without arguments and returns every
available message; ``maxBytesPerTrigger`` is then refused with a clear error when the query
starts, and Spark runs ``Trigger.AvailableNow`` through its generic wrapper (one batch up to
the ends seen at the start; ``commitToGroup`` then leaves the group one batch behind: see
``MetaQStreamReader.commit``).

``MetaQStreamWriter`` writes each micro-batch through the batch writer's per-task
producer: at least once (a retried task or a replayed batch sends its rows again).

Thread-affinity: Spark keeps one reader per query in one Python process on the driver and
calls it from one thread; it holds one ZooKeeper connection, closed by ``stop``.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import DataSourceStreamReader, DataSourceStreamWriter, InputPartition

from meta.errors import ClientError
from meta.spark.options import OptionError, ReadOptions, WriteOptions
from meta.spark.planning import open_zookeeper
from meta.spark.stream_offsets import advanced, byte_cuts, from_document, to_document
from meta.spark.workers import worker_import

try:  # PySpark 4.2+: read limits and Trigger.AvailableNow for Python sources.
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxBytes,
        SupportsTriggerAvailableNow,
    )

    READ_LIMITS_SUPPORTED = hasattr(DataSourceStreamReader, "getDefaultReadLimit")
except ImportError:  # PySpark 4.0 / 4.1.
    ReadAllAvailable = ReadMaxBytes = None
    READ_LIMITS_SUPPORTED = False

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: this PySpark has no Trigger.AvailableNow hook for Python sources."""


class MetaQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("metaq")``; see the module docstring."""

    def __init__(self, options: ReadOptions) -> None:
        if options.max_bytes_per_trigger is not None and not READ_LIMITS_SUPPORTED:
            import pyspark

            raise OptionError(
                f"option maxBytesPerTrigger needs PySpark 4.2 or later (read limits for "
                f"Python streaming sources); this is PySpark {pyspark.__version__}"
            )
        self.options = options
        self._zk = None
        self._target = None  # Trigger.AvailableNow: the snapshot the query stops at.
        self._written: dict = {}  # commitToGroup: the offsets last written to ZooKeeper.
        self._planned: dict | None = None  # The end of the last batch partitions() planned.

    def initialOffset(self) -> dict:
        return to_document(self._snapshot().starts(self.options))

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        """The end of the next batch (``start`` and ``limit`` are None before PySpark 4.2)."""
        snapshot = self._target or self._snapshot()
        ends = snapshot.ends()
        if start is None:
            if self._planned is not None:
                self._commit_to_group(self._planned)  # Before 4.2: see commit.
            return to_document(ends)
        begun = from_document(start)
        self._commit_to_group(begun)  # Everything before ``start`` is processed: see commit.
        if self.options.fail_on_data_loss and self._target is None:
            from meta.spark.stream_planning import check_not_behind

            check_not_behind(begun, ends)
        max_bytes = self._max_bytes(limit)
        if max_bytes is not None:
            begin = {key: begun.get(key, snapshot.bounds[key].earliest) for key in ends}
            cuts = byte_cuts(begin, ends, max_bytes)
            if cuts:
                from meta.spark.stream_planning import limit_ends

                ends.update(limit_ends(snapshot, self.options, begin, cuts))
        return to_document(advanced(begun, ends))

    def getDefaultReadLimit(self) -> object:
        if self.options.max_bytes_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxBytes(self.options.max_bytes_per_trigger)

    def reportLatestOffset(self) -> dict | None:
        return None  # latestOffset already reads the ends every trigger; not read twice.

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._snapshot()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        from meta.spark.stream_planning import plan_stream_ranges

        self._planned = from_document(end)
        return plan_stream_ranges(
            self._zookeeper(), self.options, from_document(start), self._planned
        )

    def read(self, partition: InputPartition) -> Iterator:
        reading = worker_import("meta.spark.reading")

        return reading.read_partition(self.options, partition)

    def commit(self, end: dict) -> None:
        """Write ``end`` as ``commitToGroup``'s offsets (nothing else to release).

        Spark calls ``commit`` for a batch only when it plans the next one, so the last batch
        of an AvailableNow query would never be committed. ``latestOffset(start)`` therefore
        commits too: Spark asks for the next end only once the batch ending at ``start`` is
        in its commit log (micro-batches run one at a time). Only changed offsets are written.

        Before PySpark 4.2 ``latestOffset()`` gets no ``start``; it commits the end of the
        batch ``partitions`` planned last instead, which has run by then for the same reason.
        That keeps the group current under a running trigger, but Spark's generic
        AvailableNow wrapper calls the source once before the first batch, so there the last
        batch's offsets are not written (the group stays one batch behind).
        """
        self._commit_to_group(from_document(end))

    def _commit_to_group(self, offsets: dict) -> None:
        group = self.options.commit_to_group
        if group is None:
            return
        by_topic: dict[str, dict] = {}
        for (topic, partition), offset in offsets.items():
            if self._written.get((topic, partition)) != offset:
                by_topic.setdefault(topic, {})[partition] = offset
        zk = self._zookeeper()
        for topic, changed in by_topic.items():
            zk.commit_group_offsets(group, topic, changed)
            self._written.update({(topic, partition): o for partition, o in changed.items()})

    def stop(self) -> None:
        if self._zk is not None:
            zk, self._zk = self._zk, None
            zk.close()

    def _snapshot(self):
        from meta.spark.stream_planning import take_snapshot

        return take_snapshot(self._zookeeper(), self.options)

    def _zookeeper(self):
        if self._zk is None:
            self._zk = open_zookeeper(self.options)
        return self._zk

    def _max_bytes(self, limit: object) -> int | None:
        if limit is None or (ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable)):
            return None
        if ReadMaxBytes is not None and isinstance(limit, ReadMaxBytes):
            return limit.max_bytes
        raise ClientError(
            f"the metaq source supports the read limits ReadAllAvailable and ReadMaxBytes "
            f"(maxBytesPerTrigger), not {limit!r}"
        )


class MetaQStreamWriter(DataSourceStreamWriter):
    """Each task of each micro-batch writes its rows through its own producer.

    With ``transactional=true`` (and a ``transactionalId`` that stays the same across
    restarts of the query), every micro-batch lands exactly once: tasks write into prepared
    XA branches and ``commit`` commits them once per batch id
    (``meta.spark.transaction_log``), even when a restarted query runs a batch again.
    """

    def __init__(self, options: WriteOptions, keyed: bool) -> None:
        self.options = options
        self.keyed = keyed
        transaction = options.transaction
        if transaction is not None and transaction.write_id is None:
            raise OptionError(
                "a transactional stream needs the option transactionalId: a name that stays "
                "the same when the query restarts from its checkpoint, unique per query"
            )
        self.write_id = None if transaction is None else transaction.write_id

    def write(self, iterator: Iterator):
        if self.write_id is not None:
            transactional = worker_import("meta.spark.transactional_write")
            return transactional.write_rows_transactionally(iterator, self.options, self.write_id)
        writing = worker_import("meta.spark.writing")
        return writing.write_rows(iterator, self.options, self.keyed)

    def commit(self, messages: list, batchId: int) -> None:
        """Commit the batch's branches once (transactional); else nothing: every message
        was stored when its task ended."""
        if self.write_id is not None:
            from meta.spark.transaction_log import TransactionLog, branches_of

            TransactionLog(self.options, self.write_id).commit(branches_of(messages), batchId)

    def abort(self, messages: list, batchId: int) -> None:
        """Roll back the batch's branches (transactional); else nothing can be undone:
        stored messages stay (at-least-once delivery)."""
        if self.write_id is not None:
            from meta.spark.transaction_log import TransactionLog, branches_of

            TransactionLog(self.options, self.write_id).abort(branches_of(messages), batchId)
