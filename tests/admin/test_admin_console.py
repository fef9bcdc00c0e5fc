"""``meta-admin produce`` and ``consume`` end to end, on the cluster of
``conftest.admin_cluster`` (two broker processes, real ZooKeeper).

The round trip and the Ctrl-C and ``--follow`` cases run ``python -m meta.admin`` as a
process (real stdin and stdout pipes, a real SIGINT); the others run ``main`` in-process.
Each test uses its own topic or group; every wait is bounded.
"""

from __future__ import annotations

import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from meta.admin.main import main
from tests.integration.client_helpers import WAIT_S

REPO = Path(__file__).resolve().parents[2]


def admin_process(admin_cluster, *argv: str, **popen) -> subprocess.Popen:
    command = [sys.executable, "-m", "meta.admin", *argv, *admin_cluster.options]
    return subprocess.Popen(command, cwd=REPO, **popen)


def run_process(admin_cluster, *argv: str, stdin: bytes = b"") -> tuple[int, bytes, str]:
    process = admin_process(
        admin_cluster, *argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = process.communicate(stdin, timeout=60)
    return process.returncode, out, err.decode()


@pytest.fixture
def admin(admin_cluster, capsysbinary, monkeypatch):
    """Run ``meta-admin`` in-process with ``stdin`` bytes; return (status, out bytes, err)."""

    def run(*argv: str, stdin: bytes = b"") -> tuple[int, bytes, str]:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        status = main([*argv, *admin_cluster.options])
        captured = capsysbinary.readouterr()
        return status, captured.out, captured.err.decode()

    return run


@pytest.fixture
def zk(zookeeper, admin_cluster):
    client = KazooClient(hosts=zookeeper.connect_string, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def committed(zk, root: str, group: str, topic: str) -> dict[str, int]:
    """The group's committed offsets by ``B-P`` (a node holds ``<msgId>-<offset>``)."""
    path = f"{root}/consumers/{group}/offsets/{topic}"
    return {
        name: int(zk.get(f"{path}/{name}")[0].decode().rsplit("-", 1)[1])
        for name in zk.get_children(path)
    }


def json_lines(out: bytes) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --- the round trip --------------------------------------------------------------------------


def test_a_thousand_stdin_lines_round_trip_byte_exact(admin_cluster):
    """Goal: what ``produce`` reads from stdin, ``consume`` prints back, byte for byte.

    Method: 1,000 lines (text, a ``\\r``, bytes that are not UTF-8, empty lines) go to one
    partition through a real stdin pipe; ``consume --from-beginning --max-messages 1000``
    of that partition prints exactly those bytes, in order. The topic is this test's alone,
    so the beginning is its first line whichever tests ran before.
    """
    lines = [f"line {n} é".encode() for n in range(997)] + [b"cr\r", b"", b"\xff\x00\xfe"]
    data = b"\n".join(lines) + b"\n"
    status, out, err = run_process(
        admin_cluster, "produce", "console-lines", "--partition", "1-0", stdin=data
    )
    assert (status, out) == (0, b""), err
    assert err == "sent 1000 message(s) to console-lines (1-0: 1000)\n"
    status, out, err = run_process(
        admin_cluster, "consume", "console-lines", "--partition", "1-0", "--from-beginning",
        "--max-messages", "1000",
    )  # fmt: skip
    assert status == 0, err
    assert out == data
    assert err == "1000 message(s) printed from console-lines\n"


def test_lines_spread_over_the_partitions_come_back_complete(admin):
    lines = [unique("spread").encode() for _ in range(40)]
    status, _, err = admin("produce", "console-group", stdin=b"\n".join(lines))
    assert status == 0, err
    assert "sent 40 message(s)" in err and "1-0: " in err and "2-1: " in err
    status, out, err = admin("consume", "console-group")
    assert status == 0
    assert set(lines) <= set(out.splitlines()), err


# --- produce ---------------------------------------------------------------------------------


def test_produce_sends_files_with_an_attribute_and_a_count(admin, tmp_path):
    paths = []
    for n, body in enumerate([b"first\nfile\n", b"\x00second", b"third"]):
        path = tmp_path / f"m{n}"
        path.write_bytes(body)
        paths += ["--file", str(path)]
    argv = ["produce", "console", "--partition", "2-0", "--attribute", "eu", "--count", "2"]
    status, out, err = admin(*argv, *paths, "--json")
    assert status == 0, err
    assert json.loads(out) == {"topic": "console", "sent": 2, "partitions": {"2-0": 2}}
    status, out, _ = admin("consume", "console", "--partition", "2-0", "--format", "json")
    documents = json_lines(out)[-2:]
    assert [(d["payload"], d["attribute"]) for d in documents] == [
        ("first\nfile\n", "eu"),
        ("\x00second", "eu"),
    ]
    assert {d["partition"] for d in documents} == {"2-0"}


def test_produce_at_a_rate_and_a_count_stops_after_count_lines(admin):
    argv = ["produce", "console", "--partition", "2-1", "--rate", "1000", "--count", "3"]
    status, _, err = admin(*argv, stdin=b"a\nb\nc\nd\n")
    assert status == 0
    assert err.startswith("sent 3 message(s) to console")


def test_a_line_too_large_stops_the_run_after_saying_what_was_sent(admin):
    stdin = b"small\n" + b"x" * (1024 * 1024) + b"\nnever\n"
    status, _, err = admin("produce", "console", "--partition", "2-1", stdin=stdin)
    assert status == 2
    summary, error = err.splitlines()
    assert summary == "sent 1 message(s) to console (2-1: 1)"
    assert error.startswith("meta-admin: line 2 of stdin is longer than the largest message")


def test_produce_to_an_unknown_topic_exits_1_and_names_it(admin):
    status, _, err = admin("produce", "nosuch", stdin=b"a\n")
    assert status == 1
    assert err.startswith("meta-admin: unknown topic nosuch")


def test_produce_to_an_unknown_partition_exits_1_and_sends_nothing(admin):
    status, _, err = admin("produce", "console", "--partition", "1-7", stdin=b"a\n")
    assert status == 1
    assert "broker 1 has no partition 7 of topic console" in err


def test_produce_refuses_a_missing_file_before_sending(admin, tmp_path):
    status, _, err = admin("produce", "console", "--file", str(tmp_path / "missing"))
    assert status == 2
    assert "cannot read file" in err


# --- consume without a group -----------------------------------------------------------------


def test_consume_from_the_end_without_follow_prints_nothing(admin):
    status, out, err = admin("consume", "console", "--from-end")
    assert (status, out) == (0, b"")
    assert err == "0 message(s) printed from console\n"


def test_consume_in_hex(admin):
    admin("produce", "console", "--partition", "1-1", stdin=b"\x01\xab\n")
    status, out, _ = admin("consume", "console", "--partition", "1-1", "--format", "hex")
    assert status == 0
    assert out.splitlines()[-1] == b"01ab"


def test_json_option_is_json_lines(admin):
    admin("produce", "console", "--partition", "1-1", stdin=b"x\n")
    status, out, _ = admin("consume", "console", "--partition", "1-1", "--json")
    assert status == 0
    assert json_lines(out)[-1]["payload"] == "x"


def test_consume_of_an_unknown_topic_exits_1(admin):
    status, _, err = admin("consume", "nosuch")
    assert status == 1
    assert "unknown topic nosuch" in err


def test_partition_with_a_group_is_a_usage_error(admin):
    status, _, err = admin("consume", "console", "--group", "g", "--partition", "1-0")
    assert status == 2
    assert "--partition reads without a group" in err


def test_follow_prints_messages_sent_after_it_reached_the_end(admin_cluster, admin):
    """Goal: ``--follow`` waits at the end for new messages.

    Method: a consumer process follows the topic; after it printed the two messages there,
    two more are sent; it prints them and stops at ``--max-messages 4``.
    """
    admin("produce", "console-follow", "--partition", "1-0", stdin=b"f1\nf2\n")
    process = admin_process(
        admin_cluster, "consume", "console-follow", "--follow", "--max-messages", "4",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    lines = read_lines(process)
    try:
        assert [lines.get(timeout=WAIT_S) for _ in range(2)] == [b"f1\n", b"f2\n"]
        admin("produce", "console-follow", "--partition", "1-0", stdin=b"f3\nf4\n")
        assert [lines.get(timeout=WAIT_S) for _ in range(2)] == [b"f3\n", b"f4\n"]
        assert process.wait(WAIT_S) == 0
    finally:
        process.kill()
        process.wait()


def read_lines(process: subprocess.Popen) -> queue.Queue:
    """Lines of the process's stdout, read on a thread (so each get is bounded)."""
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


# --- consume as a group ----------------------------------------------------------------------


def test_a_group_commits_exactly_what_it_printed(admin, admin_cluster, zk):
    """Goal: ``--group`` commits exactly the printed messages, even when it has fetched more.

    Method: a new group is placed at the ends (``--from-end``), then 30 messages go to four
    partitions; a first run prints 10 (its fetches hold more). Per partition, the printed
    messages are the first ones and the committed offset is where the first message not
    printed starts. A second run prints the other 20: no gap, no repeat.
    """
    topic, group = "console-group", unique("g")
    admin("produce", topic, stdin=b"before\n" * 4)  # every partition has data (a store)
    status, out, _ = admin("consume", topic, "--group", group, "--from-end")
    assert (status, out) == (0, b"")
    assert set(committed(zk, admin_cluster.root, group, topic)) == {"1-0", "1-1", "2-0", "2-1"}
    bodies = [unique("m").encode() for _ in range(30)]
    admin("produce", topic, stdin=b"\n".join(bodies))
    status, out, _ = admin("consume", topic, "--format", "json")
    everything = [d for d in json_lines(out) if d["payload"].encode() in bodies]
    assert len(everything) == 30
    status, out, err = admin("consume", topic, "--group", group, "--format", "json",
                             "--max-messages", "10")  # fmt: skip
    assert status == 0, err
    first = json_lines(out)
    assert len(first) == 10 and all(d["payload"].encode() in bodies for d in first)
    offsets = committed(zk, admin_cluster.root, group, topic)
    for partition, offset in offsets.items():
        mine = [d["offset"] for d in everything if d["partition"] == partition]
        printed = [d["offset"] for d in first if d["partition"] == partition]
        assert printed == mine[: len(printed)]
        if len(printed) < len(mine):
            assert offset == mine[len(printed)]
        else:
            assert offset > mine[-1]
    status, out, _ = admin("consume", topic, "--group", group, "--format", "json")
    second = json_lines(out)
    both = [d["payload"] for d in first + second]
    assert sorted(both) == sorted(body.decode() for body in bodies)
    assert len(both) == len(set(both)) == 30


def test_a_group_from_the_end_of_partitions_without_data_stops_at_once(admin):
    status, out, err = admin("consume", "console-empty", "--group", unique("g"), "--from-end")
    assert (status, out) == (0, b"")
    assert err == "0 message(s) printed from console-empty\n"


def test_a_second_group_run_continues_where_the_first_stopped(admin):
    topic, group = "console-group", unique("g")
    admin("consume", topic, "--group", group, "--from-end")  # the group starts at the ends
    bodies = [f"next-{n}".encode() for n in range(12)]
    admin("produce", topic, stdin=b"\n".join(bodies))
    runs = [admin("consume", topic, "--group", group, "--max-messages", "5") for _ in range(2)]
    runs.append(admin("consume", topic, "--group", group))
    printed = [line for _status, out, _err in runs for line in out.splitlines()]
    assert [len(out.splitlines()) for _s, out, _e in runs] == [5, 5, 2]
    assert sorted(printed) == sorted(bodies)


def test_ctrl_c_exits_130_after_committing_what_was_printed(admin_cluster, admin, zk):
    """Goal: Ctrl-C ends a following group member cleanly: exit 130, printed = committed.

    Method: a member follows a one-partition topic; after it printed the three messages
    there, SIGINT; its committed offset is the partition's end, and a new run of the group
    prints only the message sent afterwards.
    """
    topic, group = "console-stop", unique("g")
    admin("produce", topic, "--partition", "1-0", stdin=b"s1\ns2\ns3\n")
    status, out, _ = admin("consume", topic, "--partition", "1-0", "--format", "json")
    end = json_lines(out)[-1]["offset"]
    process = admin_process(
        admin_cluster, "consume", topic, "--group", group, "--follow",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    lines = read_lines(process)
    try:
        printed = [lines.get(timeout=WAIT_S) for _ in range(len(json_lines(out)))]
        assert printed[-1] == b"s3\n"
        os.kill(process.pid, signal.SIGINT)
        status = process.wait(WAIT_S)
    finally:
        process.kill()
        process.wait()
    errors = process.stderr.read()
    assert status == 130, errors.decode(errors="replace")[-3000:]
    assert b"interrupted" in errors
    assert committed(zk, admin_cluster.root, group, topic)["1-0"] > end
    admin("produce", topic, "--partition", "1-0", stdin=b"after\n")
    status, out, _ = admin("consume", topic, "--group", group)
    assert (status, out) == (0, b"after\n")
