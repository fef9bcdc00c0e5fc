"""``meta-admin truncate-partition``: a stopped broker's partition cut back to an offset.

Real segment files (records packed as a broker writes them, two segments); the command runs
through ``meta-admin``'s ``main`` as an operator would.
"""

from __future__ import annotations

import json
import os

import pytest

from meta.admin.main import main
from meta.protocol.message import iter_messages, pack_message
from meta.store.lock import DataPathLock
from meta.store.segment import segment_name

RECORDS = [pack_message(n, 0, b"record %d" % n) for n in range(6)]
SIZE = len(RECORDS[0])  # every record has the same size here


@pytest.fixture
def partition(tmp_path):
    """``tmp_path/orders-0`` with records 0-2 in the first segment and 3-5 in the second."""
    directory = tmp_path / "orders-0"
    directory.mkdir()
    (directory / segment_name(0)).write_bytes(b"".join(RECORDS[:3]))
    (directory / segment_name(3 * SIZE)).write_bytes(b"".join(RECORDS[3:]))
    return directory


def offsets(directory) -> list[int]:
    found = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".meta"):
            continue
        start = int(name.split(".")[0])
        data = (directory / name).read_bytes()
        found += [record.offset for record in iter_messages(data, base_offset=start)]
    return found


def run(capsys, *words: str) -> tuple[int, str, str]:
    status = main(["truncate-partition", *words])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_without_execute_it_reports_and_changes_nothing(capsys, tmp_path, partition):
    status, out, _err = run(capsys, str(tmp_path), "orders-0", "--end", str(2 * SIZE))
    assert status == 0
    assert f"would cut {4 * SIZE} bytes" in out
    assert segment_name(3 * SIZE) in out
    assert offsets(partition) == [n * SIZE for n in range(6)]


def test_execute_cuts_back_to_the_offset_across_segments(capsys, tmp_path, partition):
    status, out, _err = run(
        capsys, str(tmp_path), "orders-0", "--end", str(2 * SIZE), "--execute", "--json"
    )
    assert status == 0
    assert json.loads(out)["action"] == "cut"
    assert offsets(partition) == [0, SIZE]
    assert os.listdir(partition) == [segment_name(0)]


def test_an_offset_inside_a_record_is_refused_with_the_records_around_it(
    capsys, tmp_path, partition
):
    status, _out, err = run(capsys, str(tmp_path), "orders-0", "--end", str(4 * SIZE + 3))
    assert status == 1
    assert f"the nearest records start at {4 * SIZE} (before it) and {5 * SIZE} (after it)" in err
    assert offsets(partition) == [n * SIZE for n in range(6)]


def test_an_offset_before_the_first_segment_is_refused(capsys, tmp_path, partition):
    (partition / segment_name(0)).unlink()
    status, _out, err = run(capsys, str(tmp_path), "orders-0", "--end", str(SIZE))
    assert status == 1
    assert f"before the partition's first offset {3 * SIZE}" in err


def test_a_partition_that_ends_before_the_offset_is_left_as_it_is(capsys, tmp_path, partition):
    status, out, _err = run(capsys, str(tmp_path), "orders-0", "--end", str(7 * SIZE), "--execute")
    assert status == 0
    assert f"ends at {6 * SIZE}, not after {7 * SIZE}: nothing to cut" in out
    assert offsets(partition) == [n * SIZE for n in range(6)]


def test_the_end_of_the_partition_cuts_nothing(capsys, tmp_path, partition):
    status, out, _err = run(capsys, str(tmp_path), "orders-0", "--end", str(6 * SIZE), "--execute")
    assert status == 0
    assert "nothing to cut" in out


def test_a_directory_a_broker_holds_is_refused(capsys, tmp_path, partition):
    lock = DataPathLock()
    lock.acquire([str(tmp_path)])
    try:
        status, _out, err = run(capsys, str(tmp_path), "orders-0", "--end", str(SIZE), "--execute")
    finally:
        lock.release()
    assert status == 1
    assert "in use by another broker" in err
    assert offsets(partition) == [n * SIZE for n in range(6)]


def test_help_says_when_to_use_it(capsys):
    status, out, _err = run(capsys, "--help")
    assert status == 0
    for text in ("usage: meta-admin truncate-partition", "DIR", "TOPIC-N", "--end", "--execute"):
        assert text in out
    assert "a restart may serve records" in " ".join(out.split())


def test_without_end_it_shows_the_cut_a_pending_truncation_record_names(
    capsys, tmp_path, partition
):
    """The record a failed broker left (``meta.store.pending_truncation``) gives the end:
    the command shows the cut the next start will make, and makes it with --execute."""
    from meta.store.pending_truncation import RECORD_NAME, record_text

    (partition / RECORD_NAME).write_bytes(record_text("orders-0", 4 * SIZE))
    status, out, _err = run(capsys, str(tmp_path), "orders-0", "--json")
    assert status == 0
    document = json.loads(out)
    assert (document["end"], document["bytes_cut"]) == (4 * SIZE, 2 * SIZE)
    assert document["pending_records"] == [str(partition / RECORD_NAME)]
    assert offsets(partition) == [n * SIZE for n in range(6)]
    status, _out, _err = run(capsys, str(tmp_path), "orders-0", "--execute")
    assert (status, offsets(partition)) == (0, [n * SIZE for n in range(4)])


def test_without_end_or_record_it_refuses(capsys, tmp_path, partition):
    status, _out, err = run(capsys, str(tmp_path), "orders-0")
    assert status == 1
    assert "no pending truncation record: give --end" in err
