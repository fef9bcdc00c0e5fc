"""``brokers``, ``topics``, ``partitions``, ``stats``, ``browse`` and ``find-message`` against
the real cluster of ``conftest.admin_cluster`` (two broker processes, real ZooKeeper).

What the tool prints is compared with what the test knows independently: the brokers' ports,
the topic sections, the put replies (partition, offset, message id) and the segment files on
the brokers' disks. Each test uses its own topic.
"""

from __future__ import annotations

import json
from pathlib import Path

from meta.client import Message
from meta.message_id import id_time_ms, id_worker
from meta.protocol.commands import Offset, Put
from meta.protocol.message import HEADER_SIZE
from tests.admin.conftest import SEGMENT_BYTES_MAX, TOPICS


def put(factory, topic: str, bodies: list[bytes], attribute: str | None = None) -> list:
    producer = factory.create_producer()
    producer.publish(topic)
    results = [producer.send_message(Message(topic, body, attribute)) for body in bodies]
    assert all(result.success for result in results)
    return results


def segment_files(data_path: Path, topic: str, partition: int) -> list[Path]:
    return sorted((data_path / f"{topic}-{partition}").glob("*.meta"))


# --- brokers and topics ----------------------------------------------------------------------


def test_brokers_lists_each_broker_with_its_master_uri_and_topics(cli, admin_cluster):
    status, out, err = cli("brokers", "--json")
    assert status == 0 and err == ""
    brokers = json.loads(out)["brokers"]
    assert [b["broker_id"] for b in brokers] == [1, 2]
    for document in brokers:
        port = admin_cluster.broker(document["broker_id"]).port
        assert document["master"] == f"meta://127.0.0.1:{port}"
        assert document["slaves"] == []
        assert document["config_checksum"].isdigit()
        assert sorted(document["topics"]) == sorted(TOPICS)


def test_brokers_table_has_one_row_per_broker(cli, admin_cluster):
    status, out, _ = cli("brokers")
    lines = out.splitlines()
    assert status == 0
    assert lines[0].split() == ["BROKER", "MASTER", "SLAVES", "CONFIG_CHECKSUM", "TOPICS"]
    assert len(lines) == 3
    assert f"meta://127.0.0.1:{admin_cluster.broker(2).port}" in lines[2]


def test_topics_shows_every_topic_with_its_brokers_and_partition_counts(cli):
    status, out, _ = cli("topics", "--json")
    topics = {document["topic"]: document for document in json.loads(out)["topics"]}
    assert status == 0
    assert sorted(topics) == sorted(TOPICS)
    orders = topics["orders"]
    assert [node["node"] for node in orders["brokers"]] == ["1-m", "2-m"]
    assert all(node["partitions"] == 2 and node["publish"] for node in orders["brokers"])
    assert orders["publish_partitions"] == orders["subscribe_partitions"] == 4


def test_topics_table_names_the_broker_nodes(cli):
    status, out, _ = cli("topics")
    row = next(line for line in out.splitlines() if line.startswith("orders "))
    assert status == 0
    assert row.split() == ["orders", "1-m:2", "2-m:2", "4", "4"]


# --- partitions ------------------------------------------------------------------------------


def test_partitions_match_the_segment_files_on_disk(cli, factory, admin_cluster):
    """Put ~6 KiB into 1 KiB segments; compare offsets, sizes and segment counts with disk."""
    put(factory, "segments", [f"segment-record-{n:04d}".encode() * 6 for n in range(50)])
    status, out, err = cli("partitions", "segments", "--json")
    assert status == 0 and err == ""
    rows = json.loads(out)["partitions"]
    assert [(row["broker_id"], row["partition"]) for row in rows] == [(1, 0), (2, 0)]
    for row in rows:
        files = segment_files(admin_cluster.broker(row["broker_id"]).data_path, "segments", 0)
        holding = [path for path in files if path.stat().st_size > 0]
        assert row["segments"] == len(holding) > 2
        assert row["min_offset"] == int(files[0].stem) == 0
        assert row["max_offset"] == sum(path.stat().st_size for path in files)
        assert row["size_bytes"] == row["max_offset"] - row["min_offset"]
        assert row["size_bytes"] > 2 * SEGMENT_BYTES_MAX


def test_partitions_count_segments_holding_data_when_a_roll_left_an_empty_one(
    cli, factory, admin_cluster
):
    """Goal: pin what SEGMENTS counts when the newest segment file is empty (the broker rolls
    as soon as a segment is full, so an empty one waits for the next append): the segments
    holding data, one fewer than the files. The empty one cannot be seen over the wire: the
    ``offset`` command answers the end for it, as it does when there is none (Java alike).

    Method: one message larger than a segment, so the broker rolls right after it.
    """
    (result,) = put(factory, "rolled", [b"r" * (SEGMENT_BYTES_MAX + 1)])
    status, out, _ = cli("partitions", "rolled", "--json")
    row = next(
        row for row in json.loads(out)["partitions"] if row["max_offset"] and row["max_offset"] > 0
    )
    files = segment_files(admin_cluster.broker(row["broker_id"]).data_path, "rolled", 0)
    assert status == 0 and result.partition.broker_id == row["broker_id"]
    assert [path.stat().st_size > 0 for path in files] == [True, False]
    assert row["segments"] == 1
    with admin_cluster.broker(row["broker_id"]).connect() as connection:
        reply = connection.request(Offset("rolled", "g", 0, row["max_offset"], 1))
    assert int(reply.body) == row["max_offset"] == int(files[-1].stem)


def test_partitions_without_data_show_no_offsets_and_no_segments(cli):
    status, out, _ = cli("partitions", "quiet")
    lines = out.splitlines()
    assert status == 0
    assert lines[0].split() == [
        "TOPIC", "PARTITION", "MIN_OFFSET", "MAX_OFFSET", "SIZE_BYTES", "SEGMENTS"
    ]  # fmt: skip
    assert [line.split() for line in lines[1:]] == [
        ["quiet", "1-0", "-", "-", "0", "0"],
        ["quiet", "2-0", "-", "-", "0", "0"],
    ]


def test_partitions_of_an_unknown_topic_exit_1_naming_it(cli):
    status, out, err = cli("partitions", "no-such-topic")
    assert status == 1 and out == ""
    assert "unknown topic no-such-topic" in err


# --- stats -----------------------------------------------------------------------------------


def test_stats_by_broker_id_prints_the_general_block(cli, admin_cluster):
    status, out, _ = cli("stats", "2")
    lines = out.splitlines()
    assert status == 0
    assert lines[0] == f"broker 127.0.0.1:{admin_cluster.broker(2).port}"
    general, rejected = "\n".join(lines[1:]).split("\n\n")
    names = [line.split()[0] for line in general.splitlines()]
    assert names[:3] == ["pid", "broker_id", "port"] and names[-1] == "config_checksum"
    assert lines[2].split() == ["broker_id", "2"]
    assert [line.split()[0] for line in rejected.splitlines()] == [
        "put_too_large",
        "put_too_large_last",
        "max_message_size",
    ]


def test_stats_by_address_with_topics_as_json(cli, factory, admin_cluster):
    put(factory, "orders", [b"o1", b"o2"])
    address = f"127.0.0.1:{admin_cluster.broker(1).port}"
    status, out, _ = cli("stats", address, "--topics", "--json")
    document = json.loads(out)
    assert status == 0
    assert document["broker"] == address
    assert document["general"]["broker_id"] == 1 and document["general"]["slave"] is False
    topics = {topic["topic"]: topic for topic in document["topics"]}
    assert topics["orders"]["message_count"] >= 1 and topics["orders"]["accept_publish"] is True
    quiet = topics["quiet"]  # configured, never written: its partition, empty
    assert (quiet["partitions"], quiet["message_count"], quiet["message_bytes"]) == (1, 0, 0)


def test_a_put_a_java_broker_would_store_shows_in_stats_and_the_log(cli, admin_cluster):
    """A Java broker stores 1,048,586 bytes that no 1 MiB get returns; metaq-py answers 500
    (DECISIONS 8) and makes it visible to an operator migrating from Java."""
    broker = admin_cluster.broker(2)
    with broker.connect() as connection:
        reply = connection.request(Put("quiet", 0, b"x" * 1_048_586, 0, 77))
    assert reply.code == 500 and b"larger than maxMessageSize 1048576" in reply.body
    status, out, _ = cli("stats", "2", "--json")
    rejected = json.loads(out)["rejected"]
    assert status == 0 and rejected["put_too_large"] >= 1
    assert rejected["put_too_large_last"] == "quiet-0 1048586"
    assert "refused a put of 1048586 bytes to quiet-0" in broker.log()


def test_stats_with_an_item_prints_what_the_broker_answers_to_it(cli, admin_cluster):
    status, out, err = cli("stats", "1", "http")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == f"broker 127.0.0.1:{admin_cluster.broker(1).port}"
    assert [line.split()[0] for line in lines[1:]][:2] == ["http_requests", "http_put"]


def test_stats_config_item_prints_the_brokers_file(cli, admin_cluster):
    status, out, _ = cli("stats", "2", "config", "--json")
    document = json.loads(out)
    assert status == 0 and document["item"] == "config"
    assert document["text"] == admin_cluster.broker(2).config_path.read_text().rstrip("\n")


def test_stats_slave_of_a_master_is_refused_with_the_role_it_needs(cli):
    status, out, err = cli("stats", "1", "slave")
    assert status == 1 and out == ""
    assert "is not an async slave: it reads 'stats slave' as a topic name" in err


def test_stats_of_an_unregistered_broker_id_exits_1(cli):
    status, _, err = cli("stats", "7")
    assert status == 1
    assert "no broker 7 is registered" in err and "brokers: 1, 2" in err


# --- browse ----------------------------------------------------------------------------------


def test_browse_prints_the_messages_that_were_put(cli, factory):
    bodies = [f"browse-{n}".encode() for n in range(6)]
    results = put(factory, "browse", bodies, attribute="tag")
    on_first = [r for r in results if r.partition == results[0].partition]
    partition = str(results[0].partition)
    start, count = str(on_first[0].offset), str(len(on_first))
    status, out, err = cli("browse", "browse", partition, "--from", start, "--count", count)
    lines = out.splitlines()
    assert status == 0 and err == ""
    assert lines[0].split() == ["OFFSET", "MSG_ID", "TIME", "FLAG", "ATTRIBUTE", "SIZE", "PAYLOAD"]
    rows = [line.split() for line in lines[1:-1]]
    assert [int(row[0]) for row in rows] == [r.offset for r in on_first]
    assert [int(row[1]) for row in rows] == [r.msg_id for r in on_first]
    assert all(row[3:5] == ["1", "tag"] for row in rows)
    assert [row[6] for row in rows] == [bodies[results.index(r)].decode() for r in on_first]
    assert lines[-1] == f"next offset: {on_first[-1].offset + HEADER_SIZE + 4 + 3 + 8}"


def test_browse_json_pages_with_next_offset(cli, factory):
    results = put(factory, "browse", [b"page-a", b"page-b", b"page-c", b"page-d"])
    partition = str(results[0].partition)
    first = json.loads(cli("browse", "browse", partition, "--count", "1", "--json")[1])
    second = json.loads(
        cli("browse", "browse", partition, "--from", str(first["next_offset"]), "--json")[1]
    )
    assert len(first["messages"]) == 1
    assert second["messages"][0]["offset"] == first["next_offset"]
    message = second["messages"][0]
    assert id_time_ms(message["msg_id"]) == message["time_ms"]
    assert set(message) == {
        "offset", "msg_id", "time", "time_ms", "flag", "attribute", "size", "record_bytes",
        "data_text", "data_base64",
    }  # fmt: skip


def test_browse_raw_prints_the_bodies(cli, factory):
    results = put(factory, "browse", [b"raw-body"])
    last = results[-1]
    status, out, _ = cli(
        "browse", "browse", str(last.partition), "--from", str(last.offset), "--raw"
    )
    assert status == 0 and out == "raw-body\n"


def test_browse_a_numeric_partition_of_a_two_broker_topic_needs_the_broker(cli, factory):
    status, _, err = cli("browse", "browse", "0")
    assert status == 2 and "give PARTITION as B-P or add --broker ID" in err
    assert cli("browse", "browse", "0", "--broker", "1", "--count", "1")[0] == 0


def test_browse_off_a_record_boundary_exits_1_naming_the_record_starts_around_it(cli, factory):
    results = put(factory, "browse", [b"boundary-record"])
    last = results[-1]
    status, _, err = cli("browse", "browse", str(last.partition), "--from", str(last.offset + 3))
    assert status == 1
    assert "not a record boundary" in err
    assert f"the nearest record starts at {last.offset}, before it (none after it)" in err
    if last.offset > 0:
        status, _, err = cli(
            "browse", "browse", str(last.partition), "--from", str(last.offset - 3)
        )
        assert f"(before it) and {last.offset} (after it)" in err


def test_browse_past_the_end_says_where_the_partition_ends(cli):
    status, out, _ = cli("browse", "quiet", "1-0", "--from", "100")
    assert status == 0
    assert out.strip() == "no messages in quiet 1-0 from offset 100 (the partition ends at 0)"


# --- find-message ----------------------------------------------------------------------------


def test_find_message_finds_a_message_whose_id_a_put_returned(cli, factory):
    results = put(factory, "find", [f"find-{n}".encode() * 20 for n in range(60)])
    wanted = results[37]
    status, out, err = cli("find-message", str(wanted.msg_id))
    assert status == 0 and err == ""
    assert out.splitlines()[0] == (
        f"message {wanted.msg_id}: topic find partition {wanted.partition} offset {wanted.offset}"
    )
    assert "find-37find-37" in out


def test_find_message_with_a_topic_prints_json(cli, factory):
    results = put(factory, "find", [b"json-find-1", b"json-find-2"])
    wanted = results[-1]
    status, out, _ = cli("find-message", str(wanted.msg_id), "--topic", "find", "--json")
    document = json.loads(out)
    assert status == 0
    assert document["topic"] == "find" and document["partition"] == str(wanted.partition)
    assert document["message"]["offset"] == wanted.offset
    assert document["message"]["data_text"] == "json-find-2"


def test_find_message_of_an_unknown_id_exits_1_naming_broker_and_time(cli, factory):
    results = put(factory, "find", [b"exists"])
    missing = results[0].msg_id + 1  # same broker and millisecond, never allocated
    status, _, err = cli("find-message", str(missing), "--topic", "find")
    assert status == 1
    assert f"message {missing} (broker {id_worker(missing)}, time " in err
    assert "not found" in err


def test_find_message_of_an_unregistered_broker_exits_1(cli):
    msg_id = (5 << 22) | (99 << 12)
    status, _, err = cli("find-message", str(msg_id))
    assert status == 1 and "no broker 99 is registered" in err
