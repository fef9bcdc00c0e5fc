"""The states of a partition's copy on a samsa master's slave, and every transition.

Rule 1: ``PartitionSync.state`` (``meta.sync.samsa_catchup``) changes only through
``next_state``, by one of the events below; ``TRANSITIONS`` lists every allowed
(state, event) pair, and any other pair is a programmer error (``TransitionError``).

Rule 2: only a comparison of the two copies (``COMPARE``, then ``CAUGHT_UP``) makes a
diverged partition ``ok`` again: nothing learnt from puts alone does.

States (as ``stats sync`` and ``/metrics`` show them):

* ``ok``: the slave holds the master's records up to its last answer; puts flow.
* ``catching-up``: a connection was made and the copies are being compared (the slave's
  kind is being found out, or missing records are replayed); puts wait.
* ``diverged``: the slave holds another record at some offset; when the catch-up found it,
  puts are refused, when a put's answer showed it, puts go on as in Java.

Events:

* ``COMPARE``: a connection is made, or a catch-up starts on it.
* ``CAUGHT_UP``: the catch-up replayed every missing record.
* ``UNKNOWN``: the comparison cannot finish (the connection is lost, or the slave is not a
  metaq-py broker): back to ``ok``, the state Java keeps, until the next comparison.
* ``DIFFERS``: the slave stored a record at another offset than the master, or the catch-up
  found the copies different.

Pure; thread-safe.
"""

from __future__ import annotations

OK = "ok"
CATCHING_UP = "catching-up"
DIVERGED = "diverged"
STATES = (OK, CATCHING_UP, DIVERGED)

COMPARE = "compare"
CAUGHT_UP = "caught-up"
UNKNOWN = "unknown"
DIFFERS = "differs"

TRANSITIONS: dict[tuple[str, str], str] = {
    (OK, COMPARE): CATCHING_UP,
    (OK, DIFFERS): DIVERGED,
    (CATCHING_UP, COMPARE): CATCHING_UP,
    (CATCHING_UP, CAUGHT_UP): OK,
    (CATCHING_UP, UNKNOWN): OK,
    (CATCHING_UP, DIFFERS): DIVERGED,
    (DIVERGED, COMPARE): CATCHING_UP,
    (DIVERGED, DIFFERS): DIVERGED,
}


class TransitionError(Exception):
    """A state change the table does not allow (a bug in the caller)."""


def next_state(state: str, event: str) -> str:
    """The state after ``event`` in ``state``.

    Raises:
        TransitionError: the pair is not in ``TRANSITIONS``.
    """
    new = TRANSITIONS.get((state, event))
    if new is None:
        raise TransitionError(f"no transition from {state!r} on {event!r}")
    return new
