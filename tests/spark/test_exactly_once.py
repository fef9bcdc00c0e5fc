"""Exactly-once writes (``transactional=true``): real brokers, real ZooKeeper, real Spark.

Two brokers serve each topic of the module (3 partitions each) under a fresh ZooKeeper root,
so a task's rows and a batch's branches span brokers. What is visible in a topic is read
back through the ``metaq`` reader (committed records only: a prepared branch is invisible).
Task attempts that Spark would retry, and straggler attempts of a batch job that Spark has
already committed or aborted, are played by calling the executor's write function directly
(``local[2]`` in the test session never retries a task, and a straggler needs a race).
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from unittest.mock import ANY

import pytest
from kazoo.client import KazooClient

from meta.admin.main import main as admin_main
from meta.client import MetaMessageSessionFactory
from meta.client.produce.xa import XAMessageProducer, Xid
from meta.client.zk.spark_commits import SparkCommitRecord, commit_record_path
from meta.errors import ClientError, JobEndedError, NoBrokerError
from meta.spark.options import parse_write_options
from meta.spark.transaction_log import TransactionLog, branches_of
from meta.spark.transactional_write import (
    FORMAT_ID,
    QUEUE_ROWS,
    unique_qualifier,
    write_rows_transactionally,
)
from tests.integration.client_helpers import broker_cluster, produce, zk_config

pytestmark = pytest.mark.integration

TOPICS = {
    name: {"numPartitions": 3}
    for name in (
        "eos-batch",
        "eos-failed",
        "eos-retry",
        "eos-rerun",
        "eos-crash",
        "eos-src",
        "eos-fence",
        "eos-live",
    )
}
TOPICS["eos-dst"] = {"numPartitions": 3}
QUERY_WAIT_S = 180.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    with broker_cluster(tmp_path_factory, zookeeper, TOPICS) as (root, _brokers):
        yield root


@contextmanager
def zk_client(zookeeper) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zookeeper.connect_string)
    client.start(timeout=10)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def options(zookeeper, root, topic, **more):
    given = {"zk.connect": zookeeper.connect_string, "zk.root": root, "topic": topic}
    given["transactional"] = "true"
    given.update(more)
    return given


def visible(spark, zookeeper, root, topic) -> list[bytes]:
    frame = spark.read.format("metaq").options(
        **{"zk.connect": zookeeper.connect_string, "zk.root": root, "topic": topic}
    )
    return sorted(bytes(row.value) for row in frame.load().collect())


def prepared_xids(zookeeper, root, topic, write_id) -> list[Xid]:
    """The prepared branches of ``write_id`` on the brokers (what ``recover`` lists)."""
    with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
        producer = factory.create_xa_producer()
        producer.set_unique_qualifier(unique_qualifier(write_id))
        producer.publish(topic)
        return [x for x in producer.get_xa_resource().recover() if x.format_id == FORMAT_ID]


def admin_json(zookeeper, root) -> dict:
    """``meta-admin spark-writes --json``."""
    argv = ["spark-writes", "--zk-connect", zookeeper.connect_string, "--zk-root", root]
    output = io.StringIO()
    with redirect_stdout(output):
        assert admin_main([*argv, "--json"]) == 0
    return json.loads(output.getvalue())


def rows(prefix: str, count: int, keyed: bool = False) -> list[dict]:
    return [
        {"value": f"{prefix}{n}".encode(), **({"key": f"k{n % 5}"} if keyed else {})}
        for n in range(count)
    ]


def test_a_transactional_batch_write_lands_exactly_once(spark, zookeeper, cluster):
    root = cluster
    data = [(f"row-{n}".encode(), f"k{n % 7}") for n in range(300)]
    frame = spark.createDataFrame(data, "value binary, key string").repartition(4)
    frame.write.format("metaq").options(**options(zookeeper, root, "eos-batch")).mode(
        "append"
    ).save()
    assert visible(spark, zookeeper, root, "eos-batch") == sorted(value for value, _ in data)
    with zk_client(zookeeper) as zk:  # a fresh id's record is removed
        assert zk.get_children(f"{root}/spark/transactions") == []


def test_a_failed_job_leaves_nothing_visible_and_nothing_prepared(spark, zookeeper, cluster):
    """Goal: a job that fails midway leaves the topic as it was. Method: the last partition's
    rows raise in a UDF after the other tasks wrote theirs; read back and recover."""
    root = cluster
    from pyspark.sql.functions import col, udf

    @udf("binary")
    def fail_on_last(value: bytes) -> bytes:
        if value == b"row-199":
            raise ValueError("a row that cannot be written")
        return value

    frame = spark.createDataFrame([(f"row-{n}".encode(),) for n in range(200)], "value binary")
    frame = frame.coalesce(2).select(fail_on_last(col("value")).alias("value"))
    writer = frame.write.format("metaq").mode("append")
    writer = writer.options(**options(zookeeper, root, "eos-failed", transactionalId="failing"))
    with pytest.raises(Exception, match="a row that cannot be written"):  # noqa: B017
        writer.save()
    assert visible(spark, zookeeper, root, "eos-failed") == []
    assert prepared_xids(zookeeper, root, "eos-failed", "failing") == []
    with zk_client(zookeeper) as zk:  # the abort ended the job's token
        assert zk.get_children(commit_record_path(root, "failing")) == []


def end_job_by_abort(transactions: TransactionLog, token: str) -> None:
    """Spark aborted the failed job (no commit message of the straggler reached it)."""
    transactions.abort([], 0, token)


def end_job_by_commit_and_forget(transactions: TransactionLog, token: str) -> None:
    """The job succeeded without the straggler and its fresh id's record was deleted."""
    transactions.commit([], 0, token)
    transactions.forget()


@pytest.mark.parametrize("end_job", [end_job_by_abort, end_job_by_commit_and_forget])
def test_a_straggler_of_an_ended_batch_job_rolls_back_its_branches(zookeeper, cluster, end_job):
    """Goal: a task attempt that prepares its branches after the driver committed or aborted
    its batch job (Spark kills such an attempt asynchronously) leaves no prepared branch,
    although no later commit will clean up after it. Method: the driver starts and ends the
    job; then the task writes with the job's token, as a straggler's late write does."""
    root = cluster
    write_id = f"straggler-{end_job.__name__.removeprefix('end_job_by_')}".replace("_", "-")
    parsed = parse_write_options(options(zookeeper, root, "eos-fence", transactionalId=write_id))
    transactions = TransactionLog(parsed, write_id)
    transactions.start_job("token-1")
    end_job(transactions, "token-1")
    with pytest.raises(JobEndedError, match=f"write {write_id}: .* already committed or aborted"):
        write_rows_transactionally(rows("late-", 30, keyed=True), parsed, write_id, "token-1")
    assert prepared_xids(zookeeper, root, "eos-fence", write_id) == []


def test_a_task_that_cannot_check_its_job_token_rolls_back_its_branches(
    zookeeper, cluster, monkeypatch
):
    """A ZooKeeper failure in the task's check fails the task; no unchecked branch is left
    prepared (nor returned)."""
    root = cluster
    parsed = parse_write_options(options(zookeeper, root, "eos-fence", transactionalId="unsure"))
    TransactionLog(parsed, "unsure").start_job("token-2")

    def zookeeper_fails(self, token):
        raise ClientError("ZooKeeper did not answer")

    monkeypatch.setattr(SparkCommitRecord, "job_is_live", zookeeper_fails)
    with pytest.raises(ClientError, match="ZooKeeper did not answer"):
        write_rows_transactionally(rows("unsure-", 30, keyed=True), parsed, "unsure", "token-2")
    monkeypatch.undo()
    assert prepared_xids(zookeeper, root, "eos-fence", "unsure") == []


def test_a_branch_thread_that_fails_before_its_first_row_fails_the_task(
    zookeeper, cluster, monkeypatch
):
    """Goal: an error of a branch's thread before it takes a row (its broker left the
    candidates, as during a broker restart) fails the task instead of leaving it waiting on
    the full queue for ever. Method: the producer's ``get_xa_resource_on`` raises; the task
    writes more rows than the queue holds, on a thread of the test's, bounded in time."""
    root = cluster
    parsed = parse_write_options(options(zookeeper, root, "eos-fence", transactionalId="gone"))

    def broker_gone(self, broker_uri):
        raise NoBrokerError(f"broker {broker_uri} is not a candidate now")

    monkeypatch.setattr(XAMessageProducer, "get_xa_resource_on", broker_gone)
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            write_rows_transactionally(rows("gone-", QUEUE_ROWS * 3), parsed, "gone")
            outcome.append(None)
        except BaseException as error:  # handed to the test's thread
            outcome.append(error)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    writer.join(60)
    assert not writer.is_alive(), "the task waits on its branch thread's queue for ever"
    assert isinstance(outcome[0], NoBrokerError)


def test_a_task_of_a_live_batch_job_returns_its_branches_and_the_commit_lands_them(
    spark, zookeeper, cluster
):
    """Goal: the fence lets a task of a job under way through. Method: the driver starts the
    job; the task writes with its token and returns prepared branches (the token is not read
    as a decision in doubt meanwhile); the driver's commit ends the token and lands them."""
    root = cluster
    parsed = parse_write_options(options(zookeeper, root, "eos-live", transactionalId="live"))
    transactions = TransactionLog(parsed, "live")
    transactions.start_job("token-3")
    result = write_rows_transactionally(rows("live-", 30, keyed=True), parsed, "live", "token-3")
    assert result.messages == 30
    assert len({branch.broker_uri for branch in result.branches}) == 2
    (write,) = [w for w in admin_json(zookeeper, root)["writes"] if w["write_id"] == "live"]
    assert write == {"write_id": "live", "committed_batch": -1, "in_doubt": []}
    connect = zookeeper.connect_string
    with SparkCommitRecord(connect, root, "live", 10_000, 10_000) as record:
        assert (record.job_is_live("token-3"), record.decided_branches()) == (True, [])
    transactions.commit(branches_of([result]), 0, "token-3")
    assert visible(spark, zookeeper, root, "eos-live") == sorted(
        f"live-{n}".encode() for n in range(30)
    )
    assert prepared_xids(zookeeper, root, "eos-live", "live") == []
    with zk_client(zookeeper) as zk:
        assert zk.get_children(commit_record_path(root, "live")) == []


@pytest.mark.parametrize("end_job", [end_job_by_abort, end_job_by_commit_and_forget])
def test_a_task_that_saw_its_job_live_just_before_it_ended_is_rolled_back_by_the_driver(
    zookeeper, cluster, monkeypatch, end_job
):
    """Goal: the driver ends the token before its clean-up, so a task that saw the token live
    (and returned branches no commit message brought to the driver) is cleaned up. Method:
    the task's whole write runs inside the driver's commit or abort, just before the token
    is deleted; the driver is given none of its branches."""
    root = cluster
    write_id = f"last-{end_job.__name__.removeprefix('end_job_by_')}".replace("_", "-")
    parsed = parse_write_options(options(zookeeper, root, "eos-fence", transactionalId=write_id))
    transactions = TransactionLog(parsed, write_id)
    transactions.start_job("token-4")
    results = []
    end = SparkCommitRecord.end_job

    def task_checks_first(record: SparkCommitRecord, token: str) -> None:
        results.append(write_rows_transactionally(rows("last-", 30), parsed, write_id, token))
        end(record, token)

    monkeypatch.setattr(SparkCommitRecord, "end_job", task_checks_first)
    end_job(transactions, "token-4")
    monkeypatch.undo()
    assert [result.messages for result in results] == [30]  # it saw its token live
    assert prepared_xids(zookeeper, root, "eos-fence", write_id) == []


def test_a_retried_task_counts_once_and_its_failed_attempt_is_rolled_back(
    spark, zookeeper, cluster
):
    """Goal: Spark's task retry and speculation cannot duplicate. Method: two attempts of the
    same task write their rows (each prepares branches on both brokers); only the second
    attempt's commit message reaches the driver, as when the first attempt's executor died."""
    root = cluster
    parsed = parse_write_options(options(zookeeper, root, "eos-retry", rowsPerTransaction="7"))
    lost = write_rows_transactionally(rows("try-", 40, keyed=True), parsed, "retry")
    kept = write_rows_transactionally(rows("try-", 40, keyed=True), parsed, "retry")
    assert len({b.broker_uri for b in kept.branches}) == 2  # keys spread over both brokers
    assert len(kept.branches) >= 40 // 7  # a branch per rowsPerTransaction rows
    assert visible(spark, zookeeper, root, "eos-retry") == []  # prepared: not visible yet
    TransactionLog(parsed, "retry").commit(branches_of([kept, None]), 0)
    assert visible(spark, zookeeper, root, "eos-retry") == sorted(
        f"try-{n}".encode() for n in range(40)
    )
    assert prepared_xids(zookeeper, root, "eos-retry", "retry") == []
    assert lost.messages == kept.messages == 40


def test_a_batch_run_again_after_its_commit_is_not_written_twice(spark, zookeeper, cluster):
    """A query restarted after the sink committed batch 3 but before Spark recorded it runs
    batch 3 again: the second run's branches are rolled back."""
    root = cluster
    parsed = parse_write_options(options(zookeeper, root, "eos-rerun", transactionalId="q1"))
    first = write_rows_transactionally(rows("once-", 30), parsed, "q1")
    TransactionLog(parsed, "q1").commit(branches_of([first]), 3)
    again = write_rows_transactionally(rows("once-", 30), parsed, "q1")
    TransactionLog(parsed, "q1").commit(branches_of([again]), 3)
    later = write_rows_transactionally(rows("next-", 5), parsed, "q1")
    TransactionLog(parsed, "q1").commit(branches_of([later]), 4)
    expected = sorted(
        [f"once-{n}".encode() for n in range(30)] + [b"next-%d" % n for n in range(5)]
    )
    assert visible(spark, zookeeper, root, "eos-rerun") == expected
    with zk_client(zookeeper) as zk:
        data, _stat = zk.get(commit_record_path(root, "q1"))
        assert json.loads(data) == {"committedBatch": 4}
        assert zk.get_children(commit_record_path(root, "q1")) == []


def test_a_commit_cut_short_is_finished_by_the_next_run_of_its_batch(
    spark, zookeeper, cluster, monkeypatch
):
    """Goal: a driver that dies while committing loses nothing and duplicates nothing.
    Method: the commit stops after the first branch (as if the driver died); the query's next
    run of the same batch, with new branches, finishes the first decision instead."""
    root = cluster
    parsed = parse_write_options(options(zookeeper, root, "eos-crash", transactionalId="q2"))
    first = write_rows_transactionally(rows("a-", 20, keyed=True), parsed, "q2")
    assert len(first.branches) >= 2
    committed_one = TransactionLog._commit_all

    def die_after_one(self, producer, branches):
        committed_one(self, producer, branches[:1])
        raise RuntimeError("the driver died")

    monkeypatch.setattr(TransactionLog, "_commit_all", die_after_one)
    with pytest.raises(RuntimeError):
        TransactionLog(parsed, "q2").commit(branches_of([first]), 0)
    monkeypatch.undo()
    partial = visible(spark, zookeeper, root, "eos-crash")
    assert 0 < len(partial) < 20
    (write,) = [w for w in admin_json(zookeeper, root)["writes"] if w["write_id"] == "q2"]
    assert write == {
        "write_id": "q2",
        "committed_batch": -1,
        "in_doubt": [{"batch": 0, "branches": len(first.branches), "brokers": ANY}],
    }
    second = write_rows_transactionally(rows("a-", 20, keyed=True), parsed, "q2")
    TransactionLog(parsed, "q2").commit(branches_of([second]), 0)
    assert visible(spark, zookeeper, root, "eos-crash") == sorted(
        f"a-{n}".encode() for n in range(20)
    )
    (write,) = [w for w in admin_json(zookeeper, root)["writes"] if w["write_id"] == "q2"]
    assert (write["committed_batch"], write["in_doubt"]) == (0, [])
    assert prepared_xids(zookeeper, root, "eos-crash", "q2") == []


def test_a_transactional_stream_copies_each_message_once_across_a_restart(
    spark, zookeeper, cluster, tmp_path
):
    root = cluster
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        frame = spark.readStream.format("metaq").options(
            **{"zk.connect": zookeeper.connect_string, "zk.root": root, "topic": "eos-src"}
        )
        writer = frame.load().select("value").writeStream.format("metaq")
        writer = writer.options(**options(zookeeper, root, "eos-dst", transactionalId="copy"))
        query = writer.option("checkpointLocation", str(checkpoint))
        query = query.trigger(availableNow=True).start()
        try:
            assert query.awaitTermination(QUERY_WAIT_S), "the AvailableNow query did not end"
        finally:
            query.stop()
        assert query.exception() is None, query.exception()

    with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
        produce(factory, "eos-src", 25, "s-")
    run()
    with MetaMessageSessionFactory(zk_config(zookeeper, root)) as factory:
        produce(factory, "eos-src", 10, "t-")
    run()
    expected = sorted([b"s-%d" % n for n in range(25)] + [b"t-%d" % n for n in range(10)])
    assert visible(spark, zookeeper, root, "eos-dst") == expected


def test_transactional_options_are_checked(zookeeper):
    from meta.spark.options import OptionError

    given = {"zk.connect": zookeeper.connect_string, "transactional": "true"}
    with pytest.raises(OptionError, match="transactional writes take one topic"):
        parse_write_options(given)
    with pytest.raises(OptionError, match="transactionalId must be"):
        parse_write_options({**given, "topic": "t", "transactionalId": "a b"})
    parsed = parse_write_options({**given, "topic": "t", "rowsPerTransaction": "50"})
    assert parsed.transaction is not None and parsed.transaction.rows_per_transaction == 50
