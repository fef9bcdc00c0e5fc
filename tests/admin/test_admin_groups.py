"""``groups``, ``lag`` and ``reset-offsets`` against real consumer groups: real
``MessageConsumer``s on the cluster of ``conftest.admin_cluster`` (two broker processes, real
ZooKeeper). Each test uses its own topic or group; every wait is bounded (``wait_for``) and
every consumer is shut down (the ``consumers`` fixture)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from meta.client import Message
from meta.client.cluster import format_offset, parse_offset
from meta.message_id import id_time_ms
from meta.protocol.message import HEADER_SIZE
from tests.integration.client_helpers import WAIT_S, Collector, consumer_of, wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def consumers(factory):
    """Start consumers with ``start(topic, group, listener)``; all are shut down afterwards."""
    started = []

    def start(topic: str, group: str, listener, **fields):
        consumer = consumer_of(factory, topic, group, listener, **fields)
        started.append(consumer)
        return consumer

    yield start
    for consumer in started:
        consumer.shutdown()


@pytest.fixture
def zk(zookeeper, admin_cluster):
    """A plain kazoo client on the cluster's ZooKeeper; stopped afterwards."""
    client = KazooClient(hosts=zookeeper.connect_string, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def put(factory, topic: str, bodies: list[bytes]) -> list:
    producer = factory.create_producer()
    producer.publish(topic)
    results = [producer.send_message(Message(topic, body)) for body in bodies]
    assert all(result.success for result in results)
    return results


def consume_all(consumers, topic: str, group: str, expected_ids: set[int]) -> Collector:
    """Run one consumer until it has every expected id, then shut it down (it commits)."""
    collector = Collector()
    consumer = consumers(topic, group, collector)
    wait_for(lambda: collector.ids() >= expected_ids, what=f"{group} to consume {topic}")
    consumer.shutdown()
    return collector


def offsets_of(zk, root: str, group: str, topic: str) -> dict[str, str]:
    path = f"{root}/consumers/{group}/offsets/{topic}"
    return {name: zk.get(f"{path}/{name}")[0].decode() for name in zk.get_children(path)}


# --- groups ----------------------------------------------------------------------------------


def test_groups_lists_a_live_member_with_its_topics(cli, consumers):
    consumer = consumers("live", "g-groups", Collector(), consumer_id="member-1")
    status, out, _ = cli("groups", "--json")
    groups = {document["group"]: document for document in json.loads(out)["groups"]}
    assert status == 0
    [member] = groups["g-groups"]["members"]
    assert (member["id"], member["topics"], member["stale"]) == (
        consumer.consumer_id,
        ["live"],
        False,
    )
    assert groups["g-groups"]["topics"] == ["live"]
    status, out, _ = cli("groups")
    # Other tests' groups set the column widths: compare words, not spacing.
    lines = [line.split()[:3] for line in out.splitlines()]
    assert ["g-groups", consumer.consumer_id, "live"] in lines


# --- lag -------------------------------------------------------------------------------------


def test_lag_is_correct_for_a_real_group_with_known_offsets(cli, factory, consumers):
    """Produce M, consume them all with a real consumer (shutdown commits), produce N-M more:
    the lag is N-M messages and exactly their record bytes, per partition and in total."""
    consumed = put(factory, "lag", [f"first-{n}".encode() for n in range(10)])
    consume_all(consumers, "lag", "g-lag", {r.msg_id for r in consumed})
    behind = put(factory, "lag", [f"behind-{n:02d}".encode() for n in range(7)])
    status, out, err = cli("lag", "g-lag", "--json")
    document = json.loads(out)
    assert status == 0 and err == ""
    rows = {row["partition"]: row for row in document["partitions"]}
    assert sorted(rows) == ["1-0", "1-1", "2-0", "2-1"]
    for name, row in rows.items():
        mine = [r for r in behind if str(r.partition) == name]
        assert row["lag_messages"] == len(mine)
        assert row["lag_bytes"] == len(mine) * (HEADER_SIZE + len(b"behind-00"))
        assert row["max_offset"] - row["committed_offset"] == row["lag_bytes"]
        assert row["owner"] is None and row["note"] is None
    assert document["total_lag_messages"] == 7
    assert document["total_lag_bytes"] == 7 * (HEADER_SIZE + 9)
    status, out, _ = cli("lag", "g-lag", "--topic", "lag")
    assert out.splitlines()[-1] == f"total lag: {7 * 29} bytes, 7 messages"


def test_lag_shows_a_dash_when_the_lag_is_too_large_to_count(cli, factory, consumers):
    consumed = put(factory, "lag", [b"x"])
    consume_all(consumers, "lag", "g-lag-big", {r.msg_id for r in consumed})
    put(factory, "lag", [b"y" * 200 for _ in range(8)])
    status, out, _ = cli("lag", "g-lag-big", "--count-bytes-max", "100", "--json")
    rows = json.loads(out)["partitions"]
    assert status == 0
    assert any(row["lag_bytes"] > 100 and row["lag_messages"] is None for row in rows)
    assert json.loads(out)["total_lag_messages"] is None


def test_lag_of_a_group_that_never_committed_counts_from_the_first_offset(
    cli, factory, zk, admin_cluster
):
    put(factory, "quiet", [b"q1", b"q2"])
    zk.ensure_path(f"{admin_cluster.root}/consumers/g-never/ids")
    status, out, _ = cli("lag", "g-never", "--topic", "quiet", "--json")
    rows = json.loads(out)["partitions"]
    assert status == 0
    assert [row["note"] for row in rows] == ["no committed offset"] * 2
    assert sum(row["lag_messages"] for row in rows) == 2
    assert all(row["committed_offset"] is None for row in rows)
    assert all(row["lag_bytes"] == row["max_offset"] - row["min_offset"] for row in rows)


def test_a_killed_member_is_flagged_stale_within_three_commit_intervals(
    cli, factory, admin_cluster, tmp_path
):
    """Goal: after ``kill -9`` of a consumer, ``lag`` and ``groups`` flag its owner "stale
    (possibly dead)" within three commit intervals, long before its session expires.

    Method: a consumer process (30 s session, commits every second) reads a steady trickle;
    ``lag`` shows its owner live. It is killed and more messages arrive (lag). ``lag`` runs
    in a loop (bounded) until the owner is flagged; that run must start less than three
    intervals after the kill. ``groups`` then flags the member too.
    """
    interval = ["--commit-interval-ms", "1000"]
    out_path = tmp_path / "ids.txt"
    with restarted_member(admin_cluster, "stale", "g-stale", out_path, 30_000, 1000) as child:
        assert child.stdout.readline().strip() == b"ready"
        sent: set[int] = set()
        for number in range(20):  # 2 s of traffic: the member commits twice or more
            sent |= {r.msg_id for r in put(factory, "stale", [b"s%d" % number])}
            time.sleep(0.1)
        wait_for(lambda: received_ids(out_path) >= sent, what="the member to read")
        _status, out, _ = cli("lag", "g-stale", *interval, "--json")
        rows = json.loads(out)["partitions"]  # 1-0 and 2-0, both the member's
        assert [row["owner"].endswith("_restarted") for row in rows] == [True, True]
        assert [row["owner_stale"] for row in rows] == [False, False]
        child.kill()
        killed = time.monotonic()
        put(factory, "stale", [b"after-the-kill"])
        started = flagged = None
        for _ in range(100):  # bounded: well past the session timeout if nothing flags
            started = time.monotonic()
            _status, out, _ = cli("lag", "g-stale", *interval, "--json")
            rows = json.loads(out)["partitions"]
            if any(row["owner_stale"] for row in rows):
                flagged = rows
                break
            time.sleep(0.05)
        assert flagged is not None and started - killed < 3.0
        assert all("stale (possibly dead)" in row["note"] for row in flagged)
        assert all(row["owner_last_commit_ms"] is not None for row in flagged)
        _status, out, _ = cli("groups", *interval, "--json")
        groups = {document["group"]: document for document in json.loads(out)["groups"]}
        [member] = groups["g-stale"]["members"]
        assert member["stale"] is True
        _status, out, _ = cli("groups", *interval)
        assert "stale (possibly dead)" in out


def test_lag_of_an_unknown_group_exits_1_naming_it(cli):
    status, out, err = cli("lag", "no-such-group")
    assert status == 1 and out == ""
    assert "unknown consumer group no-such-group" in err


# --- reset-offsets ---------------------------------------------------------------------------


def test_reset_to_earliest_then_a_restart_redelivers_from_the_start(
    cli, factory, consumers, zk, admin_cluster, tmp_path
):
    """Consume everything, stop, reset to earliest, restart the group in a new process (the
    client's process-wide cache of processed ids would hide a redelivery in this one, as
    Java's does): every message comes again."""
    sent = {r.msg_id for r in put(factory, "reset", [f"reset-{n}".encode() for n in range(12)])}
    consume_all(consumers, "reset", "g-reset", sent)
    status, out, err = cli(
        "reset-offsets", "g-reset", "--topic", "reset", "--to", "earliest", "--execute"
    )
    assert status == 0 and err == ""
    assert out.splitlines()[-1].startswith("wrote 4 offsets under ")
    assert set(offsets_of(zk, admin_cluster.root, "g-reset", "reset").values()) == {"-1-0"}
    out_path = tmp_path / "ids.txt"
    with restarted_member(admin_cluster, "reset", "g-reset", out_path):
        wait_for(lambda: received_ids(out_path) >= sent, what="the redelivery of all 12")
    assert received_ids(out_path) == sent


@contextlib.contextmanager
def restarted_member(
    admin_cluster, topic: str, group: str, out_path: Path, *timings_ms: int
) -> Iterator[subprocess.Popen]:
    """A group member in a process of its own (``tests.integration.consumer_process``, with
    its optional session timeout and commit period), killed on exit and waited for; its
    ephemeral nodes are deleted then (``drop_nodes_of_member``)."""
    command = [sys.executable, "-m", "tests.integration.consumer_process",
               admin_cluster.connect_string, admin_cluster.root, topic, group, "restarted",
               str(out_path), *map(str, timings_ms)]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    child = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE)
    try:
        yield child
    finally:
        child.kill()
        child.wait(timeout=WAIT_S)
        child.stdout.close()
        drop_nodes_of_member(admin_cluster, f"{admin_cluster.root}/consumers/{group}")


def drop_nodes_of_member(admin_cluster, group_path: str) -> None:
    """Delete the ephemeral nodes of the killed ``restarted`` member under ``group_path``.

    Its session would delete them only when it expires (up to 30 s later), in the middle of
    a later test of the package's cluster that compares the whole tree before and after.
    """
    client = KazooClient(hosts=admin_cluster.connect_string, timeout=10)
    client.start(timeout=10)
    try:
        member = client.exists(f"{group_path}/ids/{group_path.rsplit('/', 1)[1]}_restarted")
        pending = [group_path]
        while member is not None and pending:
            path = pending.pop()
            with contextlib.suppress(NoNodeError):
                pending += [f"{path}/{child}" for child in client.get_children(path)]
                stat = client.exists(path)
                if stat is not None and stat.ephemeralOwner == member.ephemeralOwner:
                    client.delete(path)
    finally:
        client.stop()
        client.close()


def received_ids(out_path: Path) -> set[int]:
    if not out_path.exists():
        return set()
    return {int(line) for line in out_path.read_text().splitlines() if line.strip()}


def test_reset_refuses_while_a_member_is_alive_and_names_it(
    cli, factory, consumers, zk, admin_cluster
):
    collector = Collector()
    consumer = consumers("live", "g-live", collector, commit_offset_period_ms=100)
    sent = put(factory, "live", [b"live-1"])
    wait_for(lambda: collector.ids() == {sent[0].msg_id}, what="the live message")
    path = f"{admin_cluster.root}/consumers/g-live/offsets/live"
    wait_for(lambda: zk.exists(path) and zk.get_children(path), what="a committed offset")
    before = offsets_of(zk, admin_cluster.root, "g-live", "live")
    status, out, err = cli("reset-offsets", "g-live", "--topic", "live", "--to", "earliest")
    assert status == 1 and out == ""
    assert "consumer group g-live has 1 live member(s)" in err
    assert consumer.consumer_id in err and "stop them first" in err
    assert offsets_of(zk, admin_cluster.root, "g-live", "live") == before


def test_reset_dry_run_shows_the_plan_and_writes_nothing(
    cli, factory, consumers, zk, admin_cluster
):
    sent = {r.msg_id for r in put(factory, "reset", [b"dry-1", b"dry-2"])}
    consume_all(consumers, "reset", "g-dry", sent)
    before = offsets_of(zk, admin_cluster.root, "g-dry", "reset")
    status, out, _ = cli("reset-offsets", "g-dry", "--topic", "reset", "--to", "earliest",
                         "--dry-run", "--json")  # fmt: skip
    document = json.loads(out)
    assert status == 0 and document["dry_run"] is True
    assert {entry["new_value"] for entry in document["partitions"]} == {"-1-0"}
    assert {e["partition"]: e["old_value"] for e in document["partitions"]} == {
        name: before.get(name) for name in ("1-0", "1-1", "2-0", "2-1")
    }
    assert offsets_of(zk, admin_cluster.root, "g-dry", "reset") == before


def test_reset_by_time_lands_on_the_first_message_at_or_after_it(
    cli, factory, consumers, zk, admin_cluster
):
    """Two batches a few milliseconds apart: resetting to the time in the first id of the
    second batch moves each partition to its first record of that batch (or its end)."""
    early = put(factory, "bytime", [f"early-{n}".encode() for n in range(8)])
    consume_all(consumers, "bytime", "g-time", {r.msg_id for r in early})
    boundary_ms = max(id_time_ms(r.msg_id) for r in early) + 2
    wait_for(lambda: time.time() * 1000 > boundary_ms + 1, what="the clock to pass the batch")
    late = put(factory, "bytime", [f"late-{n}".encode() for n in range(5)])
    target_ms = id_time_ms(late[0].msg_id)
    status, _, err = cli(
        "reset-offsets", "g-time", "--topic", "bytime", "--to", f"@{target_ms}", "--execute"
    )
    assert status == 0 and err == ""
    written = offsets_of(zk, admin_cluster.root, "g-time", "bytime")
    ends = {name: row["max_offset"] for name, row in _lag_rows(cli, "g-time").items()}
    for name, text in written.items():
        msg_id, offset = parse_offset(text)
        firsts = [r for r in late if str(r.partition) == name]
        expected = min(r.offset for r in firsts) if firsts else ends[name]
        assert offset == expected
        before = [r for r in early if str(r.partition) == name]
        assert msg_id == (max(before, key=lambda r: r.offset).msg_id if before else -1)
    assert sum(row["lag_messages"] for row in _lag_rows(cli, "g-time").values()) == 5


def _lag_rows(cli, group: str) -> dict[str, dict]:
    return {
        row["partition"]: row for row in json.loads(cli("lag", group, "--json")[1])["partitions"]
    }


def test_reset_to_an_offset_checks_the_range_and_the_record_boundary(
    cli, factory, consumers, zk, admin_cluster
):
    results = put(factory, "reset", [b"boundary-1", b"boundary-2"])
    consume_all(consumers, "reset", "g-offset", {r.msg_id for r in results})
    target = results[-1]
    name = str(target.partition)
    argv = ["reset-offsets", "g-offset", "--topic", "reset", "--partition", name, "--execute"]
    argv.append("--to")
    status, _, err = cli(*argv, str(target.offset + 1))
    assert status == 1 and "not a record boundary" in err
    status, _, err = cli(*argv, "999999999")
    assert status == 1 and f"offset 999999999 is outside reset {name}" in err
    status, out, _ = cli(*argv, str(target.offset))
    assert status == 0
    assert offsets_of(zk, admin_cluster.root, "g-offset", "reset")[name] == format_offset(
        -1, target.offset
    )


def test_reset_of_an_unknown_topic_or_group_exits_1_naming_it(cli, zk, admin_cluster):
    status, _, err = cli("reset-offsets", "no-group", "--topic", "reset", "--to", "latest")
    assert status == 1 and "unknown consumer group no-group" in err
    zk.ensure_path(f"{admin_cluster.root}/consumers/g-known/ids")
    status, _, err = cli("reset-offsets", "g-known", "--topic", "nope", "--to", "latest")
    assert status == 1 and "unknown topic nope" in err


def test_reset_pre_positions_a_group_that_has_not_run_with_allow_new_group(
    cli, factory, consumers, zk, admin_cluster
):
    """Goal: an operator places a new group (no ``R/consumers/G`` yet) before its first start,
    as Kafka's tool allows, but only when asked to; the group's first consumer starts there.

    Method: put messages; reset the new group to latest without the flag (refused, naming
    it), then with it; start the group's first consumer and put more: it gets only those.
    """
    before = put(factory, "reset", [b"before-1", b"before-2"])
    argv = ["reset-offsets", "g-new", "--topic", "reset", "--to", "latest", "--execute"]
    status, _, err = cli(*argv)
    assert status == 1 and "unknown consumer group g-new" in err and "--allow-new-group" in err
    assert not zk.exists(f"{admin_cluster.root}/consumers/g-new")
    status, _, err = cli(*argv, "--allow-new-group")
    assert status == 0, err
    assert sorted(offsets_of(zk, admin_cluster.root, "g-new", "reset")) == [
        "1-0",
        "1-1",
        "2-0",
        "2-1",
    ]
    collector = Collector()
    consumers("reset", "g-new", collector)
    after = {r.msg_id for r in put(factory, "reset", [f"after-{n}".encode() for n in range(6)])}
    wait_for(lambda: collector.ids() >= after, what="g-new to consume what came after the reset")
    assert not collector.ids() & {r.msg_id for r in before}
