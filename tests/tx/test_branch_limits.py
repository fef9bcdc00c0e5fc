"""Caps per client address, per connection, per XA qualifier and broker-wide (``task.Clock``).

Each record put here is a 20-byte header plus its payload (``tests.store.conftest.record``).
"""

from __future__ import annotations

import logging

import pytest

from meta.errors import TransactionError
from meta.protocol.xa import XA_OK
from meta.tx.branch_limits import REFUSAL_LOG_INTERVAL_S, client_address
from tests.tx.conftest import TxBroker, tx_config

RECORD_HEADER = 20


def broker_with(tmp_path, files, **fields) -> TxBroker:
    return TxBroker(tx_config(tmp_path, **fields), files=files)


def open_keys(broker: TxBroker) -> list[str]:
    return [key for key, *_ in broker.transactions.describe()]


def xid(number: int, qualifier: str = "q") -> str:
    return f"XID:1:{number:04x}:01:{qualifier}"


# -- per client address ---------------------------------------------------------------------


def test_an_address_is_refused_beyond_its_cap_over_connections_and_qualifiers(tmp_path, files):
    """Rotating connections and qualifiers does not get one address past its cap."""
    broker = broker_with(tmp_path, files, tx_per_address_max=3)
    transactions = broker.transactions
    for number in range(3):
        transactions.begin(xid(number, f"q{number}"), f"c{number}", 0, "10.0.0.1")
    with pytest.raises(TransactionError, match="maxTxPerAddress") as caught:
        transactions.begin(xid(9, "fresh"), "fresh-connection", 0, "10.0.0.1")
    assert "from 10.0.0.1 (3 holding 0 bytes" in str(caught.value)
    assert "clients behind one address share it" in str(caught.value)
    transactions.begin(xid(9, "fresh"), "other", 0, "10.0.0.2")  # another address: taken


def test_local_transactions_count_against_their_address(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_per_address_max=2)
    transactions = broker.transactions
    transactions.begin("TX:s:1", "c1", 0, "10.0.0.1")
    transactions.begin(xid(1), "c2", 0, "10.0.0.1")
    with pytest.raises(TransactionError, match="maxTxPerAddress"):
        transactions.begin("TX:s:1", "c3", 0, "10.0.0.1")


def test_a_closed_connection_frees_its_address_slots(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_per_address_max=1)
    transactions = broker.transactions
    transactions.begin("TX:s:1", "c1", 0, "10.0.0.1")
    broker.put("TX:s:1", [b"abc"], session="c1")
    transactions.session_closed("c1")
    assert transactions.limits.holders() == []
    transactions.begin("TX:s:1", "c2", 0, "10.0.0.1")  # does not raise


def test_an_address_is_refused_bytes_beyond_its_byte_cap(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_bytes_per_address_max=100)
    transactions = broker.transactions
    for number in range(3):
        transactions.begin(xid(number, f"q{number}"), f"c{number}", 0, "10.0.0.1")
        broker.put(xid(number, f"q{number}"), [b"x" * 10], session=None)  # 30 bytes each
    transactions.begin(xid(3, "q3"), "c3", 0, "10.0.0.1")
    with pytest.raises(TransactionError, match="maxTxBytesPerAddress") as caught:
        broker.put(xid(3, "q3"), [b"x" * 10], session=None)
    assert "from 10.0.0.1 already hold 90 bytes in 4 transactions" in str(caught.value)
    transactions.begin(xid(4, "v"), "victim", 0, "10.0.0.2")
    broker.put(xid(4, "v"), [b"x" * 50], session=None)  # another address: taken


def test_finished_transactions_release_their_address_bytes(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_bytes_per_address_max=100)
    transactions = broker.transactions
    transactions.begin("TX:s:1", "c1", 0, "10.0.0.1")
    broker.put("TX:s:1", [b"x" * 60], session="c1")
    assert transactions.limits.holders() == [("10.0.0.1", 1, 80)]
    assert broker.commit("TX:s:1").ok
    transactions.begin("TX:s:2", "c1", 0, "10.0.0.1")
    broker.put("TX:s:2", [b"x" * 60], session="c1")  # does not raise
    broker.rollback("TX:s:2")
    assert transactions.limits.holders() == []


def test_a_prepared_branch_keeps_its_address_bytes_until_committed(tmp_path, files):
    broker = broker_with(tmp_path, files)
    transactions = broker.transactions
    transactions.begin(xid(1), "c1", 0, "10.0.0.1")
    broker.put(xid(1), [b"x" * 10], session=None)
    assert broker.prepare(xid(1)).calls == [(XA_OK, None)]
    assert transactions.limits.holders() == [("10.0.0.1", 1, 30)]
    assert broker.commit(xid(1), session=None, one_phase=False).ok
    assert transactions.limits.holders() == []


def test_a_refused_put_counts_no_bytes(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_bytes_per_address_max=50)
    transactions = broker.transactions
    transactions.begin("TX:s:1", "c1", 0, "10.0.0.1")
    with pytest.raises(TransactionError):
        broker.put("TX:s:1", [b"x" * 40], session="c1")
    assert transactions.limits.holders() == [("10.0.0.1", 1, 0)]
    assert transactions.byte_count == 0


def test_has_room_agrees_with_the_byte_caps(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_bytes_per_address_max=50, tx_open_bytes_max=200)
    transactions = broker.transactions
    transactions.begin("TX:s:1", "c1", 0, "10.0.0.1")
    transaction = transactions.check_put("TX:s:1", "c1")
    assert transactions.has_room(transaction, 50)
    assert not transactions.has_room(transaction, 51)
    transactions.begin("TX:s:2", "c2", 0, None)  # counted against no address
    assert transactions.has_room(transactions.check_put("TX:s:2", "c2"), 200)
    assert not transactions.has_room(transactions.check_put("TX:s:2", "c2"), 201)


# -- broker-wide caps name who holds the most ----------------------------------------------


def test_the_broker_wide_count_cap_names_the_address_holding_the_most(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_open_max=5)
    transactions = broker.transactions
    for number in range(3):
        transactions.begin(xid(number), f"c{number}", 0, "10.0.0.7")
    broker.put(xid(0), [b"abc"], session=None)
    transactions.begin("TX:s:1", "c9", 0, "10.0.0.8")
    transactions.begin("TX:s:2", "c9", 0, "10.0.0.8")
    with pytest.raises(TransactionError, match="Too many open transactions") as caught:
        transactions.begin("TX:s:1", "c10", 0, "10.0.0.9")
    text = str(caught.value)
    assert "maxOpenTx" in text
    assert "the most are held by 10.0.0.7 (3 transactions, 23 bytes)" in text


def test_the_broker_wide_byte_cap_names_the_address_holding_the_most_bytes(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_open_bytes_max=100)
    transactions = broker.transactions
    transactions.begin("TX:s:1", "c1", 0, "10.0.0.1")
    transactions.begin("TX:s:2", "c1", 0, "10.0.0.1")
    transactions.begin("TX:s:1", "c2", 0, "10.0.0.2")
    broker.put("TX:s:1", [b"x" * 5], session="c1")
    broker.put("TX:s:1", [b"x" * 40], session="c2")
    with pytest.raises(TransactionError, match="maxOpenTxBytes") as caught:
        broker.put("TX:s:2", [b"x" * 20], session="c1")
    assert "the most are held by 10.0.0.2 (1 transactions, 60 bytes)" in str(caught.value)


def test_a_refusal_is_logged_once_per_interval_with_the_count_since(tmp_path, files, caplog):
    broker = broker_with(tmp_path, files, tx_per_address_max=1)
    transactions = broker.transactions
    transactions.begin("TX:s:1", "c1", 0, "10.0.0.1")
    caplog.set_level(logging.WARNING, logger="meta.tx")
    for _ in range(5):
        with pytest.raises(TransactionError):
            transactions.begin("TX:s:2", "c1", 0, "10.0.0.1")
    lines = [r.getMessage() for r in caplog.records if "maxTxPerAddress" in r.getMessage()]
    assert len(lines) == 1
    assert "refused a transaction of 10.0.0.1" in lines[0]
    broker.clock.advance(REFUSAL_LOG_INTERVAL_S)
    with pytest.raises(TransactionError):
        transactions.begin("TX:s:2", "c1", 0, "10.0.0.1")
    lines = [r.getMessage() for r in caplog.records if "maxTxPerAddress" in r.getMessage()]
    assert len(lines) == 2
    assert "4 more refused by maxTxPerAddress since the last line" in lines[1]


def test_restored_prepared_branches_count_against_no_address(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_per_address_max=1)
    broker.transactions.begin(xid(1), "c1", 0, "10.0.0.1")
    broker.put(xid(1), [b"x"], session=None)
    assert broker.prepare(xid(1)).calls == [(XA_OK, None)]
    again = broker.restart()
    assert open_keys(again) == [xid(1)]
    assert again.transactions.limits.holders() == []
    again.transactions.begin(xid(2), "c1", 0, "10.0.0.1")  # the address holds nothing


# -- client addresses -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.2", "127.0.0.2"),
        ("::ffff:10.1.2.3", "10.1.2.3"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        ("::1", "::1"),
        ("", None),
        (None, None),
        ("/run/meta.sock", "/run/meta.sock"),
    ],
)
def test_client_address_is_the_ipv4_address_or_the_ipv6_network(host, expected):
    assert client_address(host) == expected


# -- per connection and per qualifier -------------------------------------------------------


def test_a_connection_is_refused_beyond_its_cap_and_another_is_not(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_per_connection_max=2)
    transactions = broker.transactions
    transactions.begin("TX:s:1", "c1", 0)
    transactions.begin("XID:1:01:01:q", "c1", 0)
    with pytest.raises(TransactionError, match="maxTxPerConnection"):
        transactions.begin("TX:s:2", "c1", 0)
    transactions.begin("TX:s:2", "c2", 0)  # does not raise
    assert sorted(open_keys(broker)) == ["TX:s:1", "TX:s:2", "XID:1:01:01:q"]


def test_a_qualifier_is_refused_beyond_its_cap_over_all_connections(tmp_path, files):
    broker = broker_with(tmp_path, files, xa_per_qualifier_max=2)
    transactions = broker.transactions
    transactions.begin("XID:1:01:01:q", "c1", 0)
    transactions.begin("XID:1:02:01:q", "c2", 0)
    with pytest.raises(TransactionError, match="maxXaTxPerQualifier"):
        transactions.begin("XID:1:03:01:q", "c3", 0)
    transactions.begin("XID:1:03:01:other", "c3", 0)  # does not raise


def test_a_refused_begin_counts_nothing(tmp_path, files):
    broker = broker_with(tmp_path, files, xa_per_qualifier_max=1)
    transactions = broker.transactions
    transactions.begin("XID:1:01:01:q", "c1", 0, "10.0.0.1")
    with pytest.raises(TransactionError):
        transactions.begin("XID:1:02:01:q", "c1", 0, "10.0.0.1")
    assert transactions.limits.holders() == [("10.0.0.1", 1, 0)]


def test_begin_of_an_existing_key_is_not_counted_again(tmp_path, files):
    broker = broker_with(tmp_path, files, xa_per_qualifier_max=1)
    transactions = broker.transactions
    transactions.begin("XID:1:01:01:q", "c1", 0)
    transactions.begin("XID:1:01:01:q", "c1", 0)  # idempotent, does not raise


def test_finishing_frees_the_slots_of_connection_and_qualifier(tmp_path, files):
    broker = broker_with(tmp_path, files, xa_per_qualifier_max=1, tx_per_connection_max=1)
    transactions = broker.transactions
    transactions.begin("XID:1:01:01:q", "c1", 0)
    broker.rollback("XID:1:01:01:q")
    transactions.begin("XID:1:02:01:q", "c1", 0)  # does not raise


def test_a_closed_connection_frees_its_local_slots(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_per_connection_max=1)
    transactions = broker.transactions
    transactions.begin("TX:s:1", "c1", 0)
    transactions.session_closed("c1")
    transactions.begin("TX:s:1", "c1", 0)  # does not raise
