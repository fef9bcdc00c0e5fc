"""The two commands that change ZooKeeper, ``reset-offsets`` and ``groups delete``, change
nothing unless ``--execute`` is given, and refuse a group with live members. The groups are
laid out directly in the real ZooKeeper of ``conftest.admin_cluster`` (offsets, owners, ids
nodes as consumers write them), and each test compares the whole group tree before and
after."""

from __future__ import annotations

import json

import pytest
from kazoo.client import KazooClient

OFFSETS = {"1-0": "-1-120", "1-1": "7-240", "2-0": "-1-0", "2-1": "-1-0"}


@pytest.fixture
def zk(zookeeper, admin_cluster):
    """A plain kazoo client on the cluster's ZooKeeper; stopped afterwards."""
    client = KazooClient(hosts=zookeeper.connect_string, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def lay_out_group(zk, root: str, group: str, topic: str, members: tuple[str, ...] = ()) -> str:
    """A stopped (or, with ``members``, live) group with offsets and owners for ``topic``."""
    path = f"{root}/consumers/{group}"
    zk.ensure_path(f"{path}/ids")
    for name, value in OFFSETS.items():
        zk.create(f"{path}/offsets/{topic}/{name}", value.encode(), makepath=True)
    zk.create(f"{path}/owners/{topic}/1-0", b"old-owner-1", makepath=True)
    for member in members:
        zk.create(f"{path}/ids/{member}", topic.encode())
    return path


def tree(zk, path: str) -> dict[str, bytes]:
    """Every node under ``path`` (itself included) with its data; empty when it is absent."""
    if not zk.exists(path):
        return {}
    nodes = {path: zk.get(path)[0]}
    for name in zk.get_children(path):
        nodes.update(tree(zk, f"{path}/{name}"))
    return nodes


# --- reset-offsets -------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [(), ("--dry-run",), ("--dry-run", "--json")])
def test_reset_without_execute_changes_nothing_in_zookeeper(cli, zk, admin_cluster, flags):
    group = f"g-noexec{len(flags)}"
    path = lay_out_group(zk, admin_cluster.root, group, "reset")
    before = tree(zk, admin_cluster.root)
    status, out, err = cli("reset-offsets", group, "--topic", "reset", "--to", "earliest", *flags)
    assert status == 0, err
    assert tree(zk, admin_cluster.root) == before
    if "--json" in flags:
        assert json.loads(out)["dry_run"] is True
    else:
        expected = "dry run: nothing written; add --execute to write these offsets"
        assert out.splitlines()[-1] == expected
    assert tree(zk, f"{path}/offsets/reset")[f"{path}/offsets/reset/1-1"] == b"7-240"


def test_reset_of_a_new_group_without_execute_creates_nothing(cli, zk, admin_cluster):
    argv = ["reset-offsets", "g-not-yet-run", "--topic", "reset", "--to", "latest"]
    argv.append("--allow-new-group")
    status, out, err = cli(*argv)
    assert status == 0, err
    assert not zk.exists(f"{admin_cluster.root}/consumers/g-not-yet-run")
    assert "add --execute" in out


def test_reset_refuses_execute_together_with_dry_run(cli):
    argv = ["reset-offsets", "g", "--topic", "reset", "--to", "0", "--execute", "--dry-run"]
    status, out, err = cli(*argv)
    assert status == 2 and out == ""
    assert "not allowed with argument" in err


def test_reset_help_says_dry_run_is_the_default(cli):
    status, out, _ = cli("reset-offsets", "--help")
    assert status == 0
    text = " ".join(out.split())
    assert "--execute" in text and "the default without --execute" in text


# --- groups delete -------------------------------------------------------------------------


def test_groups_delete_without_execute_lists_the_nodes_and_changes_nothing(cli, zk, admin_cluster):
    lay_out_group(zk, admin_cluster.root, "g-del-dry", "reset")
    before = tree(zk, admin_cluster.root)
    status, out, err = cli("groups", "delete", "g-del-dry")
    assert status == 0, err
    assert tree(zk, admin_cluster.root) == before
    lines = out.splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "OFFSET", "OWNER"]
    assert lines[1].split() == ["reset", "1-0", "-1-120", "old-owner-1"]
    assert len(lines) == 1 + len(OFFSETS) + 1
    assert lines[-1] == "dry run: nothing deleted; add --execute to delete the group"


def test_groups_delete_with_execute_removes_offsets_and_owners(cli, zk, admin_cluster):
    path = lay_out_group(zk, admin_cluster.root, "g-del", "reset")
    lay_out_group(zk, admin_cluster.root, "g-del-other", "reset")
    other = tree(zk, f"{admin_cluster.root}/consumers/g-del-other")
    status, out, err = cli("groups", "delete", "g-del", "--execute", "--json")
    assert status == 0, err
    document = json.loads(out)
    assert document["dry_run"] is False and document["path"] == path
    assert {row["partition"]: row["offset_value"] for row in document["partitions"]} == OFFSETS
    assert not zk.exists(path)
    assert tree(zk, f"{admin_cluster.root}/consumers/g-del-other") == other
    status, out, _ = cli("groups", "--json")
    assert "g-del" not in {group["group"] for group in json.loads(out)["groups"]}


def test_groups_delete_takes_json_before_or_after_the_subcommand(cli, zk, admin_cluster):
    lay_out_group(zk, admin_cluster.root, "g-del-json", "reset")
    for argv in (("groups", "--json", "delete", "g-del-json"), ("groups", "delete", "g-del-json",
                 "--json")):  # fmt: skip
        status, out, err = cli(*argv)
        assert status == 0, err
        assert json.loads(out)["dry_run"] is True


def test_groups_delete_refuses_a_group_with_live_members_and_names_them(cli, zk, admin_cluster):
    path = lay_out_group(zk, admin_cluster.root, "g-del-live", "reset", ("g-del-live_host-1",))
    before = tree(zk, path)
    status, out, err = cli("groups", "delete", "g-del-live", "--execute")
    assert status == 1 and out == ""
    assert "consumer group g-del-live has 1 live member(s): g-del-live_host-1" in err
    assert "stop them first" in err and len(err.splitlines()) == 1
    assert tree(zk, path) == before


def test_groups_delete_of_an_unknown_group_exits_1_naming_it(cli):
    status, out, err = cli("groups", "delete", "g-del-nosuch", "--execute")
    assert status == 1 and out == ""
    assert "unknown consumer group g-del-nosuch" in err
