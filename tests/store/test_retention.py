"""Retention: Quartz ``deleteWhen`` parsing, eligibility, and delete / archive on real files.

Cron tests are pure and read the fields in UTC. Store tests use real files in ``tmp_path``, a
``task.Clock`` reactor set to ``T0``, file ages set with ``os.utime``, and synchronous or manual
executors, so every step of a retention run happens when the test says so (STYLE 21, 22).
"""

from __future__ import annotations

import logging
import os
import zipfile
from datetime import UTC, datetime

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from meta.config import ZkConfig, load_config
from meta.errors import ConfigError
from meta.protocol.codec import decode_all, encode
from meta.protocol.commands import Get, Result
from meta.server.broker import Broker
from meta.server.protocol import BrokerProtocol
from meta.store.group_commit import SynchronousExecutor
from meta.store.manager import StoreManager
from meta.store.retention import (
    CronError,
    QuartzCron,
    SegmentFacts,
    eligible_count,
    to_croniter,
)
from meta.store.segment import segment_name
from tests.store.conftest import EIO, ManualExecutor, RecordingFiles, broker_config, record
from tests.store.conftest import topic_config as make_topic
from tests.test_config import write_ini

T0 = 1_700_000_000.0  # the test clock's "now": 2023-11-14 22:13:20 UTC
EVERY_SECOND = "*/1 * * * * ?"
RECORD = record(b"x" * 80)  # 100 bytes: with SEGMENT_BYTES one record per segment
SEGMENT_BYTES = 100


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def fires(expression: str, after: str, count: int = 3) -> list[str]:
    cron = QuartzCron(expression, UTC)
    at = utc(after)
    found = []
    for _ in range(count):
        at = cron.next_fire_s(at)
        found.append(datetime.fromtimestamp(at, UTC).strftime("%a %Y-%m-%d %H:%M:%S"))
    return found


# --- Quartz cron ---------------------------------------------------------------------------


def test_the_shipped_expression_fires_at_six_and_eighteen_every_day():
    assert fires("0 0 6,18 * * ?", "2024-01-01T07:00:00") == [
        "Mon 2024-01-01 18:00:00",
        "Tue 2024-01-02 06:00:00",
        "Tue 2024-01-02 18:00:00",
    ]


def test_every_second_fires_on_the_next_whole_second():
    cron = QuartzCron(EVERY_SECOND, UTC)
    assert cron.next_fire_s(T0) == T0 + 1
    assert cron.next_fire_s(T0 + 0.25) == T0 + 1


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        # Ranges, steps and day-of-week names; Friday evening skips to Monday.
        (
            "0 0/15 9-17 ? * MON-FRI",
            "2024-01-05T17:40:00",
            ["Fri 2024-01-05 17:45:00", "Mon 2024-01-08 09:00:00", "Mon 2024-01-08 09:15:00"],
        ),
        # Quartz numbers days from SUN=1 to SAT=7.
        ("0 0 12 ? * 1", "2024-01-01T00:00:00", ["Sun 2024-01-07 12:00:00"]),
        ("0 0 12 ? * 7", "2024-01-01T00:00:00", ["Sat 2024-01-06 12:00:00"]),
        ("0 0 12 ? * mon", "2024-01-02T00:00:00", ["Mon 2024-01-08 12:00:00"]),
        # Lists of seconds, and an equal range that is one value (croniter: the whole cycle).
        ("15,45 * * * * ?", "2024-01-01T00:00:00", ["Mon 2024-01-01 00:00:15"] * 1),
        ("0 5-5 * * * ?", "2024-01-01T00:10:00", ["Mon 2024-01-01 01:05:00"]),
        # "/20" is "0/20"; "1/10" in day-of-month starts at day 1.
        ("0 /20 * * * ?", "2024-01-01T00:00:00", ["Mon 2024-01-01 00:20:00"]),
        (
            "0 0 12 1/10 * ?",
            "2024-01-01T13:00:00",
            ["Thu 2024-01-11 12:00:00", "Sun 2024-01-21 12:00:00", "Wed 2024-01-31 12:00:00"],
        ),
        # Ranges that wrap around the end of the field, as Quartz allows.
        (
            "0 0 22-2 * * ?",
            "2024-01-01T00:30:00",
            ["Mon 2024-01-01 01:00:00", "Mon 2024-01-01 02:00:00", "Mon 2024-01-01 22:00:00"],
        ),
        (
            "0 0 0 ? * FRI-MON",
            "2024-01-02T00:00:00",
            ["Fri 2024-01-05 00:00:00", "Sat 2024-01-06 00:00:00", "Sun 2024-01-07 00:00:00"],
        ),
        # Month names, the optional year field, and a year step.
        ("0 30 10 ? JAN,JUL SUN 2030", "2024-01-01T00:00:00", ["Sun 2030-01-06 10:30:00"]),
        (
            "0 0 0 1 1 ? 2030/5",
            "2024-01-01T00:00:00",
            ["Tue 2030-01-01 00:00:00", "Mon 2035-01-01 00:00:00", "Sun 2040-01-01 00:00:00"],
        ),
        # L, nW, nL and n#k.
        (
            "0 0 12 L * ?",
            "2024-01-01T00:00:00",
            ["Wed 2024-01-31 12:00:00", "Thu 2024-02-29 12:00:00", "Sun 2024-03-31 12:00:00"],
        ),
        ("0 0 12 15W * ?", "2024-06-01T00:00:00", ["Fri 2024-06-14 12:00:00"]),
        (
            "0 0 12 ? * 6L",
            "2024-01-01T00:00:00",
            ["Fri 2024-01-26 12:00:00", "Fri 2024-02-23 12:00:00", "Fri 2024-03-29 12:00:00"],
        ),
        ("0 0 12 ? * FRI#3", "2024-01-01T00:00:00", ["Fri 2024-01-19 12:00:00"]),
    ],
)
def test_quartz_forms_fire_at_the_quartz_times(expression, after, expected):
    assert fires(expression, after, len(expected)) == expected


def test_an_expression_that_never_fires_has_no_next_time():
    assert QuartzCron("0 0 0 30 2 ?", UTC).next_fire_s(T0) is None


def test_the_translation_puts_seconds_after_day_of_week():
    assert to_croniter("0 0 6,18 * * ?") == "0 6,18 * * * 0"


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("0 0 6,18 * *", "needs 6 or 7 fields"),
        ("0 0 6 * * ? 2030 x", "needs 6 or 7 fields"),
        ("0 0 6,18 * * *", "exactly one of day-of-month and day-of-week must be '?'"),
        ("0 0 6,18 ? * ?", "exactly one of day-of-month and day-of-week must be '?'"),
        ("0 0 25 * * ?", "hour value '25' is not a number 0-23"),
        ("60 0 6 * * ?", "second value '60' is not a number 0-59"),
        ("0 0 6 * FOO ?", "month value 'FOO' is not a number 1-12 or a name"),
        ("0 0 6 ? * 8", "day-of-week value '8' is not a number 1-7"),
        ("? 0 6 * * ?", "'?' is only allowed in day-of-month or day-of-week"),
        ("0 */0 6 * * ?", "minute step '0'"),
        ("0 0 6 LW * ?", "not supported"),
        ("0 0 6 L-3 * ?", "not supported"),
        ("0 0 6 1,L * ?", "cannot be combined with a list"),
        ("0 0 6 ? * 5#6", "nth '6'"),
        ("0 0 6 * * ? 1960", "year value '1960'"),
        ("0 0 6-", "needs 6 or 7 fields"),
        ("0 0 6 * 1- ?", "month value ''"),
    ],
)
def test_malformed_expressions_are_refused_naming_the_expression(expression, reason):
    with pytest.raises(CronError) as info:
        QuartzCron(expression)
    assert reason in str(info.value)
    assert repr(expression.strip()) in str(info.value)


def test_a_bad_delete_when_stops_config_loading_naming_file_section_key_and_value(tmp_path):
    path = write_ini(tmp_path, system=("deleteWhen=0 0 25 * * ?",))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert "server.ini: [system] deleteWhen='0 0 25 * * ?'" in text
    assert "hour value '25' is not a number 0-23" in text


def test_a_bad_topic_delete_when_names_the_topic_section(tmp_path):
    path = write_ini(tmp_path, topics="[topic=test]\ndeleteWhen=0 0 6 * * *\n")
    with pytest.raises(ConfigError, match=r"\[topic=test\] deleteWhen='0 0 6 \* \* \*'"):
        load_config(path)


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
        self.config = broker_config(self.root, topics=topics, segment_bytes_max=SEGMENT_BYTES)
        self.clock = Clock()
        self.clock.advance(T0)
        self.store = StoreManager(
            self.config,
            self.clock,
            files=files,
            executor=flush_executor or SynchronousExecutor(),
            background=background or SynchronousExecutor(),
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
    the flush batch of the records; tick (nothing goes); run the batch; tick again."""
    flush = ManualExecutor()
    store = Store(tmp_path, flush_executor=flush)
    store.fill(records=2)
    store.age(10)
    store.tick()
    assert store.listing() == names(0, 100, 200)
    flush.run_all()
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
    assert len(store.clock.getDelayedCalls()) == 1  # one timer for both expressions


def test_the_timer_is_rearmed_after_each_fire(tmp_path):
    store = Store(tmp_path)
    store.fill(records=1)
    store.tick()
    store.fill(records=1)
    store.age(10)
    store.tick()
    assert store.listing() == names(200)
    (call,) = store.clock.getDelayedCalls()
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
    broker = Broker(config, clock, store=store)
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
