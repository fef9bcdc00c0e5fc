"""Tests of ``meta-admin tx``: arguments, help, error output, and whole runs against a real broker.

The end-to-end tests start a real broker process (``tests.integration.broker_process``, no
ZooKeeper), drive an XA branch to PREPARED with a raw ``BrokerConnection`` (BEGIN, one put
carrying the key, PREPARE), then run the CLI in-process through ``main(argv)`` and check what
the broker does: the message appears after a heuristic commit and never after a heuristic
rollback, RECOVER keeps listing the branch and clients get XA_HEURCOM / XA_HEURRB until
FORGET, and the outcome survives a broker restart. A scripted fake broker stands in for a
Java broker (no ``stats transactions`` item, no HEURISTIC_* commands).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from meta.admin.client import describe_xa_error
from meta.admin.main import main
from meta.admin.tx import parse_transaction_stats
from meta.protocol.commands import Data, Get, Put, Result, Transaction
from meta.protocol.message import checksum
from meta.protocol.xa import XA_HEURCOM, XA_HEURRB, parse_xa_error
from meta.server.stats import RealtimeStats, render_stats
from tests.admin.text_broker import TextOnlyBroker
from tests.integration.broker_process import BrokerProcess, free_port
from tests.server.test_stats import FakeClock, make_view

REPO = Path(__file__).resolve().parents[2]
KEY = "XID:1:0a:0b:q"
SESSION = "test-session"
TOPIC = "t"
PAYLOAD = b"prepared-message-1"
SUBCOMMANDS = ("list", "commit", "rollback", "forget")


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# --- arguments and help --------------------------------------------------------------------


def test_main_help_names_the_tx_group(capsys):
    status, out, _ = run(capsys, "--help")
    assert status == 0
    assert "tx" in out and "--broker" in out and "Exit status" in out


def test_tx_help_names_every_subcommand(capsys):
    status, out, _ = run(capsys, "tx", "--help")
    assert status == 0
    for name in SUBCOMMANDS:
        assert name in out


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_every_subcommand_has_help(capsys, subcommand: str):
    status, out, _ = run(capsys, "tx", subcommand, "--help")
    assert status == 0
    assert f"meta-admin tx {subcommand}" in out
    assert "--broker" in out and "--timeout" in out


def test_list_help_mentions_the_qualifier_option(capsys):
    _, out, _ = run(capsys, "tx", "list", "--help")
    assert "--qualifier" in out and "--all" in out


def test_a_missing_subcommand_is_a_usage_error(capsys):
    status, _, err = run(capsys, "tx")
    assert status == 2
    assert "SUBCOMMAND" in err


def test_a_malformed_key_is_named(capsys):
    status, _, err = run(capsys, "tx", "commit", "XID:1:zz:0b:q")
    assert status == 2
    assert "'zz'" in err and "not hex" in err


def test_a_key_with_the_wrong_part_count_is_named(capsys):
    status, _, err = run(capsys, "tx", "rollback", "XID:1:0a:q")
    assert status == 2
    assert "XID:1:0a:q" in err and "XID:<formatId>" in err


def test_a_local_transaction_key_is_refused(capsys):
    status, _, err = run(capsys, "tx", "forget", "TX:session:1")
    assert status == 2
    assert "'TX:session:1' is not an XA transaction key" in err


def test_a_bad_broker_address_is_named(capsys):
    status, _, err = run(capsys, "tx", "list", "--broker", "localhost")
    assert status == 2
    assert "invalid broker address 'localhost'" in err


def test_a_bad_timeout_is_named(capsys):
    status, _, err = run(capsys, "tx", "list", "--timeout", "-1")
    assert status == 2
    assert "invalid timeout '-1'" in err


def test_a_bad_qualifier_is_named(capsys):
    status, _, err = run(capsys, "tx", "list", "--qualifier", "a:b")
    assert status == 2
    assert "invalid unique qualifier 'a:b'" in err


@pytest.mark.integration
def test_a_refused_connection_names_the_broker_address(capsys):
    port = free_port()
    status, out, err = run(capsys, "tx", "list", "--broker", f"127.0.0.1:{port}")
    assert status == 2
    assert out == ""
    assert f"cannot connect to broker 127.0.0.1:{port}" in err


@pytest.mark.integration
def test_the_broker_option_is_accepted_before_the_group(capsys):
    port = free_port()
    status, _, err = run(capsys, "--broker", f"127.0.0.1:{port}", "tx", "list")
    assert status == 2
    assert f"127.0.0.1:{port}" in err


# --- reply decoding ------------------------------------------------------------------------


def test_an_xa_error_body_reads_with_its_code_name():
    body = b"XAException:code=-4,msg=XA transaction 'XID:1:0a:0b:q' is not prepared."
    line = describe_xa_error(body)
    assert line == (
        "XAER_NOTA (-4, unknown or finished transaction): "
        "XA transaction 'XID:1:0a:0b:q' is not prepared."
    )


def test_an_xa_error_without_a_message_still_reads():
    assert describe_xa_error(b"XAException:code=7,msg=null") == (
        "XA_HEURCOM (7, an operator committed this branch): (no message)"
    )


def test_a_plain_error_body_is_not_an_xa_error():
    assert describe_xa_error(b"Local transaction 'TX:s:1' has not been started.") is None


def test_transaction_stats_lines_become_rows():
    rows = parse_transaction_stats(b"STATS\r\nXID:1:0a:0b:q PREPARED 2 64\r\nEND\r\n")
    assert rows is not None
    row = rows["XID:1:0a:0b:q"]
    assert (row.state, row.messages, row.byte_count) == ("PREPARED", 2, 64)


def test_an_unknown_stats_item_answered_as_a_topic_is_detected():
    body = b"STATS\r\ntransactions\r\nresultCode 1\r\npartitions 0\r\nEND\r\n"
    assert parse_transaction_stats(body) is None


def test_the_broker_answers_the_transactions_stats_item_in_the_parsed_shape():
    rows = (("XID:1:0a:0b:q", "PREPARED", 2, 64), ("TX:s:1", "IN_USE", 1, 30))
    view = dataclasses.replace(make_view(), transactions=rows)
    code, body = render_stats("transactions", view, RealtimeStats(FakeClock()))
    assert code == 200
    assert body == b"STATS\r\nXID:1:0a:0b:q PREPARED 2 64\r\nTX:s:1 IN_USE 1 30\r\nEND\r\n"
    parsed = parse_transaction_stats(body)
    assert parsed is not None and list(parsed) == ["XID:1:0a:0b:q", "TX:s:1"]


def test_the_transactions_stats_item_is_empty_without_transactions():
    code, body = render_stats("transactions", make_view(), RealtimeStats(FakeClock()))
    assert (code, body) == (200, b"STATS\r\nEND\r\n")
    assert parse_transaction_stats(body) == {}


# --- a scripted stand-in for a Java broker -------------------------------------------------


class FakeJavaBroker(TextOnlyBroker):
    """Answers RECOVER with ``keys``, any ``stats`` item as an unknown topic, and closes
    the connection on anything else (as a Java broker does on an unknown transaction type)."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        super().__init__({})

    def reply(self, tokens: list[str]) -> bytes | None:
        if tokens[0] == "transaction" and tokens[3] == "RECOVER":
            return "\r\n".join(self.keys).encode()
        return super().reply(tokens)


@pytest.fixture
def java_broker() -> Iterator[FakeJavaBroker]:
    broker = FakeJavaBroker([KEY])
    yield broker
    broker.close()


@pytest.mark.integration
def test_list_falls_back_to_recover_keys_without_the_stats_item(capsys, java_broker):
    status, out, err = run(capsys, "tx", "list", "--broker", f"127.0.0.1:{java_broker.port}")
    assert status == 0
    assert "has no 'stats transactions' item" in err
    assert KEY in out and "PREPARED" not in out


@pytest.mark.integration
def test_a_broker_closing_on_heuristic_commit_is_reported_as_a_refusal(capsys, java_broker):
    broker = f"127.0.0.1:{java_broker.port}"
    status, _, err = run(capsys, "tx", "commit", KEY, "--broker", broker)
    assert status == 1
    assert f"HEURISTIC_COMMIT of {KEY}" in err and "closes the connection" in err


# --- against a real broker -----------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "broker", topics={TOPIC: {}})
    process.start()
    try:
        yield process
    finally:
        process.stop()


def admin(capsys, broker: BrokerProcess, *argv: str) -> tuple[int, str, str]:
    return run(capsys, "tx", *argv, "--broker", f"127.0.0.1:{broker.port}", "--timeout", "10")


def transaction(connection, key: str, type_: str) -> Result:
    reply = connection.request(Transaction(key, SESSION, type_, connection.next_opaque()))
    assert isinstance(reply, Result)
    return reply


def prepare_branch(broker: BrokerProcess, key: str = KEY) -> None:
    """BEGIN, one put carrying the key, PREPARE: the branch is left PREPARED."""
    with broker.connect() as connection:
        assert transaction(connection, key, "BEGIN").code == 200
        put = Put(TOPIC, 0, PAYLOAD, 0, connection.next_opaque(), checksum(PAYLOAD), key)
        reply = connection.request(put)
        assert reply.code == 200, reply
        prepared = transaction(connection, key, "PREPARE")
        assert (prepared.code, prepared.body) == (200, b"0")


def recover_keys(broker: BrokerProcess) -> list[str]:
    with broker.connect() as connection:
        reply = transaction(connection, "null", "RECOVER")
    return [key for key in reply.body.decode().split("\r\n") if key]


def stored_data(broker: BrokerProcess) -> bytes:
    with broker.connect() as connection:
        reply = connection.request(Get(TOPIC, "g", 0, 0, 1024 * 1024, connection.next_opaque()))
    return reply.data if isinstance(reply, Data) else b""


def client_commit_error_code(broker: BrokerProcess) -> int:
    with broker.connect() as connection:
        reply = transaction(connection, KEY, "COMMIT_TWO_PHASE")
    assert reply.code == 500
    error = parse_xa_error(reply.body)
    assert error is not None, reply.body
    return error.error_code


@pytest.mark.integration
def test_list_shows_a_prepared_branch_with_its_counts(capsys, broker):
    prepare_branch(broker)
    status, out, _ = admin(capsys, broker, "list")
    assert status == 0
    header, line = out.splitlines()
    assert header.split() == ["KEY", "STATE", "MESSAGES", "BYTES"]
    key, state, messages, byte_count = line.split()
    assert (key, state, messages) == (KEY, "PREPARED", "1")
    assert int(byte_count) > len(PAYLOAD)


@pytest.mark.integration
def test_heuristic_commit_stores_the_message_until_forget(capsys, broker):
    """Commit by hand: the message becomes readable, RECOVER keeps the branch, the client's
    own commit gets XA_HEURCOM, and forget removes the branch from the list."""
    prepare_branch(broker)
    assert PAYLOAD not in stored_data(broker)
    status, out, _ = admin(capsys, broker, "commit", KEY)
    assert status == 0
    assert f"{KEY}: heuristically committed on broker" in out
    assert PAYLOAD in stored_data(broker)
    assert recover_keys(broker) == [KEY]
    assert client_commit_error_code(broker) == XA_HEURCOM
    _, out, _ = admin(capsys, broker, "list")
    assert f"{KEY}  HEURISTIC_COMMIT" in out
    status, out, _ = admin(capsys, broker, "forget", KEY)
    assert status == 0 and f"{KEY}: forgotten" in out
    assert recover_keys(broker) == []
    _, out, _ = admin(capsys, broker, "list")
    assert out.startswith("no prepared or heuristic XA transactions")


@pytest.mark.integration
def test_heuristic_rollback_drops_the_message_until_forget(capsys, broker):
    prepare_branch(broker)
    status, out, _ = admin(capsys, broker, "rollback", KEY)
    assert status == 0
    assert f"{KEY}: heuristically rolled back on broker" in out
    assert PAYLOAD not in stored_data(broker)
    assert recover_keys(broker) == [KEY]
    assert client_commit_error_code(broker) == XA_HEURRB
    _, out, _ = admin(capsys, broker, "list")
    assert f"{KEY}  HEURISTIC_ROLLBACK" in out
    assert admin(capsys, broker, "forget", KEY)[0] == 0
    assert recover_keys(broker) == []
    assert PAYLOAD not in stored_data(broker)


@pytest.mark.integration
@pytest.mark.parametrize("sender", ["admin", "raw"])
def test_a_heuristic_command_finds_the_branch_under_any_spelling_of_its_key(capsys, broker, sender):
    """Goal: brokers name a transaction by its parsed key, so upper-case hex (as another
    tool may print it) reaches the same branch: the admin tool sends the brokers' spelling,
    and our broker looks a HEURISTIC_* key up as it does every other transaction command."""
    prepare_branch(broker)
    spelled = KEY.replace(":0a:0b:", ":0A:0B:")
    if sender == "admin":
        status, _out, err = admin(capsys, broker, "commit", spelled)
        assert (status, err) == (0, "")
    else:
        with broker.connect() as connection:
            assert transaction(connection, spelled, "HEURISTIC_COMMIT").code == 200
    assert PAYLOAD in stored_data(broker)
    status, _out, err = admin(capsys, broker, "forget", spelled)
    assert (status, err) == (0, "")
    assert recover_keys(broker) == []


@pytest.mark.integration
def test_heuristic_outcome_survives_a_broker_restart(capsys, broker):
    """The outcome is journaled: after stop + start of the same directory the branch is
    still listed as heuristically committed, until forget (which also survives)."""
    prepare_branch(broker)
    assert admin(capsys, broker, "commit", KEY)[0] == 0
    broker.stop()
    broker.start()
    _, out, _ = admin(capsys, broker, "list")
    assert f"{KEY}  HEURISTIC_COMMIT" in out
    assert client_commit_error_code(broker) == XA_HEURCOM
    assert PAYLOAD in stored_data(broker)
    assert admin(capsys, broker, "forget", KEY)[0] == 0
    broker.stop()
    broker.start()
    assert recover_keys(broker) == []
    assert stored_data(broker).count(PAYLOAD) == 1


@pytest.mark.integration
def test_a_refusal_prints_the_decoded_xa_error(capsys, broker):
    status, out, err = admin(capsys, broker, "commit", "XID:1:0c:0d:q")
    assert status == 1
    assert out == ""
    assert "refused HEURISTIC_COMMIT of XID:1:0c:0d:q (result 500)" in err
    assert "XAER_NOTA (-4, unknown or finished transaction)" in err


@pytest.mark.integration
def test_forget_of_a_branch_that_is_only_prepared_is_refused(capsys, broker):
    prepare_branch(broker)
    status, _, err = admin(capsys, broker, "forget", KEY)
    assert status == 1
    assert "is PREPARED" in err and "not heuristically finished" in err
    assert recover_keys(broker) == [KEY]


@pytest.mark.integration
def test_list_filters_by_qualifier_and_all_adds_open_transactions(capsys, broker):
    prepare_branch(broker)
    prepare_branch(broker, "XID:1:0c:0d:other")
    with broker.connect() as connection:
        assert transaction(connection, "XID:1:0e:0f:q", "BEGIN").code == 200
        _, out, _ = admin(capsys, broker, "list", "--qualifier", "q")
        assert KEY in out and "other" not in out and "0e:0f" not in out
        _, out, _ = admin(capsys, broker, "list", "--qualifier", "q", "--all")
        assert KEY in out and "XID:1:0e:0f:q  START" in out and "other" not in out


@pytest.mark.integration
def test_python_dash_m_meta_admin_lists_over_the_wire(broker):
    prepare_branch(broker)
    completed = subprocess.run(
        [sys.executable, "-m", "meta.admin", "tx", "list", "--broker", f"127.0.0.1:{broker.port}"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr
    assert KEY in completed.stdout and "PREPARED" in completed.stdout
