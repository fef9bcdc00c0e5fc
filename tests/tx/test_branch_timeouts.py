"""The active and unused timeouts of transactions, and what a late command is told
(``task.Clock``)."""

from __future__ import annotations

import os

import pytest

from meta.errors import TransactionError, XAError
from meta.protocol.xa import XA_OK, XA_RBTIMEOUT, XAER_NOTA
from meta.tx import branch_timeouts
from tests.tx.conftest import Done, TxBroker, tx_config

XID = "XID:1:01:01:q"


def broker_with(tmp_path, files, **fields) -> TxBroker:
    return TxBroker(tx_config(tmp_path, **fields), files=files)


def open_keys(broker: TxBroker) -> list[str]:
    return [key for key, *_ in broker.transactions.describe()]


def xid(number: int) -> str:
    return f"XID:1:{number:04x}:01:q{number % 7}"


# -- active timeout ----------------------------------------------------------------------


def test_an_active_branch_holding_messages_is_rolled_back_and_its_bytes_released(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_active_timeout_s=30)
    transactions = broker.transactions
    transactions.begin(XID, "c1", 0, "10.0.0.1")
    broker.put(XID, [b"x" * 100], session=None)
    broker.clock.advance(29.9)
    assert open_keys(broker) == [XID]
    broker.clock.advance(0.2)
    assert open_keys(broker) == []
    assert transactions.byte_count == 0
    assert transactions.limits.holders() == []


def test_an_active_local_transaction_is_rolled_back_too(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_active_timeout_s=30)
    broker.transactions.begin("TX:s:1", "c1", 0, "10.0.0.1")
    broker.put("TX:s:1", [b"x"], session="c1")
    broker.clock.advance(30)
    assert open_keys(broker) == []


def test_a_prepared_branch_outlives_the_active_timeout(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_active_timeout_s=30)
    broker.transactions.begin(XID, "c1", 0, "10.0.0.1")
    broker.put(XID, [b"x"], session=None)
    assert broker.prepare(XID).calls == [(XA_OK, None)]
    broker.clock.advance(3600)
    assert open_keys(broker) == [XID]
    assert broker.transactions.recover_keys("q") == [XID]
    assert broker.commit(XID, session=None, one_phase=False).ok


def test_the_active_timeout_counts_from_begin_not_from_the_last_put(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_active_timeout_s=30)
    broker.transactions.begin(XID, "c1", 0)
    for _ in range(5):
        broker.clock.advance(5)
        broker.put(XID, [b"x"], session=None)
    broker.clock.advance(5)
    assert open_keys(broker) == []


def test_a_zero_active_timeout_keeps_active_transactions(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_active_timeout_s=0)
    broker.transactions.begin("TX:s:1", "c1", 0)
    broker.put("TX:s:1", [b"x"], session="c1")
    broker.clock.advance(10**6)
    assert open_keys(broker) == ["TX:s:1"]


def test_a_timed_out_branch_leaves_nothing_to_recover(tmp_path, files):
    """Goal: an active branch that timed out is gone after a restart too.

    Method: one branch takes a put and times out, another is prepared; after a crash and a
    restart only the prepared one is restored, and the timed-out one wrote no journal record.
    """
    broker = broker_with(tmp_path, files, tx_active_timeout_s=30)
    broker.transactions.begin(XID, "c1", 0)
    broker.put(XID, [b"gone"], session=None)
    broker.transactions.begin("XID:1:02:01:q", "c1", 0)
    broker.put("XID:1:02:01:q", [b"kept"], session=None)
    broker.clock.advance(10)
    assert broker.prepare("XID:1:02:01:q").calls == [(XA_OK, None)]
    broker.clock.advance(30)
    redo = os.path.join(broker.journal_directory, "redo.1")
    with open(redo, "rb") as file:
        assert XID.encode() not in file.read()
    again = broker.restart()
    assert open_keys(again) == ["XID:1:02:01:q"]


# -- what a late command is told ------------------------------------------------------------


@pytest.fixture
def timed_out(tmp_path, files) -> TxBroker:
    """An XA branch and a local transaction (connection c1), each holding a message, rolled
    back by the 30 s active timeout."""
    broker = broker_with(tmp_path, files, tx_active_timeout_s=30)
    broker.transactions.begin(XID, "c1", 0)
    broker.put(XID, [b"x"], session=None)
    broker.transactions.begin("TX:s:1", "c1", 0)
    broker.put("TX:s:1", [b"x"], session="c1")
    broker.clock.advance(30)
    assert open_keys(broker) == []
    return broker


def test_prepare_after_the_active_timeout_gets_xa_rbtimeout_naming_the_key(timed_out):
    with pytest.raises(XAError) as caught:
        timed_out.prepare(XID)
    assert caught.value.error_code == XA_RBTIMEOUT
    assert f"'{XID}' was rolled back" in caught.value.message
    assert "30 s after its BEGIN (txActiveTimeoutInSeconds)" in caught.value.message


def test_commit_after_the_active_timeout_gets_xa_rbtimeout(timed_out):
    with pytest.raises(XAError) as caught:
        timed_out.commit(XID, session=None)
    assert caught.value.error_code == XA_RBTIMEOUT


def test_a_put_after_the_active_timeout_is_told_why(timed_out):
    with pytest.raises(XAError, match="txActiveTimeoutInSeconds"):
        timed_out.transactions.check_put(XID, None)


def test_rollback_after_the_active_timeout_is_answered_ok(timed_out):
    done = Done()
    timed_out.transactions.rollback(XID, None, done)
    assert done.ok
    done = Done()
    timed_out.transactions.rollback("TX:s:1", "c1", done)
    assert done.ok


def test_a_local_commit_after_the_active_timeout_names_the_timeout(timed_out):
    with pytest.raises(TransactionError, match="Local transaction 'TX:s:1' was rolled back"):
        timed_out.commit("TX:s:1", session="c1")


def test_the_local_reason_is_forgotten_when_its_connection_closes(timed_out):
    timed_out.transactions.session_closed("c1")
    with pytest.raises(TransactionError, match="has not been started"):
        timed_out.commit("TX:s:1", session="c1")


def test_another_connection_is_not_told_about_a_local_key_of_another(timed_out):
    with pytest.raises(TransactionError, match="has not been started"):
        timed_out.commit("TX:s:1", session="c2")


def test_a_key_begun_again_after_its_timeout_is_a_new_transaction(timed_out):
    transactions = timed_out.transactions
    transactions.begin(XID, "c1", 0)
    timed_out.put(XID, [b"y"], session=None)
    assert timed_out.prepare(XID).calls == [(XA_OK, None)]


def test_the_begin_timeout_keeps_javas_answer(tmp_path, files):
    broker = broker_with(tmp_path, files)
    broker.transactions.begin(XID, "c1", 5)
    broker.put(XID, [b"x"], session=None)
    broker.clock.advance(5)
    with pytest.raises(XAError) as caught:
        broker.prepare(XID)
    assert caught.value.error_code == XAER_NOTA


def test_remembered_keys_are_bounded(tmp_path, files, monkeypatch):
    monkeypatch.setattr(branch_timeouts, "EXPIRED_REMEMBERED_MAX", 2)
    broker = broker_with(tmp_path, files, tx_active_timeout_s=30)
    for number in range(3):
        broker.transactions.begin(xid(number), "c1", 0)
    broker.clock.advance(30)
    with pytest.raises(XAError) as caught:
        broker.prepare(xid(0))
    assert caught.value.error_code == XAER_NOTA  # forgotten: the oldest goes first
    with pytest.raises(XAError) as caught:
        broker.prepare(xid(2))
    assert caught.value.error_code == XA_RBTIMEOUT


# -- sweeps ------------------------------------------------------------------------------


def sweep_call(broker: TxBroker):
    """The timer of the timeouts (a ``DelayedCall`` of the clock)."""
    timeouts = broker.transactions.timeouts
    (call,) = [
        call
        for call in broker.clock.getDelayedCalls()
        if getattr(call.func, "__self__", None) is timeouts
    ]
    return call


def test_a_sweep_rolls_back_at_most_a_batch_per_turn(tmp_path, files):
    """Goal: 2,010 deadlines passing at once take three turns of the reactor, not one.

    Method: move the clock past the deadlines without running its calls, then run each
    sweep the timer schedules, one at a time.
    """
    broker = broker_with(tmp_path, files, tx_active_timeout_s=30)
    count = branch_timeouts.SWEEP_BATCH * 2 + 10
    for number in range(count):
        broker.transactions.begin(f"TX:s:{number}", "c1", 0)
    broker.clock.rightNow += 30
    left = []
    for _ in range(3):
        call = sweep_call(broker)
        assert call.getTime() <= broker.clock.seconds()
        sweep = call.func
        call.cancel()
        sweep()
        left.append(len(open_keys(broker)))
    assert left == [count - branch_timeouts.SWEEP_BATCH, 10, 0]


def test_a_later_short_deadline_moves_the_timer_earlier(tmp_path, files):
    """A local transaction arms the timer for its active deadline; an unused XA branch begun
    after it has an earlier deadline, and is still rolled back on time."""
    broker = broker_with(tmp_path, files, tx_active_timeout_s=300, tx_unused_timeout_s=5)
    broker.transactions.begin("TX:s:1", "c1", 0)
    broker.transactions.begin(XID, "c1", 0)
    broker.clock.advance(5)
    assert open_keys(broker) == ["TX:s:1"]


# -- unused timeout ----------------------------------------------------------------------


def test_an_unused_branch_without_timeout_is_rolled_back_after_the_default(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_unused_timeout_s=5)
    transactions = broker.transactions
    transactions.begin(XID, "c1", 0)
    broker.clock.advance(4.9)
    assert open_keys(broker) == [XID]
    broker.clock.advance(0.2)
    assert open_keys(broker) == []
    with pytest.raises(XAError, match="txUnusedTimeoutInSeconds"):
        broker.prepare(XID)


def test_a_used_branch_is_not_rolled_back_by_the_unused_timeout(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_unused_timeout_s=5, tx_active_timeout_s=0)
    broker.transactions.begin(XID, "c1", 0)
    broker.put(XID, [b"m"], session=None)
    broker.clock.advance(3600)
    assert open_keys(broker) == [XID]


def test_a_branch_begun_again_after_finishing_gets_a_new_deadline(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_unused_timeout_s=5)
    transactions = broker.transactions
    transactions.begin(XID, "c1", 0)
    broker.clock.advance(3)
    broker.rollback(XID)
    transactions.begin(XID, "c1", 0)
    broker.clock.advance(3)
    assert open_keys(broker) == [XID]
    broker.clock.advance(3)
    assert open_keys(broker) == []


def test_a_zero_unused_timeout_keeps_unused_branches(tmp_path, files):
    broker = broker_with(tmp_path, files, tx_unused_timeout_s=0, tx_active_timeout_s=0)
    broker.transactions.begin(XID, "c1", 0)
    broker.clock.advance(3600)
    assert open_keys(broker) == [XID]
