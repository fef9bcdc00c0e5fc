"""The transition table of a partition's copy on the slave (``meta.sync.link_states``)."""

from __future__ import annotations

import itertools

import pytest

from meta.sync.link_states import (
    CATCHING_UP,
    CAUGHT_UP,
    COMPARE,
    DIFFERS,
    DIVERGED,
    OK,
    STATES,
    UNKNOWN,
    TransitionError,
    next_state,
)
from meta.sync.samsa_catchup import PartitionSync

ALLOWED = {
    (OK, COMPARE): CATCHING_UP,
    (OK, DIFFERS): DIVERGED,
    (CATCHING_UP, COMPARE): CATCHING_UP,
    (CATCHING_UP, CAUGHT_UP): OK,
    (CATCHING_UP, UNKNOWN): OK,
    (CATCHING_UP, DIFFERS): DIVERGED,
    (DIVERGED, COMPARE): CATCHING_UP,
    (DIVERGED, DIFFERS): DIVERGED,
}


@pytest.mark.parametrize(
    ("state", "event"), list(itertools.product(STATES, (COMPARE, CAUGHT_UP, UNKNOWN, DIFFERS)))
)
def test_every_pair_is_allowed_as_the_table_says_and_no_other(state, event):
    if (state, event) in ALLOWED:
        assert next_state(state, event) == ALLOWED[(state, event)]
    else:
        with pytest.raises(TransitionError):
            next_state(state, event)


def test_a_diverged_partition_is_ok_again_only_after_a_comparison():
    partition = PartitionSync("test", 0)
    partition.diverge(25, refuse=True)
    assert partition.state == DIVERGED
    with pytest.raises(TransitionError):
        partition.move(CAUGHT_UP)
    partition.move(COMPARE)
    partition.move(CAUGHT_UP)
    assert partition.state == OK
