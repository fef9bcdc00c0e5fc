"""The transaction state tables (zk spec section 4.2, wire spec section 2.7.2).

Expected transitions are written out here from the spec, not read back from the tables, and
refusals carry the texts Java's ``XATransaction`` / ``LocalTransaction`` /
``TransactionalCommandProcessor.getTransaction`` send.
"""

from __future__ import annotations

import pytest

from meta.errors import TransactionError, XAError
from meta.protocol.xa import XA_HEURCOM, XA_HEURRB, XAER_PROTO, XAER_RMERR
from meta.tx.states import (
    COMMIT_ONE_PHASE,
    COMMIT_TWO_PHASE,
    COMMITTING,
    FINISHED,
    HEURISTIC_COMMIT,
    HEURISTIC_ROLLBACK,
    IN_USE,
    LOCAL_TRANSITIONS,
    PREPARE,
    PREPARED,
    PUT,
    ROLLBACK,
    START,
    XA_TRANSITIONS,
    transition,
)

XID = "XID:1:0a:0b:q"
LOCAL = "TX:s:1"
STATES = [START, IN_USE, PREPARED, COMMITTING, FINISHED, HEURISTIC_COMMIT, HEURISTIC_ROLLBACK]
EVENTS = [PUT, PREPARE, COMMIT_ONE_PHASE, COMMIT_TWO_PHASE, ROLLBACK]

XA_ALLOWED = {
    (START, PUT): IN_USE,
    (IN_USE, PUT): IN_USE,
    (START, PREPARE): FINISHED,
    (IN_USE, PREPARE): PREPARED,
    (START, COMMIT_ONE_PHASE): FINISHED,
    (IN_USE, COMMIT_ONE_PHASE): COMMITTING,
    (PREPARED, COMMIT_ONE_PHASE): COMMITTING,
    (PREPARED, COMMIT_TWO_PHASE): COMMITTING,
    (START, ROLLBACK): FINISHED,
    (IN_USE, ROLLBACK): FINISHED,
    (PREPARED, ROLLBACK): FINISHED,
}

LOCAL_ALLOWED = {
    (START, PUT): IN_USE,
    (IN_USE, PUT): IN_USE,
    (START, COMMIT_ONE_PHASE): FINISHED,
    (START, COMMIT_TWO_PHASE): FINISHED,
    (IN_USE, COMMIT_ONE_PHASE): COMMITTING,
    (IN_USE, COMMIT_TWO_PHASE): COMMITTING,
    (START, ROLLBACK): FINISHED,
    (IN_USE, ROLLBACK): FINISHED,
}


@pytest.mark.parametrize(("state", "event"), sorted(XA_ALLOWED))
def test_an_xa_branch_takes_each_allowed_transition(state, event):
    assert transition(True, XID, state, event) == XA_ALLOWED[(state, event)]


@pytest.mark.parametrize(("state", "event"), sorted(LOCAL_ALLOWED))
def test_a_local_transaction_takes_each_allowed_transition(state, event):
    assert transition(False, LOCAL, state, event) == LOCAL_ALLOWED[(state, event)]


def test_the_xa_table_allows_exactly_the_spec_transitions():
    assert XA_TRANSITIONS == XA_ALLOWED


def test_the_local_table_allows_exactly_the_spec_transitions():
    assert LOCAL_TRANSITIONS == LOCAL_ALLOWED


REFUSED = [
    (is_xa, state, event)
    for is_xa in (True, False)
    for state in STATES
    for event in EVENTS
    if (state, event) not in (XA_ALLOWED if is_xa else LOCAL_ALLOWED)
]


@pytest.mark.parametrize(("is_xa", "state", "event"), REFUSED)
def test_every_event_a_table_does_not_list_is_refused(is_xa, state, event):
    with pytest.raises((XAError, TransactionError)):
        transition(is_xa, XID if is_xa else LOCAL, state, event)


def xa_refusal(state: str, event: str) -> XAError:
    with pytest.raises(XAError) as caught:
        transition(True, XID, state, event)
    return caught.value


@pytest.mark.parametrize("state", [START, IN_USE])
def test_a_two_phase_commit_of_an_unprepared_branch_is_xaer_proto_with_javas_text(state):
    error = xa_refusal(state, COMMIT_TWO_PHASE)
    assert (error.error_code, error.message) == (
        XAER_PROTO,
        "Cannot do 2 phase commit if the transaction has not been prepared.",
    )


@pytest.mark.parametrize("state", [COMMITTING, FINISHED])
def test_a_one_phase_commit_of_a_finished_branch_is_cannot_call_commit_now(state):
    error = xa_refusal(state, COMMIT_ONE_PHASE)
    assert (error.error_code, error.message) == (XAER_PROTO, "Cannot call commit now.")


@pytest.mark.parametrize("state", [COMMITTING, FINISHED])
def test_a_two_phase_commit_of_a_finished_branch_is_cannot_call_commit_now(state):
    """Java's ``XATransaction.commit`` checks "prepared" only in START and IN_USE; any
    other state falls to ``illegalStateTransition("commit")``."""
    error = xa_refusal(state, COMMIT_TWO_PHASE)
    assert (error.error_code, error.message) == (XAER_PROTO, "Cannot call commit now.")


@pytest.mark.parametrize("state", [PREPARED, COMMITTING, FINISHED])
def test_preparing_a_branch_twice_is_xaer_proto(state):
    assert xa_refusal(state, PREPARE).error_code == XAER_PROTO


@pytest.mark.parametrize("state", [PREPARED, COMMITTING, FINISHED])
def test_preparing_a_branch_twice_has_javas_text(state):
    """Java's ``XATransaction.prepare`` sends ``illegalStateTransition("prepare")`` from
    any state but START and IN_USE: "Cannot call prepare now." ("Prepare cannot be called
    now." is ``Transaction.prePrepare``'s text, reached by a local commit instead)."""
    assert xa_refusal(state, PREPARE).message == "Cannot call prepare now."


@pytest.mark.parametrize("state", [COMMITTING, FINISHED])
def test_rolling_back_a_finished_branch_is_xaer_proto(state):
    assert xa_refusal(state, ROLLBACK).error_code == XAER_PROTO


@pytest.mark.parametrize("state", [START, IN_USE, COMMITTING, FINISHED])
def test_preparing_a_local_transaction_is_xaer_rmerr_with_javas_text(state):
    with pytest.raises(XAError) as caught:
        transition(False, LOCAL, state, PREPARE)
    assert (caught.value.error_code, caught.value.message) == (
        XAER_RMERR,
        "Prepare not implemented on Local Transactions.",
    )


def test_xaer_codes_have_their_jta_values():
    assert (XAER_PROTO, XAER_RMERR, XA_HEURCOM, XA_HEURRB) == (-6, -3, 7, 6)


@pytest.mark.parametrize("event", [PREPARE, COMMIT_ONE_PHASE, COMMIT_TWO_PHASE, ROLLBACK])
def test_a_heuristically_committed_branch_refuses_with_xa_heurcom(event):
    assert xa_refusal(HEURISTIC_COMMIT, event).error_code == XA_HEURCOM


@pytest.mark.parametrize("event", [PREPARE, COMMIT_ONE_PHASE, COMMIT_TWO_PHASE, ROLLBACK])
def test_a_heuristically_rolled_back_branch_refuses_with_xa_heurrb(event):
    assert xa_refusal(HEURISTIC_ROLLBACK, event).error_code == XA_HEURRB


def test_a_heuristically_committed_branch_refusal_has_javas_text():
    """``TransactionalCommandProcessor.getTransaction``: "XA transaction '<xid>' has been
    heuristically committed." """
    assert xa_refusal(HEURISTIC_COMMIT, COMMIT_TWO_PHASE).message == (
        f"XA transaction '{XID}' has been heuristically committed."
    )


def test_a_heuristically_rolled_back_branch_refusal_has_javas_text():
    assert xa_refusal(HEURISTIC_ROLLBACK, ROLLBACK).message == (
        f"XA transaction '{XID}' has been heuristically rolled back."
    )


@pytest.mark.parametrize("is_xa", [True, False])
@pytest.mark.parametrize("state", [PREPARED, COMMITTING, FINISHED])
def test_a_put_into_a_transaction_past_in_use_is_a_transaction_error(is_xa, state):
    with pytest.raises(TransactionError):
        transition(is_xa, XID if is_xa else LOCAL, state, PUT)


@pytest.mark.parametrize("state", [COMMITTING, FINISHED])
def test_committing_a_finished_local_transaction_is_a_transaction_error(state):
    with pytest.raises(TransactionError):
        transition(False, LOCAL, state, COMMIT_ONE_PHASE)
