"""``meta-admin tx ... --json``: every ``tx`` subcommand prints one JSON document with stable
keys, against a real broker and against the stand-in for a Java broker of
``test_admin_tx`` (whose fixtures and helpers these tests reuse)."""

from __future__ import annotations

import json

import pytest

from tests.admin.test_admin_tx import (
    KEY,
    PAYLOAD,
    SUBCOMMANDS,
    admin,
    broker,  # noqa: F401 - a fixture
    java_broker,  # noqa: F401 - a fixture
    prepare_branch,
    recover_keys,
    run,
)


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_every_tx_subcommand_offers_json(capsys, subcommand: str):
    status, out, _ = run(capsys, "tx", subcommand, "--help")
    assert status == 0 and "--json" in out


@pytest.mark.integration
def test_list_json_gives_each_branch_with_its_counts(capsys, broker):  # noqa: F811
    prepare_branch(broker)
    status, out, err = admin(capsys, broker, "list", "--json")
    assert (status, err) == (0, "")
    document = json.loads(out)
    assert document["broker"] == f"127.0.0.1:{broker.port}"
    [row] = document["transactions"]
    assert (row["key"], row["state"], row["messages"]) == (KEY, "PREPARED", 1)
    assert row["bytes"] > len(PAYLOAD)


@pytest.mark.integration
def test_list_json_of_no_branch_is_an_empty_list(capsys, broker):  # noqa: F811
    status, out, _ = admin(capsys, broker, "list", "--json")
    assert status == 0
    assert json.loads(out)["transactions"] == []


@pytest.mark.integration
def test_commit_and_forget_json_name_the_key_and_the_outcome(capsys, broker):  # noqa: F811
    prepare_branch(broker)
    status, out, _ = admin(capsys, broker, "commit", KEY, "--json")
    assert status == 0
    assert json.loads(out) == {
        "key": KEY,
        "action": "commit",
        "outcome": "heuristically committed",
        "broker": f"127.0.0.1:{broker.port}",
    }
    status, out, _ = admin(capsys, broker, "forget", KEY, "--json")
    assert status == 0
    assert json.loads(out)["outcome"] == "forgotten"
    assert recover_keys(broker) == []


@pytest.mark.integration
def test_list_json_without_the_stats_item_has_null_counts(capsys, java_broker):  # noqa: F811
    argv = ["tx", "list", "--json", "--broker", f"127.0.0.1:{java_broker.port}"]
    status, out, err = run(capsys, *argv)
    assert status == 0
    assert "has no 'stats transactions' item" in err
    assert json.loads(out)["transactions"] == [
        {"key": KEY, "state": None, "messages": None, "bytes": None}
    ]
