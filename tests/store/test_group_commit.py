"""Flush policy and the single flusher: when acks fire relative to fsync, batching, failures."""

from __future__ import annotations

import logging
import queue
import threading

from twisted.internet.defer import fail

from meta.config import FlushMode
from meta.errors import PartitionFailedError, StoreError
from meta.store.group_commit import Flusher, SynchronousExecutor, ThreadExecutor, should_flush
from meta.store.partition import AFTER
from tests.store.conftest import EIO, ENOSPC, ManualExecutor, collect, open_partition, record

SEGMENT = "test-0/00000000000000000000.meta"


def append_logged(log, files, payload):
    """Append ``payload``; log ("ack", offset) or ("failed", error type) into files.events."""
    result = log.append(record(payload))
    result.addCallbacks(
        lambda offset: files.events.append(("ack", offset)),
        lambda failure: files.events.append(("failed", failure.type.__name__)),
    )
    return result


def kinds(files):
    return [event[0] for event in files.events]


# -- the pure policy ---------------------------------------------------------------------


def test_group_commit_always_waits_for_the_fsync():
    assert should_flush(FlushMode.GROUP_COMMIT, 1, 0.0, 0, 10000)


def test_threshold_one_waits_for_the_fsync_on_every_append():
    assert should_flush(FlushMode.THRESHOLD, 1, 0.0, 1, 10000)


def test_threshold_n_does_not_wait_below_n_appends():
    assert not should_flush(FlushMode.THRESHOLD, 2, 0.0, 3, 10000)


def test_threshold_n_waits_at_the_nth_append():
    assert should_flush(FlushMode.THRESHOLD, 3, 0.0, 3, 10000)


def test_threshold_mode_waits_once_the_interval_has_passed():
    assert should_flush(FlushMode.THRESHOLD, 1, 10000.0, 1000, 10000)


def test_threshold_mode_does_not_wait_before_the_interval_has_passed():
    assert not should_flush(FlushMode.THRESHOLD, 1, 9999.0, 1000, 10000)


# -- group commit ----------------------------------------------------------------------


def test_group_commit_acks_only_after_the_covering_fsync(tmp_path, files):
    """Goal: with unflushThreshold=0 no ack fires before the fsync that covers it.

    Method: step the flusher by hand and compare the recorded order of events.
    """
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor, threshold=0)
    append_logged(log, files, b"one")
    assert kinds(files) == ["write"]
    executor.run_all()
    assert files.events == [
        ("write", SEGMENT),
        ("fsync_directory", "test-0"),
        ("fsync", SEGMENT),
        ("ack", 0),
    ]


def test_one_hundred_concurrent_appends_share_few_fsyncs(tmp_path, files):
    """Goal: appends that arrive while an fsync runs are covered by the next single fsync.

    Method: append 100 records before the flusher runs anything, then run every batch; a
    layer that fsynced per append would record 100 fsyncs.
    """
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor, threshold=0)
    acks = [collect(log.append(record(b"m%d" % index))) for index in range(100)]
    executor.run_all()
    assert files.count("fsync") <= 2
    assert [ack[0] for ack in acks] == [
        index * 22 if index < 10 else 220 + (index - 10) * 23 for index in range(100)
    ]


def test_group_commit_acks_every_append_in_order(tmp_path, files):
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor, threshold=0)
    for payload in (b"a", b"b", b"c"):
        append_logged(log, files, payload)
    executor.run_all()
    assert [event for event in files.events if event[0] == "ack"] == [
        ("ack", 0),
        ("ack", 21),
        ("ack", 42),
    ]


def test_max_offset_does_not_advance_before_the_ack(tmp_path, files):
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor, threshold=0)
    log.append(record(b"one"))
    assert (log.max_offset, log.slice(0, 100).kind) == (0, AFTER)


def test_max_offset_advances_with_the_ack(tmp_path, files):
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor, threshold=0)
    seen = collect(log.append(record(b"one")).addCallback(lambda _: log.max_offset))
    executor.run_all()
    assert seen == [23]


def test_a_rolled_segment_is_acked_after_its_directory_entry_is_synced(tmp_path, files):
    """Goal: a record in a new segment file is acked only once the directory is fsynced.

    Method: roll after every append and check the events before the second ack.
    """
    log = open_partition(str(tmp_path / "test-0"), files=files, threshold=0, segment_bytes_max=1)
    append_logged(log, files, b"a")
    files.events.clear()
    append_logged(log, files, b"b")
    assert files.events == [
        ("write", "test-0/00000000000000000021.meta"),
        ("fsync_directory", "test-0"),
        ("fsync", "test-0/00000000000000000021.meta"),
        ("ack", 21),
    ]


# -- threshold mode --------------------------------------------------------------------


def test_threshold_one_fsyncs_before_every_ack(tmp_path, files):
    log = open_partition(str(tmp_path / "test-0"), files=files, threshold=1)
    for payload in (b"a", b"b", b"c"):
        append_logged(log, files, payload)
    assert [kind for kind in kinds(files) if kind != "fsync_directory"] == [
        "write",
        "fsync",
        "ack",
    ] * 3


def test_threshold_n_acks_without_fsync_below_n(tmp_path, files):
    log = open_partition(str(tmp_path / "test-0"), files=files, threshold=3)
    append_logged(log, files, b"a")
    append_logged(log, files, b"b")
    assert kinds(files) == ["write", "ack", "write", "ack"]


def test_threshold_n_fsyncs_every_n_appends(tmp_path, files):
    log = open_partition(str(tmp_path / "test-0"), files=files, threshold=3)
    for index in range(9):
        append_logged(log, files, b"%d" % index)
    assert files.count("fsync") == 3


def test_threshold_n_acks_behind_a_waiting_append_keep_their_order(tmp_path, files):
    """Goal: an append that needs no fsync still waits for an earlier one that does.

    Method: N=2; the second append waits for its fsync, the third must not overtake it.
    """
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor, threshold=2)
    for payload in (b"a", b"b", b"c"):
        append_logged(log, files, payload)
    assert [event for event in files.events if event[0] == "ack"] == [("ack", 0)]
    executor.run_all()
    assert [event for event in files.events if event[0] == "ack"] == [
        ("ack", 0),
        ("ack", 21),
        ("ack", 42),
    ]


def test_threshold_flush_covers_a_segment_rolled_before_it(tmp_path, files):
    log = open_partition(str(tmp_path / "test-0"), files=files, threshold=3, segment_bytes_max=30)
    for payload in (b"a", b"b", b"c"):
        append_logged(log, files, payload)
    assert {name for kind, name in files.events if kind == "fsync"} == {
        "test-0/00000000000000000000.meta",
        "test-0/00000000000000000042.meta",
    }


# -- failures --------------------------------------------------------------------------


def test_a_failed_fsync_fails_every_waiting_append(tmp_path, files):
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor, threshold=0)
    results = [collect(log.append(record(payload))) for payload in (b"a", b"b", b"c")]
    files.fsync_error = EIO
    executor.run_all()
    assert [result[0].type for result in results] == [PartitionFailedError] * 3


def test_a_failed_fsync_names_the_partition_and_the_os_error(tmp_path, files):
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor, threshold=0)
    (result,) = [collect(log.append(record(b"a")))]
    files.fsync_error = EIO
    executor.run_all()
    text = str(result[0].value)
    assert "partition test-0" in text and "Input/output error" in text


def test_a_failed_fsync_releases_nothing_it_covered(tmp_path, files):
    """Goal: after a failed fsync only records a successful fsync covered are visible.

    Method: the first batch succeeds, the second fails; the visible end stays at the first.
    """
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor, threshold=0)
    log.append(record(b"a"))
    executor.run_all()
    results = [collect(log.append(record(payload))) for payload in (b"b", b"c")]
    files.fsync_error = EIO
    executor.run_all()
    assert (log.max_offset, [result[0].type for result in results]) == (
        21,
        [PartitionFailedError, PartitionFailedError],
    )


def test_a_failed_fsync_makes_the_partition_refuse_appends(tmp_path, files):
    log = open_partition(str(tmp_path / "test-0"), files=files, threshold=0)
    files.fsync_error = EIO
    collect(log.append(record(b"a")))
    files.fsync_error = None
    (result,) = collect(log.append(record(b"b")))
    assert result.check(PartitionFailedError) and files.count("write") == 1


def test_a_failed_fsync_is_exposed_and_logged(tmp_path, files, caplog):
    log = open_partition(str(tmp_path / "test-0"), files=files, threshold=0)
    files.fsync_error = EIO
    with caplog.at_level(logging.ERROR, logger="meta.store"):
        collect(log.append(record(b"a")))
    assert isinstance(log.failed, PartitionFailedError) and "partition test-0" in caplog.text


def test_a_failed_write_fails_the_waiting_appends_too(tmp_path, files):
    executor = ManualExecutor()
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor, threshold=0)
    waiting = collect(log.append(record(b"a")))
    files.write_error = ENOSPC
    failed = collect(log.append(record(b"b")))
    executor.run_all()
    assert [waiting[0].type, failed[0].type] == [PartitionFailedError, PartitionFailedError]


def test_a_failed_write_names_the_os_error(tmp_path, files):
    log = open_partition(str(tmp_path / "test-0"), files=files, threshold=0)
    files.write_error = ENOSPC
    (result,) = collect(log.append(record(b"a")))
    assert "No space left on device" in str(result.value)


def test_a_failed_write_makes_the_partition_refuse_appends(tmp_path, files):
    log = open_partition(str(tmp_path / "test-0"), files=files, threshold=0)
    files.write_error = ENOSPC
    collect(log.append(record(b"a")))
    files.write_error = None
    (result,) = collect(log.append(record(b"b")))
    assert result.check(PartitionFailedError) and log.max_offset == 0


def test_a_failed_write_in_threshold_mode_releases_nothing_later(tmp_path, files):
    log = open_partition(str(tmp_path / "test-0"), files=files, threshold=5)
    collect(log.append(record(b"a")))
    files.write_error = ENOSPC
    collect(log.append(record(b"b")))
    assert (log.max_offset, log.written_end) == (21, 21)


def test_one_partitions_fsync_failure_leaves_another_partition_alone(tmp_path, files):
    flusher = Flusher(ManualExecutor())
    executor = flusher._executor
    bad = open_partition(str(tmp_path / "bad-0"), files=files, flusher=flusher)
    good = open_partition(str(tmp_path / "good-0"), files=files, flusher=flusher)
    files.fsync_error, files.fsync_error_only = EIO, "bad-0/"
    results = [collect(bad.append(record(b"a"))), collect(good.append(record(b"b")))]
    executor.run_all()
    assert (results[0][0].type, results[1]) == (PartitionFailedError, [0])


def test_a_failing_executor_fails_the_batch(tmp_path, files):
    log = open_partition(
        str(tmp_path / "test-0"),
        files=files,
        executor=lambda work: fail(RuntimeError("pool is gone")),
    )
    (result,) = collect(log.append(record(b"a")))
    assert result.check(PartitionFailedError) and "pool is gone" in str(result.value)


# -- the flusher -----------------------------------------------------------------------


def test_one_batch_covers_every_partition_that_asked(tmp_path, files):
    """Goal: partitions sharing the flusher are synced together in one batch.

    Method: while the first batch runs, two partitions ask; the next batch holds both.
    """
    executor = ManualExecutor()
    flusher = Flusher(executor)
    first = open_partition(str(tmp_path / "a-0"), files=files, flusher=flusher)
    second = open_partition(str(tmp_path / "b-0"), files=files, flusher=flusher)
    first.append(record(b"1"))
    first.append(record(b"2"))
    second.append(record(b"3"))
    executor.run_all()
    assert flusher.batch_count == 2


def test_wait_idle_fires_once_every_batch_is_done(tmp_path, files):
    executor = ManualExecutor()
    flusher = Flusher(executor)
    log = open_partition(str(tmp_path / "a-0"), files=files, flusher=flusher)
    log.append(record(b"1"))
    idle = collect(flusher.wait_idle())
    assert idle == []
    executor.run_all()
    assert idle == [None]


def test_synchronous_executor_returns_the_works_result():
    assert collect(SynchronousExecutor()(lambda: 7)) == [7]


class QueueReactor:
    """Just enough reactor for ThreadExecutor: callFromThread queues for the test to run."""

    def __init__(self):
        self.calls = queue.Queue()

    def callFromThread(self, function, *args):  # noqa: N802 - Twisted's spelling
        self.calls.put((function, args))

    def run_one(self):
        function, args = self.calls.get(timeout=10)
        function(*args)


def test_thread_executor_fsyncs_off_the_calling_thread(tmp_path, files):
    """Goal: with the production executor fsync runs on a worker thread, never the caller's.

    Method: a queue stands in for the reactor; the test thread plays the reactor thread.
    """
    reactor = QueueReactor()
    executor = ThreadExecutor(reactor)
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=executor)
    result = collect(log.append(record(b"a")))
    reactor.run_one()
    executor.stop()
    assert result == [0] and threading.current_thread().name not in files.threads


def test_thread_executor_submit_hands_the_result_or_the_error_to_the_reactor_thread():
    reactor = QueueReactor()
    executor = ThreadExecutor(reactor)
    results: list = []
    executor.submit(lambda: 7, lambda value, error: results.append((value, error)))
    reactor.run_one()
    executor.submit(lambda: 1 / 0, lambda value, error: results.append((value, error)))
    reactor.run_one()
    executor.stop()
    assert results[0] == (7, None)
    assert results[1][0] is None and isinstance(results[1][1], ZeroDivisionError)
    executor.submit(lambda: 8, lambda value, error: results.append((value, error)))
    assert results[2][0] is None and isinstance(results[2][1], StoreError)  # stopped: at once


def test_thread_executor_call_still_returns_a_deferred_with_the_result_or_the_failure():
    reactor = QueueReactor()
    executor = ThreadExecutor(reactor)
    good, bad = collect(executor(lambda: 7)), collect(executor(lambda: 1 / 0))
    reactor.run_one()
    reactor.run_one()
    executor.stop()
    assert good == [7]
    assert bad[0].check(ZeroDivisionError)


class LostSubmitExecutor:
    """An executor with ``submit`` whose worker is gone: every batch comes back failed."""

    def __call__(self, work):
        raise AssertionError("the flusher drives an executor with submit through submit")

    def submit(self, work, done) -> None:
        done(None, RuntimeError("worker is gone"))


def test_a_failing_submit_executor_fails_the_batch(tmp_path, files):
    log = open_partition(str(tmp_path / "test-0"), files=files, executor=LostSubmitExecutor())
    (result,) = collect(log.append(record(b"a")))
    assert result.check(PartitionFailedError) and "worker is gone" in str(result.value)
