"""The slave's batch walk and check in C (``meta.slave._record_crc``) give exactly the pure
walk's and check's results and errors, and the check releases the GIL while it runs.

The extension under test is the checkout's when the install built it, else one built
from the same source into a scratch directory for this module (a second or so), so both
checks are compared whichever build the checkout holds.
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

from meta.errors import InvalidRecordError
from meta.protocol.message import CHECKSUM_MASK, HEADER, HEADER_SIZE, pack_message
from meta.slave import record_check
from meta.slave.record_check import (
    Frame,
    check_frame_native,
    check_native,
    check_pure,
    frame_native,
    frame_pure,
    record_ends,
)

SOURCE = Path(record_check.__file__).with_name("_record_crc.c")
BUILD_SCRIPT = """\
import sys
from setuptools import Extension, setup
setup(name="record_crc_under_test", script_args=["build_ext", "--build-lib", sys.argv[1],
      "--build-temp", sys.argv[2]],
      ext_modules=[Extension("_record_crc", [sys.argv[3]], libraries=["isal"])])
"""
SIZE_CLASSES = (0, 1, 100, 1000, 1024, 4096, 16384, 1 << 20)
"""Payload sizes: empty, tiny, the bench's 1 KB and the fetch's larger records."""


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> ModuleType:
    """The C check: the checkout's build, else built here from its source."""
    if record_check.EXTENSION is not None:
        return record_check.EXTENSION
    out = tmp_path_factory.mktemp("record_crc")
    command = [sys.executable, "-c", BUILD_SCRIPT, str(out), str(out / "tmp"), str(SOURCE)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (path,) = out.glob("_record_crc*.so")
    spec = importlib.util.spec_from_file_location("_record_crc", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def records(sizes: list[int], seed: int = 0) -> bytes:
    generator = random.Random(seed)
    return b"".join(pack_message(index, 0, generator.randbytes(size))
                    for index, size in enumerate(sizes))  # fmt: skip


def outcome(check, native: ModuleType, data: bytes | bytearray, base: int = 1000) -> object:
    """What ``record_ends`` and then ``check`` say of ``data``: the ends, or the error."""
    try:
        ends = record_ends(data, base)
        if check is check_native:
            check_native(native, data, ends, base)
        else:
            check_pure(data, ends, base)
    except InvalidRecordError as error:
        return f"InvalidRecordError: {error}"
    return ends


def frame_outcome(native: ModuleType | None, data: bytes | bytearray, base: int = 1000) -> object:
    """What the fetch thread's two passes say of ``data``: C (``native``) or pure (None);
    the frame without its list of ends, or the error."""
    try:
        if native is None:
            frame = frame_pure(data, base)
            check_pure(data, frame.ends, base)
        else:
            frame = frame_native(native, data, base)
            check_frame_native(native, data, frame, base)
    except InvalidRecordError as error:
        return f"InvalidRecordError: {error}"
    return frame._replace(ends=None)


def same_outcome(native: ModuleType, data: bytes | bytearray) -> object:
    """Both checks of a list of ends agree, and so do both frame walks and checks; returns
    the ends or the error."""
    found = outcome(check_native, native, data)
    assert found == outcome(check_pure, native, data)
    framed = frame_outcome(native, data)
    assert framed == frame_outcome(None, data)
    if isinstance(found, str):
        assert framed == found  # the same error text, whichever pass found it
    else:
        last_start = found[-2] if len(found) > 1 else 0
        assert framed == Frame(len(found), found[-1] if found else 0, last_start)
    return found


def test_every_size_class_passes_and_a_bad_record_is_named_by_both(native):
    for size in SIZE_CLASSES:
        count = max(2, min(40, (4 << 20) // (size + HEADER_SIZE)))
        data = bytearray(records([size] * count, seed=size))
        assert same_outcome(native, data) == record_ends(data, 1000)
        bad = count // 2
        data[bad * (size + HEADER_SIZE) + 4] ^= 0x01  # the checksum field's top byte
        expected = f"checksum mismatch at offset {1000 + bad * (size + HEADER_SIZE)}"
        assert same_outcome(native, data) == f"InvalidRecordError: {expected}"


def test_random_batches_of_mixed_sizes_with_one_corrupt_byte_or_none(native):
    generator = random.Random(7)
    mismatches = 0
    for seed in range(60):
        sizes = [generator.choice(SIZE_CLASSES[:6]) for _ in range(generator.randint(1, 30))]
        data = bytearray(records(sizes, seed=seed))
        if seed % 3:
            data[generator.randrange(len(data))] ^= 1 << generator.randrange(8)
        data = data[: generator.randint(len(data) - 50, len(data))]
        mismatches += "mismatch" in str(same_outcome(native, data))
    assert mismatches > 10  # the corruptions did reach checksums and payloads


def test_every_single_bit_flip_of_every_field_gives_the_same_outcome(native):
    """Length, checksum, id, flag and payload of the first, a middle and the last record."""
    data = records([30, 30, 7, 30])
    seen = set()
    for position in range(len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[position] ^= 1 << bit
            seen.add(str(same_outcome(native, flipped)).split(" at ")[0][:40])
    assert len(seen) >= 3  # passes (id, flag), checksum mismatches and negative lengths


def test_a_batch_cut_at_every_position_gives_the_same_outcome(native):
    data = records([50, 0, 1, 120, 50])
    for cut in range(len(data) + 1):
        same_outcome(native, data[:cut])


@pytest.mark.parametrize(
    ("payload", "crc"),
    [
        (b"", 0),
        (b"a", 0xE8B7BE43),
        (b"hello", 907060870),
        (b"123456789", 0xCBF43926),  # the CRC-32 check value
    ],
)
def test_the_golden_crc_vectors(native, payload, crc):
    good = HEADER.pack(len(payload), crc & CHECKSUM_MASK, 1, 0) + payload
    bad = HEADER.pack(len(payload), (crc ^ 0x10) & CHECKSUM_MASK, 2, 0) + payload
    assert native.first_bad(good + good, [len(good), 2 * len(good)]) == -1
    assert native.first_bad(good + bad, [len(good), 2 * len(good)]) == 1
    top_bit = HEADER.pack(len(payload), (crc | 0x80000000) - (1 << 32), 3, 0)[:8]  # unmasked
    assert native.first_bad(top_bit + good[8:], [len(good)]) == 0


def test_ends_that_are_not_records_of_the_batch_are_refused(native):
    data = records([10, 10])
    for ends in ([61], [30, 49], [19], [30, 20], [-1]):  # past the end, shorter than a header
        with pytest.raises(ValueError, match="not a record"):
            native.first_bad(data, ends)
    with pytest.raises(TypeError):
        native.first_bad(data, 30)
    with pytest.raises(TypeError):
        native.first_bad("text", [])
    assert native.first_bad(memoryview(data), (30, 60)) == -1
    assert native.first_bad(b"", []) == -1


def test_a_frame_of_a_view_and_of_an_empty_or_partial_batch(native):
    data = records([10, 10, 10])
    assert native.frame(memoryview(data)) == (3, 90, 60, -1)
    assert native.frame(b"") == (0, 0, 0, -1)
    assert native.frame(data[:29]) == (0, 0, 0, -1)
    assert native.frame(data[:31]) == (1, 30, 0, -1)
    with pytest.raises(TypeError):
        native.frame("text")


def test_a_check_before_an_end_that_is_not_a_record_boundary_is_refused(native):
    data = records([10, 10])
    for end in (61, 29, 31, 59, -1):
        with pytest.raises(ValueError, match="not a record boundary"):
            native.first_bad_before(data, end)
    assert native.first_bad_before(data, 0) == -1
    assert native.first_bad_before(memoryview(data), 60) == -1
    bad = bytearray(data)
    bad[30 + 4] ^= 0x01
    assert native.first_bad_before(bad, 30) == -1  # the bad record is past the end
    assert native.first_bad_before(bad, 60) == 30


def test_the_implementation_says_whether_the_extension_runs():
    built = record_check.EXTENSION is not None
    assert record_check.IMPLEMENTATION.startswith("C (" if built else "pure Python")


@pytest.mark.parametrize("call", ["first_bad", "first_bad_before"])
def test_another_thread_runs_while_a_large_batch_is_checked(native, call):
    """Goal: the GIL is released during the C check. Method: with a switch interval of 10 s
    (a thread that holds the GIL keeps it), a worker checks a 16 MiB batch up to 20 times,
    timing each call; the main thread notes the time in a loop of short sleeps. Only if the
    call released the GIL can a note fall inside a call."""
    data = records([1024] * (16 << 10))
    ends = record_ends(data, 0)
    calls: list[tuple[float, float]] = []
    notes: list[float] = []
    done = threading.Event()

    def check() -> None:
        for _ in range(20):
            started = time.perf_counter()
            if call == "first_bad":
                assert native.first_bad(data, ends) == -1
            else:
                assert native.first_bad_before(data, ends[-1]) == -1
            calls.append((started, time.perf_counter()))
            if sum(started < note < ended for note in notes for started, ended in calls) >= 5:
                break
        done.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    try:
        worker = threading.Thread(target=check)
        worker.start()
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline:
            notes.append(time.perf_counter())
            time.sleep(0.0002)
        worker.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert not worker.is_alive() and len(calls) >= 1
    inside = sum(started < note < ended for note in notes for started, ended in calls)
    assert inside >= 5, (inside, len(notes), calls)
