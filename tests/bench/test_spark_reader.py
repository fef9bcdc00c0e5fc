"""``meta.bench.spark_reader`` on recorded replies (no broker): rows counted, file round trip."""

from __future__ import annotations

from meta.bench import spark_reader
from meta.protocol.message import pack_message


def test_replayed_replies_are_decoded_and_timed_per_message(tmp_path):
    replies = [pack_message(index << 22, 0, b"x" * 100) * 30 for index in range(3)]
    recorded = tmp_path / "replies.bin"
    spark_reader.write_replies(recorded, replies)
    assert spark_reader.read_replies(recorded) == replies
    args = spark_reader.parse_arguments(["--replay", str(recorded), "--rounds", "1"])
    report = spark_reader.run(args)
    assert set(report) == {"decode", "decode_only"}
    assert all(row["messages"] == 90 for row in report.values())
    assert all(row["cpu_us_per_msg"] > 0 for row in report.values())
