"""StoreManager: loading every partition directory, get / get_or_create checks, timers, close."""

from __future__ import annotations

import errno
import os

import pytest

from meta.config import FlushMode
from meta.errors import DescriptorShortageError, InvalidTopicError, StoreError
from meta.store.group_commit import SynchronousExecutor
from meta.store.manager import StoreManager
from tests.store.conftest import (
    ManualExecutor,
    broker_config,
    closing_store,
    collect,
    record,
    topic_config,
)


def make_partition_dir(root, name: str, data: bytes = b"") -> None:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "00000000000000000000.meta").write_bytes(data)


def manager_for(config, clock, files=None, executor=None):
    """A store on ``config``, closed after the test."""
    return closing_store(
        StoreManager(
            config,
            clock,
            files=files,
            executor=executor if executor is not None else SynchronousExecutor(),
        )
    )


def keys(manager):
    return sorted((log.topic, log.partition) for log in manager.partitions())


@pytest.fixture
def data_path(tmp_path):
    path = tmp_path / "meta"
    path.mkdir()
    return path


def test_load_opens_every_partition_directory_of_every_data_path(tmp_path, data_path, clock):
    """Goal: start-up loads every partition found on disk (DECISIONS 10).

    Method: partitions under [system] dataPath and under a topic's own dataPath, next to a
    transactions/ directory, a plain file and a directory without "-", which are skipped.
    """
    special = tmp_path / "special"
    make_partition_dir(data_path, "alpha-0")
    make_partition_dir(data_path, "alpha-1")
    make_partition_dir(data_path, "not-configured-7")
    make_partition_dir(special, "beta-2")
    (data_path / "transactions").mkdir()
    (data_path / "stray-file-1").write_bytes(b"x")
    (data_path / "nodash").mkdir()
    config = broker_config(
        str(data_path),
        topics=(
            topic_config("alpha", str(data_path)),
            topic_config("beta", str(special)),
        ),
    )
    manager = manager_for(config, clock)
    manager.load()
    assert keys(manager) == [("alpha", 0), ("alpha", 1), ("beta", 2), ("not-configured", 7)]


def test_load_splits_topic_and_partition_at_the_last_dash(data_path, clock):
    make_partition_dir(data_path, "my-topic-3")
    manager = manager_for(broker_config(str(data_path)), clock)
    manager.load()
    assert manager.get("my-topic", 3) is not None


def test_load_recovers_the_last_segment(data_path, clock):
    make_partition_dir(data_path, "alpha-0", record(b"kept") + b"\x00" * 7)
    manager = manager_for(broker_config(str(data_path)), clock)
    manager.load()
    assert manager.get("alpha", 0).max_offset == 24


def test_load_refuses_a_non_integer_partition_naming_the_directory(data_path, clock):
    (data_path / "alpha-x").mkdir()
    manager = manager_for(broker_config(str(data_path)), clock)
    with pytest.raises(StoreError, match="alpha-x"):
        manager.load()


def test_load_refuses_the_same_partition_under_two_data_paths(tmp_path, data_path, clock):
    special = tmp_path / "special"
    make_partition_dir(data_path, "beta-0")
    make_partition_dir(special, "beta-0")
    config = broker_config(str(data_path), topics=(topic_config("beta", str(special)),))
    with pytest.raises(StoreError, match="found twice"):
        manager_for(config, clock).load()


def test_load_of_a_missing_data_path_finds_nothing(tmp_path, clock):
    manager = manager_for(broker_config(str(tmp_path / "absent")), clock)
    manager.load()
    assert manager.partitions() == []


def test_get_returns_none_for_an_unknown_partition(data_path, clock):
    manager = manager_for(broker_config(str(data_path)), clock)
    assert manager.get("alpha", 0) is None


def test_get_or_create_creates_the_directory_and_first_segment(data_path, clock):
    config = broker_config(str(data_path), topics=(topic_config("alpha", str(data_path)),))
    manager = manager_for(config, clock)
    manager.get_or_create("alpha", 3)
    assert os.listdir(data_path / "alpha-3") == ["00000000000000000000.meta"]


def test_get_or_create_returns_the_same_log_twice(data_path, clock):
    config = broker_config(str(data_path), topics=(topic_config("alpha", str(data_path)),))
    manager = manager_for(config, clock)
    assert manager.get_or_create("alpha", 1) is manager.get_or_create("alpha", 1)


def test_get_or_create_uses_the_topics_data_path(tmp_path, data_path, clock):
    special = tmp_path / "special"
    special.mkdir()
    config = broker_config(str(data_path), topics=(topic_config("beta", str(special)),))
    manager = manager_for(config, clock)
    assert manager.get_or_create("beta", 0).directory == str(special / "beta-0")


def test_get_or_create_creates_a_missing_data_path_one_level_deep(tmp_path, clock):
    config = broker_config(str(tmp_path / "fresh"))
    config = config.with_overrides(topics=(topic_config("alpha", str(tmp_path / "fresh")),))
    manager = manager_for(config, clock)
    manager.get_or_create("alpha", 0)
    assert (tmp_path / "fresh" / "alpha-0").is_dir()


def test_get_or_create_refuses_a_topic_the_configuration_does_not_accept(data_path, clock):
    config = broker_config(str(data_path), topics=(topic_config("alpha", str(data_path)),))
    manager = manager_for(config, clock)
    with pytest.raises(InvalidTopicError, match="^The server do not accept topic gamma$"):
        manager.get_or_create("gamma", 0)


def test_get_or_create_refuses_an_illegal_topic_name_before_touching_disk(data_path, clock):
    config = broker_config(str(data_path), topics=(topic_config("*", str(data_path)),))
    manager = manager_for(config, clock)
    with pytest.raises(InvalidTopicError):
        manager.get_or_create("../escape", 0)
    assert os.listdir(data_path) == []


def test_get_or_create_accepts_a_topic_matching_a_wildcard_section(data_path, clock):
    config = broker_config(str(data_path), topics=(topic_config("log-*", str(data_path)),))
    manager = manager_for(config, clock)
    assert manager.get_or_create("log-web", 1).topic == "log-web"


@pytest.mark.parametrize("partition", [-1, 4, 99])
def test_get_or_create_refuses_a_partition_out_of_range(data_path, clock, partition):
    config = broker_config(str(data_path), topics=(topic_config("alpha", str(data_path)),))
    manager = manager_for(config, clock)
    with pytest.raises(StoreError, match=f"^wrong partition {partition}$"):
        manager.get_or_create("alpha", partition)


def test_get_or_create_checks_a_partition_loaded_from_disk(data_path, clock):
    make_partition_dir(data_path, "alpha-9")
    config = broker_config(str(data_path), topics=(topic_config("alpha", str(data_path)),))
    manager = manager_for(config, clock)
    manager.load()
    with pytest.raises(StoreError, match="wrong partition 9"):
        manager.get_or_create("alpha", 9)


def test_partitions_take_their_flush_mode_from_the_topic(data_path, clock):
    config = broker_config(
        str(data_path),
        topics=(
            topic_config("alpha", str(data_path), unflush_threshold=0),
            topic_config("beta", str(data_path), unflush_threshold=100),
        ),
    )
    manager = manager_for(config, clock)
    modes = [manager.get_or_create(topic, 0).policy.mode for topic in ("alpha", "beta")]
    assert modes == [FlushMode.GROUP_COMMIT, FlushMode.THRESHOLD]


def test_a_new_partition_syncs_its_directories_before_the_first_ack(data_path, clock, files):
    config = broker_config(str(data_path), topics=(topic_config("alpha", str(data_path)),))
    manager = manager_for(config, clock, files=files)
    collect(manager.get_or_create("alpha", 0).append(record(b"a")))
    synced = [name for kind, name in files.events if kind == "fsync_directory"]
    assert synced == ["meta", "alpha-0"]


def test_the_interval_timer_flushes_dirty_data_in_threshold_mode(data_path, clock, files):
    """Goal: in threshold mode the periodic timer makes unflushed data durable.

    Method: N=1000 so no append flushes; advance a task.Clock past unflushInterval.
    """
    config = broker_config(
        str(data_path),
        topics=(
            topic_config("alpha", str(data_path), unflush_threshold=1000, unflush_interval_ms=500),
        ),
    )
    manager = manager_for(config, clock, files=files)
    manager.start()
    log = manager.get_or_create("alpha", 0)
    collect(log.append(record(b"a")))
    clock.advance(0.4)
    before = files.count("fsync")
    clock.advance(0.1)
    assert (before, files.count("fsync"), log.durable_end) == (0, 1, 21)


def test_the_interval_timer_leaves_clean_partitions_alone(data_path, clock, files):
    config = broker_config(
        str(data_path),
        topics=(
            topic_config("alpha", str(data_path), unflush_threshold=1000, unflush_interval_ms=500),
        ),
    )
    manager = manager_for(config, clock, files=files)
    manager.get_or_create("alpha", 0)
    manager.start()
    clock.advance(0.5)
    files.events.clear()
    clock.advance(5)
    assert files.count("fsync") == 0


def test_close_flushes_and_releases_waiting_appends(data_path, clock, files):
    executor = ManualExecutor()
    config = broker_config(str(data_path), topics=(topic_config("alpha", str(data_path)),))
    manager = manager_for(config, clock, files=files, executor=executor)
    log = manager.get_or_create("alpha", 0)
    acks = [collect(log.append(record(payload))) for payload in (b"a", b"b")]
    closed = collect(manager.close())
    executor.run_all()
    assert (acks, closed) == ([[0], [21]], [None])


def test_close_syncs_unflushed_threshold_data(data_path, clock, files):
    config = broker_config(
        str(data_path), topics=(topic_config("alpha", str(data_path), unflush_threshold=1000),)
    )
    manager = manager_for(config, clock, files=files)
    log = manager.get_or_create("alpha", 0)
    collect(log.append(record(b"a")))
    collect(manager.close())
    assert (files.count("fsync"), log.durable_end) == (1, 21)


def test_appends_after_close_fail(data_path, clock):
    config = broker_config(str(data_path), topics=(topic_config("alpha", str(data_path)),))
    manager = manager_for(config, clock)
    log = manager.get_or_create("alpha", 0)
    collect(manager.close())
    (result,) = collect(log.append(record(b"late")))
    assert result.check(StoreError)


def test_get_or_create_after_close_fails(data_path, clock):
    config = broker_config(str(data_path), topics=(topic_config("alpha", str(data_path)),))
    manager = manager_for(config, clock)
    collect(manager.close())
    with pytest.raises(StoreError, match="closed"):
        manager.get_or_create("alpha", 0)


def test_get_or_create_without_a_free_descriptor_fails_transiently(data_path, clock, files):
    config = broker_config(str(data_path), topics=(topic_config("alpha", str(data_path)),))
    manager = manager_for(config, clock, files=files)
    open_file = files.open

    def no_descriptor(path, *, create=False, writable=True):
        raise OSError(errno.EMFILE, "Too many open files")

    files.open = no_descriptor
    with pytest.raises(DescriptorShortageError, match="Too many open files"):
        manager.get_or_create("alpha", 0)
    files.open = open_file
    assert collect(manager.get_or_create("alpha", 0).append(record(b"stored"))) == [0]
