"""The transaction state machine, as tables (STYLE 4), Java's states.

Rule 1: every transition of a transaction's state goes through ``transition``; nothing else
assigns ``Transaction.state``.
Rule 2: an event a table does not list for the current state is refused with the ``XAError``
(or, for local transactions, the ``TransactionError``) that Java sends for it; the state is
then unchanged.

States: START (begun, no message yet), IN_USE (holds messages), PREPARED (XA, journaled),
COMMITTING (the commit record is written and the batches are being appended), FINISHED, and the
operator's HEURISTIC_COMMIT / HEURISTIC_ROLLBACK (kept until FORGET). Events: PUT, PREPARE,
COMMIT_ONE_PHASE, COMMIT_TWO_PHASE, ROLLBACK.

Pure functions and constants; thread-safe.
"""

from __future__ import annotations

from meta.errors import TransactionError, XAError
from meta.protocol.xa import XA_HEURCOM, XA_HEURRB, XAER_PROTO, XAER_RMERR

START = "START"
IN_USE = "IN_USE"
PREPARED = "PREPARED"
COMMITTING = "COMMITTING"
FINISHED = "FINISHED"
HEURISTIC_COMMIT = "HEURISTIC_COMMIT"
HEURISTIC_ROLLBACK = "HEURISTIC_ROLLBACK"

PUT = "PUT"
PREPARE = "PREPARE"
COMMIT_ONE_PHASE = "COMMIT_ONE_PHASE"
COMMIT_TWO_PHASE = "COMMIT_TWO_PHASE"
ROLLBACK = "ROLLBACK"

XA_TRANSITIONS: dict[tuple[str, str], str] = {
    (START, PUT): IN_USE,
    (IN_USE, PUT): IN_USE,
    (START, PREPARE): FINISHED,  # nothing to commit: XA_RDONLY, and the branch is forgotten
    (IN_USE, PREPARE): PREPARED,
    (START, COMMIT_ONE_PHASE): FINISHED,
    (IN_USE, COMMIT_ONE_PHASE): COMMITTING,
    (PREPARED, COMMIT_ONE_PHASE): COMMITTING,  # Java commits a prepared branch either way
    (PREPARED, COMMIT_TWO_PHASE): COMMITTING,
    (START, ROLLBACK): FINISHED,
    (IN_USE, ROLLBACK): FINISHED,
    (PREPARED, ROLLBACK): FINISHED,
}

LOCAL_TRANSITIONS: dict[tuple[str, str], str] = {
    (START, PUT): IN_USE,
    (IN_USE, PUT): IN_USE,
    (START, COMMIT_ONE_PHASE): FINISHED,
    (START, COMMIT_TWO_PHASE): FINISHED,
    (IN_USE, COMMIT_ONE_PHASE): COMMITTING,
    (IN_USE, COMMIT_TWO_PHASE): COMMITTING,  # the flag means nothing to a local transaction
    (START, ROLLBACK): FINISHED,
    (IN_USE, ROLLBACK): FINISHED,
}

# Java's XATransaction texts. "not been prepared" is only said of a branch that could still
# be prepared (START, IN_USE); later states get "Cannot call commit now.".
_XA_REFUSALS = {
    PREPARE: "Cannot call prepare now.",
    COMMIT_ONE_PHASE: "Cannot call commit now.",
    COMMIT_TWO_PHASE: "Cannot call commit now.",
    ROLLBACK: "Cannot call rollback now.",
}
_NOT_PREPARED = "Cannot do 2 phase commit if the transaction has not been prepared."
_HEURISTIC_CODES = {HEURISTIC_COMMIT: XA_HEURCOM, HEURISTIC_ROLLBACK: XA_HEURRB}


def transition(is_xa: bool, key: str, state: str, event: str) -> str:
    """Return the state ``event`` leads to from ``state``.

    Raises:
        XAError: an XA branch refuses the event (XAER_PROTO with Java's texts; a heuristic
            state gives XA_HEURCOM / XA_HEURRB); a local transaction cannot PREPARE
            (XAER_RMERR).
        TransactionError: a local transaction or a message put refuses the event.
    """
    table = XA_TRANSITIONS if is_xa else LOCAL_TRANSITIONS
    new_state = table.get((state, event))
    if new_state is not None:
        return new_state
    if event == PUT:
        raise TransactionError(
            f"Transaction '{key}' is {state.lower()}; it takes no more messages."
        )
    if not is_xa:
        if event == PREPARE:
            raise XAError(XAER_RMERR, "Prepare not implemented on Local Transactions.")
        raise TransactionError(f"Local transaction '{key}' cannot {event.lower()} now.")
    if state in _HEURISTIC_CODES:
        outcome = "committed" if state == HEURISTIC_COMMIT else "rolled back"
        text = f"XA transaction '{key}' has been heuristically {outcome}."
        raise XAError(_HEURISTIC_CODES[state], text)
    if event == COMMIT_TWO_PHASE and state in (START, IN_USE):
        raise XAError(XAER_PROTO, _NOT_PREPARED)
    raise XAError(XAER_PROTO, _XA_REFUSALS[event])
