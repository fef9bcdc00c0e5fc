"""Retention: eligibility, and delete / archive on real files (``deleteWhen`` parsing is
``tests/config/test_cron.py``).

Store tests use real files in ``tmp_path``, a ``task.Clock`` reactor set to ``T0``, file ages
set with ``os.utime``, and synchronous or manual executors, so every step of a retention run
happens when the test says so (STYLE 21, 22).
"""

from __future__ import annotations

import logging
import os
import zipfile

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from meta.config import ZkConfig
from meta.protocol.codec import decode_all, encode
from meta.protocol.commands import Get, Result
from meta.server.broker import Broker
from meta.server.protocol import BrokerProtocol
from meta.store.group_commit import SynchronousExecutor
from meta.store.manager import StoreManager
from meta.store.retention import SegmentFacts, eligible_count
from meta.store.segment import segment_name
from tests.server.memory_broker import closing_broker
from tests.store.conftest import (
    EIO,
    ManualExecutor,
    RecordingFiles,
    broker_config,
    closing_store,
    record,
)
from tests.store.conftest import topic_config as make_topic

T0 = 1_700_000_000.0  # the test clock's "now": 2023-11-14 22:13:20 UTC
EVERY_SECOND = "*/1 * * * * ?"
RECORD = record(b"x" * 80)  # 100 bytes: with SEGMENT_BYTES one record per segment
SEGMENT_BYTES = 100


# --- Eligibility (pure) --------------------------------------------------------------------


def facts(*ages_s: float | None, durable: bool = True) -> list[SegmentFacts]:
    return [
        SegmentFacts(f"s{index}", 100, None if age is None else T0 - age, durable)
        for index, age in enumerate(ages_s)
    ]


def test_the_last_segment_is_never_eligible_however_old():
    assert eligible_count(facts(50, 50, 50), T0, 1000) == 2
    assert eligible_count(facts(50), T0, 1000) == 0
    assert eligible_count([], T0, 1000) == 0


def test_only_a_prefix_of_old_segments_is_eligible():
    assert eligible_count(facts(50, 50, 0.5, 50, 50), T0, 1000) == 2


def test_age_must_exceed_the_retention_strictly():
    assert eligible_count(facts(1.0, 0), T0, 1000) == 0
    assert eligible_count(facts(1.001, 0), T0, 1000) == 1


def test_a_segment_not_yet_fsynced_or_of_unknown_age_is_not_eligible():
    assert eligible_count(facts(50, 50, durable=False), T0, 1000) == 0
    assert eligible_count(facts(None, 50, 50), T0, 1000) == 0


# --- Retention on real files ---------------------------------------------------------------


class Store:
    """A StoreManager on ``tmp_path`` with partitions of one-record segments, clock at T0."""

    def __init__(
        self,
        tmp_path,
        policy: str = "delete,1s",
        when: str = EVERY_SECOND,
        files=None,
        background=None,
        flush_executor=None,
        topics=None,
    ) -> None:
        self.root = str(tmp_path / "data")
        os.makedirs(self.root, exist_ok=True)
        if topics is None:
            topics = (make_topic("test", self.root, delete_policy=policy, delete_when=when),)
        # No scrubber: these tests count the timers on the clock (retention arms one).
        self.config = broker_config(
            self.root, topics=topics, segment_bytes_max=SEGMENT_BYTES, scrub_bytes_per_s=0
        )
        self.clock = Clock()
        self.clock.advance(T0)
        self.store = closing_store(
            StoreManager(
                self.config,
                self.clock,
                files=files,
                executor=flush_executor or SynchronousExecutor(),
                background=background or SynchronousExecutor(),
            )
        )
        self.store.load()
        self.store.start()

    def fill(self, topic: str = "test", partition: int = 0, records: int = 4):
        """Append ``records`` records: that many full segments plus an empty active one."""
        log = self.store.get_or_create(topic, partition)
        for _ in range(records):
            log.append(RECORD)
        return log

    def directory(self, topic: str = "test", partition: int = 0) -> str:
        return os.path.join(self.root, f"{topic}-{partition}")

    def age(self, seconds: float, *starts: int, topic: str = "test", partition: int = 0):
        """Set the mtime of the segments starting at ``starts`` (all if none) to T0 - seconds."""
        directory = self.directory(topic, partition)
        names = [segment_name(start) for start in starts] or [
            name for name in os.listdir(directory) if name.endswith(".meta")
        ]
        for name in names:
            os.utime(os.path.join(directory, name), (T0 - seconds, T0 - seconds))

    def listing(self, topic: str = "test", partition: int = 0) -> list[str]:
        return sorted(os.listdir(self.directory(topic, partition)))

    def read(self, name: str, topic: str = "test", partition: int = 0) -> bytes:
        with open(os.path.join(self.directory(topic, partition), name), "rb") as file:
            return file.read()

    def tick(self) -> None:
        """Advance to the next whole second: the every-second cron fires."""
        self.clock.advance(1)


def names(*starts: int, suffix: str = "") -> list[str]:
    return [segment_name(start) + suffix for start in starts]


def test_delete_removes_old_segments_but_never_the_active_one(tmp_path):
    """Goal: delete,1s removes every old read-only segment and keeps the active one, however
    old. Method: four full segments and an empty active one, all 10 s old; one cron tick."""
    store = Store(tmp_path)
    log = store.fill()
    store.age(10)
    store.tick()
    assert store.listing() == names(400)
    assert log.min_offset == 400
    assert [segment.start for segment in log.segments] == [400]


def test_nothing_happens_before_the_cron_fires(tmp_path):
    store = Store(tmp_path, when="0 0 6,18 * * ?")
    store.fill()
    store.age(10)
    store.clock.advance(0.5)
    assert store.listing() == names(0, 100, 200, 300, 400)


def test_a_young_segment_keeps_every_newer_one(tmp_path):
    store = Store(tmp_path)
    log = store.fill()
    store.age(10)
    store.age(0, 200)
    store.tick()
    assert store.listing() == names(200, 300, 400)
    assert log.min_offset == 200


def test_a_segment_waiting_for_its_fsync_is_kept_until_it_is_durable(tmp_path):
    """Goal: retention never closes a descriptor a flush batch may still fsync. Method: hold
    the flush batch of the records; tick (nothing goes); run the batch; tick again (the
    batch's fsync sets the segments' modification time, so they are aged again first)."""
    flush = ManualExecutor()
    store = Store(tmp_path, flush_executor=flush)
    store.fill(records=2)
    store.age(10)
    store.tick()
    assert store.listing() == names(0, 100, 200)
    flush.run_all()
    store.age(10)
    store.tick()
    assert store.listing() == names(200)


def test_archive_renames_old_segments_to_arc_with_their_bytes(tmp_path):
    store = Store(tmp_path, policy="archive,1s")
    log = store.fill(records=2)
    original = [store.read(name) for name in names(0, 100)]
    store.age(10)
    store.tick()
    assert store.listing() == sorted([*names(0, 100, suffix=".arc"), *names(200)])
    for name, data in zip(names(0, 100, suffix=".arc"), original, strict=True):
        assert store.read(name) == data
    assert log.min_offset == 200


def test_archive_with_compress_zips_off_the_reactor_then_drops_the_segment(tmp_path):
    """Goal: archive,1s,true writes X.meta.zip holding X.meta's bytes, and the segment leaves
    the log only once the zip is complete. Method: a manual background executor; check the
    state while the compression job waits, then run it."""
    jobs = ManualExecutor()
    store = Store(tmp_path, policy="archive,1s,true", background=jobs)
    log = store.fill(records=1)
    path = os.path.join(store.directory(), segment_name(0))
    original = store.read(segment_name(0))
    store.age(10)
    store.tick()
    assert len(jobs.queue) == 1
    assert store.listing() == names(0, 100)  # nothing moved before the archive is written
    assert log.min_offset == 0
    jobs.run_all()
    assert store.listing() == sorted([segment_name(0) + ".zip", segment_name(100)])
    assert log.min_offset == 100
    with zipfile.ZipFile(path + ".zip") as archive:
        assert archive.namelist() == [segment_name(0)]
        assert archive.read(segment_name(0)) == original
        assert archive.testzip() is None


def test_a_second_tick_while_a_zip_is_written_does_not_queue_the_segment_again(tmp_path):
    jobs = ManualExecutor()
    store = Store(tmp_path, policy="archive,1s,true", background=jobs)
    store.fill(records=2)
    store.age(10)
    store.tick()
    store.tick()
    assert len(jobs.queue) == 1
    jobs.run_all()  # the runner goes on to the next old segment itself
    assert store.listing() == sorted([*names(0, 100, suffix=".zip"), *names(200)])


def test_each_segment_gets_an_info_line_with_path_bytes_and_age(tmp_path, caplog):
    store = Store(tmp_path)
    store.fill(records=2)
    store.age(3600 * 5)
    with caplog.at_level(logging.INFO, logger="meta.store"):
        store.tick()
    lines = [r.getMessage() for r in caplog.records if "retention:" in r.getMessage()]
    assert len(lines) == 2
    path = os.path.join(store.directory(), segment_name(0))
    assert f"deleted segment {path} (100 bytes, 5.0 h old, retention 1.0 s)" in lines[0]
    assert "test-0 now starts at offset 100" in lines[0]


class FailingFiles(RecordingFiles):
    """Fails ``remove`` and ``rename`` for paths containing ``fail_in``.

    Name a directory with its separators (``/test-0/``): pytest's base temporary directory
    is ``pytest-<N>``, so a bare ``test-0`` would match every path under ``pytest-0``.
    """

    def __init__(self, fail_in: str) -> None:
        super().__init__()
        self.fail_in = fail_in

    def remove(self, path: str) -> None:
        if self.fail_in in path:
            raise OSError(EIO, os.strerror(EIO), path)
        super().remove(path)

    def rename(self, source: str, target: str) -> None:
        if self.fail_in in source:
            raise OSError(EIO, os.strerror(EIO), source)
        super().rename(source, target)


def test_a_failed_partition_is_logged_and_the_next_partition_still_runs(tmp_path, caplog):
    store = Store(tmp_path, files=FailingFiles(f"{os.sep}test-0{os.sep}"))
    first = store.fill(partition=0, records=2)
    store.fill(partition=1, records=2)
    store.age(10, partition=0)
    store.age(10, partition=1)
    with caplog.at_level(logging.INFO, logger="meta.store"):
        store.tick()
    assert store.listing(partition=0) == names(0, 100, 200)
    assert first.min_offset == 0
    assert store.listing(partition=1) == names(200)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "retention (delete,1s) of partition test-0 failed" in warnings[0]
    assert "continuing with the next partition" in warnings[0]


def test_a_failed_zip_leaves_the_segment_and_no_partial_archive(tmp_path, caplog):
    """Goal: the zip is atomic. Method: the rename of the finished temporary file fails; the
    segment stays in the log and on disk, and neither .zip nor .zip.tmp remains."""
    files = FailingFiles(".zip.tmp")
    store = Store(tmp_path, policy="archive,1s,true", files=files)
    log = store.fill(records=1)
    store.age(10)
    with caplog.at_level(logging.WARNING, logger="meta.store"):
        store.tick()
    assert store.listing() == names(0, 100)
    assert log.min_offset == 0
    assert "retention (archive,1s,true) of partition test-0 failed" in caplog.text


def test_the_zip_is_fsynced_and_its_directory_too(tmp_path):
    files = RecordingFiles()
    store = Store(tmp_path, policy="archive,1s,true", files=files)
    store.fill(records=1)
    store.age(10)
    store.tick()
    assert files.events[-1] == ("fsync_directory", "test-0")


def test_each_topic_follows_its_own_delete_when_and_policy(tmp_path):
    root = str(tmp_path / "data")
    topics = (
        make_topic("fast", root, delete_policy="delete,1s", delete_when=EVERY_SECOND),
        make_topic("slow", root, delete_policy="delete,1s", delete_when="0 0 6,18 * * ?"),
    )
    store = Store(tmp_path, topics=topics)
    store.fill("fast", records=2)
    store.fill("slow", records=2)
    store.age(10, topic="fast")
    store.age(10, topic="slow")
    store.tick()
    assert store.listing("fast") == names(200)
    assert store.listing("slow") == names(0, 100, 200)
    assert len(retention_calls(store.clock)) == 1  # one timer for both expressions


def retention_calls(clock):
    """The clock's pending calls of the retention timer (the recovery points have their own)."""
    return [
        call
        for call in clock.getDelayedCalls()
        if getattr(call.func, "__name__", "") == "_retention_fired"
    ]


def test_the_timer_is_rearmed_after_each_fire(tmp_path):
    store = Store(tmp_path)
    store.fill(records=1)
    store.tick()
    store.fill(records=1)
    store.age(10)
    store.tick()
    assert store.listing() == names(200)
    (call,) = retention_calls(store.clock)
    assert call.getTime() == T0 + 3


def test_a_reload_reschedules_with_the_new_delete_when(tmp_path):
    store = Store(tmp_path, when="0 0 6,18 * * ?")
    store.fill(records=1)
    store.age(10)
    topics = (make_topic("test", store.root, delete_policy="delete,1s", delete_when=EVERY_SECOND),)
    store.store.set_config(store.config.with_overrides(topics=topics))
    store.tick()
    assert store.listing() == names(100)


def test_close_cancels_the_timer_and_stops_an_archive_being_written(tmp_path, caplog):
    """Goal: close leaves no timer and waits for (and stops) a running compression. Method:
    the zip job is held; close; the store stays open until the job ran and gave up."""
    jobs = ManualExecutor()
    store = Store(tmp_path, policy="archive,1s,true", background=jobs)
    store.fill(records=1)
    store.age(10)
    store.tick()
    closed = []
    store.store.close().addBoth(closed.append)
    assert store.clock.getDelayedCalls() == []
    assert closed == []
    with caplog.at_level(logging.INFO, logger="meta.store"):
        jobs.run_all()
    assert len(closed) == 1
    assert not isinstance(closed[0], Exception)
    assert store.listing() == names(0, 100)  # no .zip, no .zip.tmp
    assert "stopped: the store is closing" in caplog.text


def test_a_get_streaming_a_segment_that_retention_removed_closes_only_that_connection(tmp_path):
    """Goal: a FileReply whose segment was dropped (descriptor closed) must not crash the
    broker. Method: a get on a paused transport queues a reply on segment 0; retention deletes
    segment 0; resuming closes that connection, and a new get answers 301."""
    root = str(tmp_path / "data")
    os.makedirs(root)
    config = broker_config(
        root,
        topics=(
            make_topic(
                "test", root, num_partitions=1, delete_policy="delete,1s", delete_when=EVERY_SECOND
            ),
        ),
        segment_bytes_max=SEGMENT_BYTES,
        zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False),
    )
    clock = Clock()
    clock.advance(T0)
    store = StoreManager(config, clock, executor=SynchronousExecutor())
    broker = closing_broker(Broker(config, clock, store=store), clock)
    broker.start(listen=False)
    log = store.get_or_create("test", 0)
    for _ in range(2):
        log.append(RECORD)
    protocol = BrokerProtocol(broker)
    transport = StringTransport()
    protocol.makeConnection(transport)
    protocol.pauseProducing()
    protocol.dataReceived(encode(Get("test", "g", 0, 0, 1024, 1)))
    for name in names(0, 100):
        os.utime(os.path.join(root, "test-0", name), (T0 - 10, T0 - 10))
    clock.advance(1)
    assert log.min_offset == 200
    protocol.resumeProducing()
    assert transport.disconnecting
    other = BrokerProtocol(broker)
    other_transport = StringTransport()
    other.makeConnection(other_transport)
    other.dataReceived(encode(Get("test", "g", 0, 0, 1024, 2)))
    assert decode_all(other_transport.value()) == [Result(301, b"200", 2)]
    other.connectionLost()  # the client leaves before the broker stops (StringTransport
    # cannot half-close, as a stopping broker would ask)
