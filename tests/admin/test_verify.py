"""``meta-admin verify``: the offline check of a data directory (real files, no broker)."""

from __future__ import annotations

import json

from meta.admin.main import main
from meta.protocol.message import pack_message
from meta.store.recovery_point import FILE_NAME, encode_points

PAYLOAD = b"p" * 80  # 100-byte records


def records(count: int, first_id: int = 1) -> bytes:
    return b"".join(pack_message(first_id + index, 0, PAYLOAD) for index in range(count))


def write(root, partition: str, segments: dict[int, bytes]) -> None:
    directory = root / partition
    directory.mkdir(parents=True)
    for start, data in segments.items():
        (directory / f"{start:020d}.meta").write_bytes(data)


def flip(data: bytes, index: int) -> bytes:
    changed = bytearray(data)
    changed[index] ^= 0x01
    return bytes(changed)


def verify(capsys, *argv: str) -> tuple[int, str]:
    status = main(["verify", *argv])
    return status, capsys.readouterr().out


def test_a_clean_directory_exits_0_with_a_summary(tmp_path, capsys):
    write(tmp_path, "orders-0", {0: records(10), 1000: records(3, 11)})
    status, out = verify(capsys, str(tmp_path))
    assert status == 0
    assert "checked 1 partition, 2 segment files, 1300 bytes, 13 valid records" in out
    assert "0 corrupt ranges" in out


def test_a_flipped_payload_bit_is_named_with_its_file_and_position(tmp_path, capsys):
    write(tmp_path, "orders-0", {0: flip(records(10), 450), 1000: records(3, 11)})
    status, out = verify(capsys, str(tmp_path))
    path = tmp_path / "orders-0" / f"{0:020d}.meta"
    assert status == 1
    assert f"CORRUPT orders-0 {path} position 400 (offset 400): checksum mismatch" in out
    assert "valid records resume at position 500 (offset 500)" in out
    assert "1 corrupt range (100 bytes)" in out


def test_a_zeroed_record_and_a_flipped_length_bit_are_found(tmp_path, capsys):
    data = records(10)
    write(tmp_path, "a-0", {0: data[:200] + bytes(100) + data[300:], 1000: records(1, 11)})
    write(tmp_path, "b-0", {0: flip(data, 603), 1000: records(1, 11)})
    status, out = verify(capsys, str(tmp_path))
    assert status == 1
    assert "CORRUPT a-0" in out and "position 200 (offset 200): all-zero record header" in out
    assert "CORRUPT b-0" in out and "position 600 (offset 600)" in out
    assert "valid records resume at position 700" in out


def test_a_flipped_bit_in_the_middle_of_the_last_segment_is_corruption(tmp_path, capsys):
    write(tmp_path, "orders-0", {0: flip(records(50), 850)})
    status, out = verify(capsys, str(tmp_path))
    assert status == 1
    assert "position 800 (offset 800)" in out


def test_a_torn_tail_is_a_note_and_exits_0(tmp_path, capsys):
    write(tmp_path, "orders-0", {0: records(5) + records(1, 6)[:60]})
    status, out = verify(capsys, str(tmp_path))
    assert status == 0
    assert "TORN TAIL orders-0" in out and "start-up recovery cuts it" in out


def test_only_the_named_partition_is_checked(tmp_path, capsys):
    write(tmp_path, "good-0", {0: records(2)})
    write(tmp_path, "bad-0", {0: flip(records(2), 30) + records(1, 3)})
    status, out = verify(capsys, str(tmp_path), "good-0")
    assert (status, "checked 1 partition" in out) == (0, True)


def test_an_unknown_partition_is_refused(tmp_path, capsys):
    assert main(["verify", str(tmp_path), "nope-0"]) == 1
    assert "nope-0 is not a partition directory" in capsys.readouterr().err


def test_json_lists_each_problem(tmp_path, capsys):
    write(tmp_path, "orders-0", {0: flip(records(10), 450), 1000: records(3, 11)})
    status, out = verify(capsys, str(tmp_path), "--json")
    document = json.loads(out)
    assert (status, document["corrupt_ranges"], document["records"]) == (1, 1, 12)
    (problem,) = document["problems"]
    assert (problem["offset"], problem["resume_offset"], problem["kind"]) == (400, 500, "corrupt")


def test_a_missing_directory_is_exit_2(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "nowhere")]) == 2
    assert "nowhere is not a directory" in capsys.readouterr().err


def test_a_hole_after_the_recovery_point_is_a_torn_end_and_one_before_it_corrupt(tmp_path, capsys):
    """verify tells what start-up recovery cuts from what it fences, as recovery does: by
    the partition's recovery point in the data path's file."""
    data = records(10)
    holed = data[:700] + bytes(100) + data[800:]  # a lost page, then valid records
    write(tmp_path, "orders-0", {0: holed})
    path = tmp_path / "orders-0" / f"{0:020d}.meta"
    status, out = verify(capsys, str(tmp_path))
    assert status == 1  # no recovery point: fenced at start-up, so corrupt
    assert f"CORRUPT orders-0 {path} position 700 (offset 700)" in out
    (tmp_path / FILE_NAME).write_bytes(encode_points({"orders-0": 500}))
    status, out = verify(capsys, str(tmp_path))
    assert status == 0
    assert f"TORN TAIL orders-0 {path} position 700 (offset 700)" in out
    assert "start-up recovery cuts it" in out
    (tmp_path / FILE_NAME).write_bytes(encode_points({"orders-0": 800}))
    status, out = verify(capsys, str(tmp_path))
    assert status == 1  # below the point: corruption of synced data
