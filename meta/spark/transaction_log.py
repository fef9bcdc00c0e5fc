"""Driver side of exactly-once writes: commit each batch's prepared branches exactly once.

The write tasks (``meta.spark.transactional_write``) return prepared XA branches. The
driver is the transaction manager, with its decisions kept in ZooKeeper
(``meta.client.zk.spark_commits``: the last batch committed in full, and the decision of a
batch while it is being committed).

``commit(branches, batch)``:

1. ``batch <= committedBatch``: the batch landed already (a query restarted after its commit
   but before Spark recorded it): the new branches are rolled back, nothing is written twice.
2. Otherwise the decision is written first (or, when a ``batch-<N>`` decision exists from an
   attempt that crashed while committing, that decision is kept and the new branches are
   rolled back); then every branch of the decision is committed on its broker, then
   ``committedBatch`` moves to N and the decision is deleted.
3. Clean-up: every prepared branch of this write that ``recover`` lists on the brokers and
   that no decision keeps (a failed or speculative task attempt's) is rolled back. Batches
   of one write run one after the other, so when batch N commits, no task of another batch
   is running; a straggler that prepares later is rolled back by the next commit.

``abort`` rolls back the given branches and the strays, unless a decision for the batch
exists (then the commit under way wins). A branch that is gone when committed
(``XAER_NOTA``) was committed by an earlier attempt of the same decision. A broker that
cannot be reached fails the commit: the decision stays, and the next commit of the same
batch (the query restarted from its checkpoint, or ``meta-admin``) finishes it. Until then
the branches on the other brokers are visible and that broker's are not: a batch is exactly
once, not atomic across brokers.

The fence of a batch write job. Rule 3 does not hold for a one-off batch write: there is no
next commit, and Spark calls ``abort`` as soon as the job fails, while a task attempt of the
job may still be running (Spark kills it asynchronously; its Python worker goes on). So
each batch job has a token (``start_job``, on the driver when the writer is made, before
any task runs), recorded as live in the write's commit record. A task, once it has prepared
every branch and before it returns them, checks that the token is live, and if not rolls
its branches back and fails (``meta.spark.transactional_write``). ``commit`` and ``abort``
of the job first end the token, and only then commit or roll back the given branches and
clean up through ``recover``. ZooKeeper orders the task's check (``sync``, then ``exists``)
and the driver's delete of the token, so no prepared branch is left behind:

* A task that saw its token live checked before the token was ended, and it had completed
  its prepares (the brokers acknowledged them) before it checked. The driver's ``recover``
  runs after the token was ended, so it lists those branches: a given branch is committed
  or rolled back, a stray one (its commit message never reached the driver) rolled back.
* A task that checks after the token was ended finds it gone and rolls back its own
  branches (best effort: a broker it cannot reach just then keeps the branch prepared,
  shown by ``meta-admin tx list``; it is never committed). A ZooKeeper failure in the check
  fails the task the same way: it never returns branches it could not check.
* ``forget`` deletes the whole record after a successful batch write, token included; a
  straggler that finds the record gone finds its token gone.

Streaming batches have no token: rule 3 covers their stragglers.

Not thread-safe: the driver calls one commit or abort at a time per write.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from meta.client.factory import MetaMessageSessionFactory
from meta.client.produce.xa import XAMessageProducer
from meta.client.zk.spark_commits import SparkCommitRecord
from meta.errors import MetaError, XAError
from meta.protocol import xa as jta
from meta.spark.options import WriteOptions
from meta.spark.transactional_write import (
    FORMAT_ID,
    PreparedBranch,
    TransactionalWriteResult,
    commit_record,
    global_id,
    unique_qualifier,
)

log = logging.getLogger("meta.spark")


def branches_of(results: Iterable[object]) -> list[PreparedBranch]:
    """The prepared branches in the tasks' commit messages (None for a failed task)."""
    return [
        branch
        for result in results
        if isinstance(result, TransactionalWriteResult)
        for branch in result.branches
    ]


class TransactionLog:
    """Commits and aborts the batches of one write (``write_id``), as the module says.

    Args:
        options: the writer's options (ZooKeeper, topic, timeouts).
        write_id: the write's id (``transactionalId``, or a fresh one for a batch write).
    """

    def __init__(self, options: WriteOptions, write_id: str) -> None:
        self._options = options
        self._write_id = write_id

    def start_job(self, job_token: str) -> None:
        """Record the token of a batch write job as live, before any of its tasks runs."""
        with self._record() as record:
            record.start_job(job_token)

    def commit(
        self, branches: Sequence[PreparedBranch], batch_id: int, job_token: str | None = None
    ) -> None:
        """Commit batch ``batch_id`` exactly once (see the module docstring).

        Args:
            branches: the branches of the tasks' commit messages.
            batch_id: the batch (0 for a batch write).
            job_token: the batch write job's token, ended first (None in a stream).

        Raises:
            MetaError: ZooKeeper or a broker failed; the decision (if written) stays for
                the next commit of the same batch.
        """
        with self._record() as record, self._producer() as producer:
            if job_token is not None:
                record.end_job(job_token)  # first: a task that checks later rolls back
            if batch_id <= record.committed_batch():
                log.info("batch %d of %s was committed already", batch_id, self._write_id)
                self._roll_back(producer, branches)
            else:
                rows, recorded = record.decide(batch_id, [_row(b) for b in branches])
                decision = [PreparedBranch(*row) for row in rows]
                if not recorded:
                    log.warning(
                        "batch %d of %s: finishing the commit an earlier attempt decided",
                        batch_id,
                        self._write_id,
                    )
                    kept = set(decision)
                    self._roll_back(producer, [b for b in branches if b not in kept])
                self._commit_all(producer, decision)
                record.set_committed_batch(batch_id)
                record.delete_decision(batch_id)
            self._clean_up(record, producer)

    def abort(
        self, branches: Sequence[PreparedBranch], batch_id: int, job_token: str | None = None
    ) -> None:
        """Roll back the batch's branches (those given, and strays that ``recover`` lists),
        unless a decision to commit it exists: then nothing is rolled back. A batch write
        job's token (``job_token``) is ended first in either case."""
        with self._record() as record:
            if job_token is not None:
                record.end_job(job_token)  # first: a task that checks later rolls back
            if record.has_decision(batch_id):
                return  # a commit is under way for this batch: the decision wins
            with self._producer() as producer:
                self._roll_back(producer, branches)
                self._clean_up(record, producer)

    def forget(self) -> None:
        """Delete the write's commit record (a batch write whose id nobody reuses), unless a
        decision in it is still in doubt (a commit cut short: ``meta-admin spark-writes``
        lists it)."""
        with self._record() as record:
            if not record.decided_branches():
                record.delete()

    def _record(self) -> SparkCommitRecord:
        return commit_record(self._options, self._write_id)

    def _producer(self) -> _Producer:
        return _Producer(self._options, self._write_id)

    def _commit_all(self, producer: XAMessageProducer, branches: Sequence[PreparedBranch]):
        for branch in branches:
            resource = producer.get_xa_resource_on(branch.broker_uri)
            try:
                resource.commit(branch.xid, one_phase=False)
            except XAError as error:
                if error.error_code != jta.XAER_NOTA:
                    raise
                log.info("branch %s was committed already", branch.xid)

    def _roll_back(self, producer: XAMessageProducer, branches: Iterable[PreparedBranch]) -> None:
        for branch in branches:
            try:
                producer.get_xa_resource_on(branch.broker_uri).rollback(branch.xid)
            except MetaError as error:
                log.warning("rollback of %s failed: %s", branch.xid, error)

    def _clean_up(self, record: SparkCommitRecord, producer: XAMessageProducer) -> None:
        """Roll back the prepared branches of this write that no decision keeps."""
        keep = {PreparedBranch(*row).xid for row in record.decided_branches()}
        resource = producer.get_xa_resource()
        wanted = global_id(self._write_id)
        for xid in resource.recover():
            if xid.format_id != FORMAT_ID or xid.global_transaction_id != wanted or xid in keep:
                continue
            try:
                resource.rollback(xid)
                log.info("rolled back %s, written by a task attempt that did not count", xid)
            except MetaError as error:
                log.warning("rollback of %s failed: %s", xid, error)


def _row(branch: PreparedBranch) -> tuple[str, bytes, bytes]:
    return branch.broker_uri, branch.global_id, branch.branch_id


class _Producer:
    """An XA producer with this write's qualifier, published on its topic; a context manager."""

    def __init__(self, options: WriteOptions, write_id: str) -> None:
        from meta.spark.writing import client_config

        self._factory = MetaMessageSessionFactory(client_config(options))
        self._topic = options.topic
        self._write_id = write_id
        self._timeout_s = options.send_timeout_s

    def __enter__(self) -> XAMessageProducer:
        producer = self._factory.create_xa_producer()
        producer.set_unique_qualifier(unique_qualifier(self._write_id))
        producer.set_transaction_request_timeout(self._timeout_s)
        assert self._topic is not None
        producer.publish(self._topic)
        return producer

    def __exit__(self, *exc: object) -> None:
        self._factory.shutdown()
