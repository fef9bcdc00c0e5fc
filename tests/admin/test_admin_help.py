"""``--help`` of every cluster command, usage errors, and what happens when ZooKeeper is not
there. No broker; the unreachable and wrong-root cases use a closed port and the session's
real ZooKeeper."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from meta.admin.client import EXIT_STATUS_RULE
from meta.admin.main import COMMAND_GROUPS, build_parser, main
from meta.admin.stats_items import STATS_ITEMS
from tests.integration.broker_process import free_port

COMMANDS = {
    "brokers": (),
    "topics": (),
    "partitions": ("TOPIC",),
    "groups": (),
    "lag": ("GROUP", "--topic", "--count-bytes-max"),
    "reset-offsets": ("GROUP", "--topic", "--to", "--execute", "--dry-run", "--partition", "TIME"),
    "browse": ("TOPIC", "PARTITION", "--from", "--count", "--broker", "--raw"),
    "find-message": ("ID", "--topic", "--scan-bytes-max"),
    "stats": ("BROKER", "ITEM", "--topics", *STATS_ITEMS),
    "slaves": ("BROKER",),
    "spark-writes": ("--json",),
    "replication": ("BROKER",),
    "recover-offsets": ("--config", "--zk-from-config", "--execute", "--dry-run"),
    "produce": ("TOPIC", "--file", "--attribute", "--partition", "--count", "--rate"),
    "consume": (
        "TOPIC",
        "--group",
        "--partition",
        "--from-beginning",
        "--from-end",
        "--follow",
        "--max-messages",
        "--format",
    ),  # fmt: skip
}


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_every_command_group_is_registered():
    names = {module.__name__.rsplit(".", 1)[1] for module in COMMAND_GROUPS}
    assert names == {
        "tx",
        "cluster",
        "groups",
        "messages",
        "slaves",
        "produce",
        "consume",
        "migrate",
        "recover",
        "replication",
        "spark_writes",
        "truncate",
        "verify",
    }


def test_main_help_lists_every_command_and_the_zookeeper_options(capsys):
    status, out, _ = run(capsys, "--help")
    assert status == 0
    for name in [*COMMANDS, "tx"]:
        assert name in out
    assert "--zk-connect" in out and "--zk-root" in out and "Exit status" in out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help_with_its_options(capsys, command: str):
    status, out, _ = run(capsys, command, "--help")
    assert status == 0
    assert f"usage: meta-admin {command}" in out
    for option in ("--zk-connect", "--zk-root", "--timeout", "--json", *COMMANDS[command]):
        assert option in out


INTERNAL_REFERENCE = re.compile(
    r"\bspec\b|\bDECISIONS\b|§|\bissue \d|\bwork (?:item|period)s?\b", re.IGNORECASE
)
"""What a help text must not show: references into the project's own design notes."""


def every_parser(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """The parser and every subcommand's, recursively, each with its command words."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from every_parser(child, (*path, name))


PARSERS = dict(every_parser(build_parser()))
COMMAND_PATHS = sorted(path for path, parser in PARSERS.items() if parser.get_default("run"))


def test_the_walk_finds_every_command():
    assert ("groups", "delete") in COMMAND_PATHS and ("tx", "list") in COMMAND_PATHS
    assert len(COMMAND_PATHS) >= len(COMMANDS) + 4


@pytest.mark.parametrize("path", sorted(PARSERS), ids=" ".join)
def test_no_help_text_shows_internal_references(capsys, path: tuple[str, ...]):
    status, out, _ = run(capsys, *path, "--help")
    assert status == 0
    text = " ".join(out.split())
    assert INTERNAL_REFERENCE.findall(text) == []


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=" ".join)
def test_every_command_takes_json(capsys, path: tuple[str, ...]):
    status, out, _ = run(capsys, *path, "--help")
    assert status == 0
    assert "--json" in out


def test_the_parser_builds_once_per_call():
    assert build_parser() is not build_parser()


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["lag"], "GROUP"),
        (["reset-offsets", "g", "--topic", "t"], "--to"),
        (["reset-offsets", "g", "--topic", "t", "--to", "soon"], "invalid --to 'soon'"),
        (["reset-offsets", "g", "--topic", "t", "--to", "0", "--partition", "x"], "malformed"),
        (["browse", "t", "0", "--count", "0"], "positive integer"),
        (["browse", "t", "0", "--from", "-5"], "invalid offset"),
        (["find-message", "abc"], "invalid message id 'abc'"),
        (["brokers", "--zk-connect", "nohost"], "invalid ZooKeeper address 'nohost'"),
        (["brokers", "--timeout", "0"], "invalid timeout '0'"),
    ],
)
def test_usage_errors_exit_2_and_name_the_argument(capsys, argv: list[str], text: str):
    status, out, err = run(capsys, *argv)
    assert status == 2
    assert out == ""
    assert text in err


def test_an_unreachable_zookeeper_exits_2_and_names_the_address(capsys):
    address = f"127.0.0.1:{free_port()}"
    status, out, err = run(capsys, "brokers", "--zk-connect", address, "--timeout", "1")
    assert status == 2
    assert out == ""
    assert err.startswith(f"meta-admin: cannot connect to ZooKeeper at {address}")
    assert len(err.splitlines()) == 1


def test_options_given_before_the_command_are_used(capsys):
    address = f"127.0.0.1:{free_port()}"
    status, _, err = run(capsys, "--zk-connect", address, "--timeout", "1", "groups")
    assert status == 2 and address in err


def test_a_missing_root_exits_1_and_names_it(capsys, zookeeper):
    argv = ["topics", "--zk-connect", zookeeper.connect_string, "--zk-root", "/no-such-root"]
    status, _, err = run(capsys, *argv)
    assert status == 1
    assert "has no node /no-such-root" in err and "--zk-root" in err


def test_stats_refuses_a_broker_that_is_neither_an_id_nor_an_address(capsys):
    status, _, err = run(capsys, "stats", "broker-one")
    assert status == 2
    assert "invalid broker 'broker-one'" in err


def test_stats_of_an_address_without_a_broker_names_it(capsys):
    address = f"127.0.0.1:{free_port()}"
    status, _, err = run(capsys, "stats", address, "--timeout", "1")
    assert status == 2
    assert f"cannot connect to broker {address}" in err


def test_stats_refuses_an_item_the_broker_does_not_answer(capsys):
    status, _, err = run(capsys, "stats", "0", "htp")
    assert status == 2
    assert "invalid choice: 'htp'" in err


def every_parser(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                yield from every_parser(command)


def test_every_help_ends_with_the_one_exit_status_rule():
    for parser in every_parser(build_parser()):
        assert " ".join(parser.format_help().split()).endswith(EXIT_STATUS_RULE), parser.prog


def test_the_docs_state_the_same_exit_status_rule():
    page = (Path(__file__).resolve().parents[2] / "docs" / "meta-admin.md").read_text()
    assert EXIT_STATUS_RULE in " ".join(page.split())
