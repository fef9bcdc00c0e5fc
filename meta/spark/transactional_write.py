"""Executor side of exactly-once writes: a task's rows go into prepared XA branches.

With ``transactional=true`` (``meta.spark.options.TransactionOptions``) a write task sends
nothing that a consumer can see. It writes its rows inside XA branches of the brokers' XA
transactions (a transaction's records are visible only once it commits), ends and prepares
each branch, and returns the prepared branches in its commit message. The driver
(``meta.spark.transaction_log``) commits them once for the whole batch, or rolls them back.

Branches: one broker per row, chosen among the topic's brokers (sorted by URI): by the
CRC-32 of the row's key when it has one (same key, same broker, same partition there), else
by the task's partition number (so an unkeyed task writes to one broker). Each broker the
task touches gets one worker thread with its own ``XAResource``, since a thread's puts join
at most one branch, fed through a bounded queue of batches of ``BATCH_ROWS`` rows (one
hand-over, and one switch of threads, per batch rather than per row); up to ``maxInFlight``
puts of a branch are in flight at once, and all are checked before it is prepared. A branch
is prepared and the next one begun after ``rowsPerTransaction`` rows, so no branch outlives
the broker's transaction timeout while its task is still writing (prepared branches never
time out). At most ``maxBranchesPerTask`` brokers per task.

Ids: format ``FORMAT_ID``; global id ``<writeId>``; branch qualifier
``<task partition>.<attempt nonce>.<broker index>.<sequence>``; XA unique qualifier
``spark-<writeId>``, so the driver's ``recover`` lists this write's branches and no other.
(A streaming task does not know its batch id: the driver's decision record maps batches
to branches.)

A task of a batch write job (one with a fence token, ``job_token``) checks, after it has
prepared every branch and before it returns them, that its job's token is still live in
ZooKeeper (``meta.client.zk.spark_commits``); when the driver has ended it (the job was
committed or aborted), or the check itself fails, the task rolls back its branches and
raises. ``meta.spark.transaction_log`` says why this leaves no prepared branch behind. A
streaming task has no token and no check: the next batch's commit cleans up after it.

A task that fails rolls back the branches it began or prepared (best effort: a branch it
could not reach is rolled back by the broker's timeout if unprepared, or by the driver's
clean-up if prepared). Not thread-safe: one call per task.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

from meta.client.factory import MetaMessageSessionFactory
from meta.client.message import Message, SendResult
from meta.client.produce.xa import XAMessageProducer, XAResource, Xid
from meta.client.zk.spark_commits import SparkCommitRecord
from meta.errors import ClientError, JobEndedError, MetaError
from meta.protocol.crc import crc32
from meta.spark.options import WriteOptions

FORMAT_ID = 0x4D515350
"""The XA format id of the Spark writer's branches (``MQSP``)."""
QUEUE_ROWS = 1000
BATCH_ROWS = 100
"""Rows handed to a branch's thread at once (``QUEUE_ROWS`` bounds the rows queued)."""
_DONE = object()


@dataclass(frozen=True)
class PreparedBranch:
    """One prepared XA branch: where it lives and its xid."""

    broker_uri: str
    global_id: bytes
    branch_id: bytes

    @property
    def xid(self) -> Xid:
        return Xid(FORMAT_ID, self.global_id, self.branch_id)


@dataclass(frozen=True)
class TransactionalWriteResult(WriterCommitMessage):
    """What one task wrote: its row count and the branches the driver must finish."""

    messages: int
    branches: tuple[PreparedBranch, ...]


def global_id(write_id: str) -> bytes:
    """The XA global transaction id of every branch of one write."""
    return write_id.encode()


def unique_qualifier(write_id: str) -> str:
    """The XA unique qualifier of every branch of one write (``recover`` filters by it)."""
    return f"spark-{write_id}"


def commit_record(options: WriteOptions, write_id: str) -> SparkCommitRecord:
    """The commit record of write ``write_id`` in the ZooKeeper of ``options`` (open)."""
    zk = options.zk
    return SparkCommitRecord(
        zk.connect, zk.root, write_id, zk.session_timeout_ms, zk.connection_timeout_ms
    )


def write_rows_transactionally(
    rows: Iterable, options: WriteOptions, write_id: str, job_token: str | None = None
) -> TransactionalWriteResult:
    """Write every row into prepared branches; return them for the driver to commit.

    Args:
        rows: the task's rows.
        options: the writer's options.
        write_id: the write's id.
        job_token: the fence token of the task's batch job (None in a stream: no check).

    Raises:
        JobEndedError: the job's token was no longer live once every branch was prepared
            (the job was committed or aborted already); every branch was rolled back.
        ClientError: a put, a BEGIN or a PREPARE failed, or ZooKeeper or a broker could not
            be reached (every branch begun here was rolled back).
    """
    from meta.spark.writing import client_config, keyed_selector, row_message

    partition, nonce = _task_identity()
    topic = options.topic
    assert topic is not None  # parse_write_options requires it with transactional=true
    with MetaMessageSessionFactory(client_config(options)) as factory:
        producer = factory.create_xa_producer(keyed_selector())
        producer.set_unique_qualifier(unique_qualifier(write_id))
        producer.set_transaction_request_timeout(options.send_timeout_s)
        producer.publish(topic)
        brokers = [address.uri for address in producer.candidate_brokers()]
        if not brokers:
            raise ClientError(f"no broker serves topic {topic} now")
        prefix = f"{partition}.{nonce}"
        workers: dict[int, _BranchWorker] = {}
        try:
            for row in rows:
                message = row_message(row, topic)
                index = _broker_index(message, partition, len(brokers))
                worker = workers.get(index)
                if worker is None:
                    if len(workers) >= options.transaction.branches_per_task_max:
                        raise ClientError(
                            f"a task would write to more than maxBranchesPerTask="
                            f"{options.transaction.branches_per_task_max} brokers"
                        )
                    branch_prefix = f"{prefix}.{index}"
                    gid = global_id(write_id)
                    worker = _BranchWorker(producer, brokers[index], gid, branch_prefix, options)
                    workers[index] = worker
                worker.put(message)
            prepared = [branch for worker in workers.values() for branch in worker.finish()]
            if job_token is not None and prepared:  # nothing prepared: nothing to fence
                _check_job_live(options, write_id, job_token)
        except BaseException:
            for worker in workers.values():
                worker.abandon()
            raise
    count = sum(worker.count for worker in workers.values())
    return TransactionalWriteResult(count, tuple(prepared))


def _check_job_live(options: WriteOptions, write_id: str, job_token: str) -> None:
    """Raise unless the task's job token is live (called once every branch is prepared).

    Raises:
        JobEndedError: the token (or the whole commit record) is gone.
        ClientError: ZooKeeper could not answer.
    """
    with commit_record(options, write_id) as record:
        if record.job_is_live(job_token):
            return
    raise JobEndedError(
        f"write {write_id}: the batch job of this task attempt was already committed or "
        f"aborted (job token {job_token} ended), so the attempt rolls back its branches"
    )


def _task_identity() -> tuple[int, str]:
    """The task's partition number and a nonce unique to this attempt."""
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    return partition, uuid.uuid4().hex[:12]


def _broker_index(message: Message, task_partition: int, brokers: int) -> int:
    if message.key is None:
        return task_partition % brokers
    key = message.key.encode() if isinstance(message.key, str) else message.key
    return crc32(key) % brokers


class _BranchWorker:
    """The branches of one task on one broker, written by a thread of their own."""

    def __init__(
        self,
        producer: XAMessageProducer,
        broker_uri: str,
        gid: bytes,
        prefix: str,
        options: WriteOptions,
    ) -> None:
        self._producer = producer
        self._broker_uri = broker_uri
        self._global_id = gid
        self._prefix = prefix
        self._options = options
        self._queue: queue.Queue = queue.Queue(QUEUE_ROWS // BATCH_ROWS)
        self._batch: list[Message] = []
        self._prepared: list[PreparedBranch] = []
        self._error: BaseException | None = None
        self._stopped = threading.Event()
        self.count = 0
        self._thread = threading.Thread(
            target=self._run, name=f"metaq-xa-{broker_uri}", daemon=True
        )
        self._thread.start()

    def put(self, message: Message) -> None:
        """Add one message to the batch; queue a full batch (blocks while the queue is full).
        Raises the thread's error."""
        self._batch.append(message)
        if len(self._batch) >= BATCH_ROWS:
            self._hand_over()

    def _hand_over(self) -> None:
        batch, self._batch = self._batch, []
        while True:
            if self._error is not None:
                raise self._error
            if not self._thread.is_alive():  # it ended without an error: nothing takes rows
                raise ClientError(f"the writer thread for {self._broker_uri} has stopped")
            try:
                self._queue.put(batch, timeout=0.1)
                return
            except queue.Full:
                continue

    def finish(self) -> list[PreparedBranch]:
        """Prepare the last branch; return every branch prepared. Raises the thread's error."""
        if self._batch:
            self._hand_over()
        self._queue.put(_DONE)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._prepared

    def abandon(self) -> None:
        """Stop and roll back every branch begun or prepared here (best effort)."""
        self._stopped.set()
        try:
            self._queue.put_nowait(_DONE)
        except queue.Full:
            pass
        self._thread.join(self._options.send_timeout_s * 2)
        resource = self._producer.get_xa_resource_on(self._broker_uri)
        for branch in self._prepared:
            try:
                resource.rollback(branch.xid)
            except MetaError:
                pass  # the driver's clean-up rolls back prepared branches it finds

    def _run(self) -> None:
        resource: XAResource | None = None
        xid: Xid | None = None
        in_branch = 0
        sequence = 0
        in_flight: deque[Future[SendResult]] = deque()
        try:  # every error reaches the task's thread, or it would wait on a full queue
            resource = self._producer.get_xa_resource_on(self._broker_uri)
            resource.set_transaction_timeout(self._options.transaction.timeout_s)
            while not self._stopped.is_set():
                batch = self._queue.get()
                if batch is _DONE:
                    break
                for message in batch:
                    if xid is None:
                        branch_id = f"{self._prefix}.{sequence}".encode()
                        xid = Xid(FORMAT_ID, self._global_id, branch_id)
                        sequence += 1
                        resource.start(xid)
                    timeout_s = self._options.send_timeout_s
                    in_flight.append(self._producer.send_message_async(message, timeout_s))
                    if len(in_flight) >= self._options.in_flight_max:
                        self._check(in_flight.popleft())
                    in_branch += 1
                    if in_branch >= self._options.transaction.rows_per_transaction:
                        self._prepare(resource, xid, in_flight)
                        xid, in_branch = None, 0
            if xid is not None and not self._stopped.is_set():
                self._prepare(resource, xid, in_flight)
                xid = None
        except BaseException as error:  # handed to the task's thread by put/finish
            self._error = error
        finally:
            if xid is not None and resource is not None:
                _roll_back_quietly(resource, xid)

    def _check(self, future: Future[SendResult]) -> None:
        future.result(self._options.send_timeout_s * 2).raise_for_status()
        self.count += 1

    def _prepare(
        self, resource: XAResource, xid: Xid, in_flight: deque[Future[SendResult]]
    ) -> None:
        """End and prepare the branch once every put of it was stored."""
        while in_flight:
            self._check(in_flight.popleft())
        resource.end(xid)
        resource.prepare(xid)
        branch = PreparedBranch(self._broker_uri, xid.global_transaction_id, xid.branch_qualifier)
        self._prepared.append(branch)


def _roll_back_quietly(resource: XAResource, xid: Xid) -> None:
    try:
        if resource.associated_xid == xid:
            resource.end(xid)
        resource.rollback(xid)
    except MetaError:
        pass  # unprepared: the broker's transaction timeout rolls it back
