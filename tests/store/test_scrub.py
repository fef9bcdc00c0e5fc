"""The background scrubber: its pacing on a test clock, its passes, what it reports and fences.

Pieces run on a synchronous executor and time is a ``task.Clock``, so the pacing is checked
exactly: a piece of ``n`` bytes delays the next by ``n / bytes_per_s`` seconds.
"""

from __future__ import annotations

import logging
import os

from twisted.internet.task import Clock

from meta.store.group_commit import SynchronousExecutor
from meta.store.manager import StoreManager
from meta.store.read_slice import CORRUPT, DATA
from meta.store.scrub import IDLE_S, Scrubber
from tests.store.conftest import broker_config, closing_store, record, topic_config

# 100-byte records: a piece of 1,000 bytes is exactly ten of them.
PAYLOAD = b"p" * 80
RECORD_BYTES = 100


def make_store(tmp_path, segments: dict[int, bytes], rate: int = 0) -> StoreManager:
    """A store over ``test-0`` holding ``segments`` (start -> bytes), loaded, not started."""
    root = tmp_path / "data"
    directory = root / "test-0"
    directory.mkdir(parents=True)
    for start, data in segments.items():
        (directory / f"{start:020d}.meta").write_bytes(data)
    config = broker_config(
        str(root), topics=(topic_config("test", str(root)),), scrub_bytes_per_s=rate
    )
    store = closing_store(
        StoreManager(
            config, Clock(), executor=SynchronousExecutor(), background=SynchronousExecutor()
        )
    )
    store.load()
    return store


def records(count: int, first_id: int = 1) -> bytes:
    return b"".join(record(PAYLOAD, first_id + index) for index in range(count))


def scrubber(
    store: StoreManager, clock: Clock, rate: int, step: int = 1000, pass_s: float = 0.0
) -> Scrubber:
    """A scrubber over ``store`` (passes ``pass_s`` apart at least: none by default)."""
    executor = SynchronousExecutor()
    return Scrubber(store, clock, executor, rate, step, pass_s)


def started(scrub: Scrubber, clock: Clock) -> Scrubber:
    """Start ``scrub``; its first piece runs at once (time 0 of the test clock)."""
    scrub.start()
    clock.advance(0)
    return scrub


def test_the_scrubber_checks_no_faster_than_its_rate(tmp_path):
    """Goal: the average rate never exceeds bytes_per_s. Method: 50 records in two segments,
    1,000 B/s, pieces of 1,000 bytes; read the count every half second of test-clock time."""
    store = make_store(tmp_path, {0: records(30), 3000: records(20, 31)})
    clock = Clock()
    scrub = scrubber(store, clock, rate=1000)
    started(scrub, clock)
    seen = []
    for _ in range(8):
        seen.append(scrub.bytes_scrubbed)
        clock.advance(0.5)
    assert seen == [1000, 1000, 2000, 2000, 3000, 3000, 4000, 4000]


def test_a_full_pass_is_counted_and_the_next_starts_from_the_beginning(tmp_path):
    store = make_store(tmp_path, {0: records(10)})
    clock = Clock()
    scrub = started(scrubber(store, clock, rate=1000), clock)
    clock.advance(1.0)  # the second piece finds the partition done: pass 1, then it restarts
    assert (scrub.passes, scrub.bytes_scrubbed) == (1, 2000)
    assert store.get("test", 0).health.scrub_passes == 1
    assert store.get("test", 0).health.scrubbed_bytes == 2000


def test_a_pass_starts_no_sooner_than_the_least_interval_after_the_last(tmp_path):
    store = make_store(tmp_path, {0: records(10)})
    clock = Clock()
    scrub = started(scrubber(store, clock, rate=1000, pass_s=10.0), clock)
    clock.advance(1.0)
    assert (scrub.passes, scrub.bytes_scrubbed) == (1, 1000)
    clock.advance(8.9)
    assert scrub.bytes_scrubbed == 1000
    clock.advance(0.1)
    assert scrub.bytes_scrubbed == 2000


def test_a_rate_of_zero_schedules_nothing(tmp_path):
    store = make_store(tmp_path, {0: records(10)})
    clock = Clock()
    scrubber(store, clock, rate=0).start()
    assert clock.getDelayedCalls() == []


def test_an_empty_store_is_looked_at_again_after_the_idle_time(tmp_path):
    (tmp_path / "data").mkdir()
    config = broker_config(str(tmp_path / "data"), scrub_bytes_per_s=1000)
    store = closing_store(StoreManager(config, Clock(), executor=SynchronousExecutor()))
    clock = Clock()
    started(scrubber(store, clock, rate=1000), clock)
    (call,) = clock.getDelayedCalls()
    assert call.getTime() == IDLE_S


def test_stop_cancels_the_next_piece(tmp_path):
    store = make_store(tmp_path, {0: records(10)})
    clock = Clock()
    scrub = started(scrubber(store, clock, rate=1000), clock)
    scrub.stop()
    clock.advance(10)
    assert (scrub.bytes_scrubbed, clock.getDelayedCalls()) == (1000, [])


def flip(data: bytes, index: int) -> bytes:
    changed = bytearray(data)
    changed[index] ^= 0x10
    return bytes(changed)


def test_a_flipped_bit_in_an_older_segment_is_logged_fenced_and_counted(tmp_path, caplog):
    older = flip(records(10), 5 * RECORD_BYTES + 50)  # the payload of the sixth record
    store = make_store(tmp_path, {0: older, 1000: records(5, 11)})
    clock = Clock()
    scrub = scrubber(store, clock, rate=10_000)
    log = store.get("test", 0)
    assert log.slice(0, 5000).length == 1000  # not known yet: served up to the segment end
    with caplog.at_level(logging.ERROR, logger="meta.store.scrub"):
        started(scrub, clock)
    assert scrub.corrupt_found == 1
    path = os.path.join(log.directory, f"{0:020d}.meta")
    assert f"corrupt record in {path} at position 500" in caplog.text
    assert "checksum mismatch" in caplog.text
    (known,) = log.health.ranges
    assert (known.start, known.end, known.found_by) == (500, 600, "scrubber")
    assert (log.slice(0, 5000).kind, log.slice(0, 5000).length) == (DATA, 500)
    assert log.slice(500, 5000).kind == CORRUPT
    assert log.slice(550, 5000).corrupt is known
    assert (log.slice(600, 5000).kind, log.slice(600, 5000).length) == (DATA, 400)


def test_a_range_found_again_in_the_next_pass_is_reported_once(tmp_path, caplog):
    store = make_store(tmp_path, {0: flip(records(10), 250), 1000: records(5, 11)})
    clock = Clock()
    scrub = scrubber(store, clock, rate=10_000)
    with caplog.at_level(logging.ERROR, logger="meta.store.scrub"):
        started(scrub, clock)
        for _ in range(50):
            clock.advance(0.1)
    assert scrub.passes >= 2
    assert (scrub.corrupt_found, caplog.text.count("corrupt record")) == (1, 1)


def test_a_zeroed_record_is_one_range_and_the_records_after_it_are_served(tmp_path):
    data = records(10)
    zeroed = data[:300] + bytes(RECORD_BYTES) + data[400:]
    store = make_store(tmp_path, {0: zeroed, 1000: records(5, 11)})
    started(scrubber(store, clock := Clock(), rate=10_000), clock)
    (known,) = store.get("test", 0).health.ranges
    assert (known.start, known.end) == (300, 400)
    assert "all-zero" in known.reason


def test_a_flipped_length_bit_fences_up_to_where_records_resume(tmp_path):
    data = records(10)
    store = make_store(tmp_path, {0: flip(data, 300 + 3), 1000: records(5, 11)})
    started(scrubber(store, clock := Clock(), rate=10_000), clock)
    (known,) = store.get("test", 0).health.ranges
    assert (known.start, known.end) == (300, 400)
