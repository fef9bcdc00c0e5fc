"""Caps per connection and per XA qualifier, and the unused-branch timeout (``task.Clock``)."""

from __future__ import annotations

import pytest

from meta.errors import TransactionError
from tests.tx.conftest import TxBroker, tx_config


def broker_with(tmp_path, files, **fields) -> TxBroker:
    return TxBroker(tx_config(tmp_path, **fields), files=files)


def open_keys(broker: TxBroker) -> list[str]:
    return [key for key, *_ in broker.transactions.describe()]


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


def test_an_unused_branch_without_timeout_is_rolled_back_after_the_default(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_unused_timeout_s=5)
    transactions = broker.transactions
    transactions.begin("XID:1:01:01:q", "c1", 0)
    broker.clock.advance(4.9)
    assert open_keys(broker) == ["XID:1:01:01:q"]
    broker.clock.advance(0.2)
    assert open_keys(broker) == []


def test_a_used_branch_is_not_rolled_back_by_the_unused_timeout(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_unused_timeout_s=5)
    broker.transactions.begin("XID:1:01:01:q", "c1", 0)
    broker.put("XID:1:01:01:q", [b"m"], session=None)
    broker.clock.advance(60)
    assert open_keys(broker) == ["XID:1:01:01:q"]


def test_a_branch_begun_again_after_finishing_gets_a_new_deadline(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_unused_timeout_s=5)
    transactions = broker.transactions
    transactions.begin("XID:1:01:01:q", "c1", 0)
    broker.clock.advance(3)
    broker.rollback("XID:1:01:01:q")
    transactions.begin("XID:1:01:01:q", "c1", 0)
    broker.clock.advance(3)
    assert open_keys(broker) == ["XID:1:01:01:q"]
    broker.clock.advance(3)
    assert open_keys(broker) == []


def test_a_zero_unused_timeout_keeps_unused_branches(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_unused_timeout_s=0)
    broker.transactions.begin("XID:1:01:01:q", "c1", 0)
    broker.clock.advance(3600)
    assert open_keys(broker) == ["XID:1:01:01:q"]
