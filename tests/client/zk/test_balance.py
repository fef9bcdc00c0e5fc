"""DEFAULT and CONSIST load-balance strategies (zk spec §3.3)."""

import bisect
import hashlib
import struct

import pytest

from meta.client.zk.balance import (
    STRATEGIES,
    assign,
    assign_consistent,
    assign_default,
    ketama_hash,
)
from meta.errors import ClientError

SPEC_PARTITIONS = ["0-0", "0-1", "0-10", "0-2", "1-0"]


# --- DEFAULT -----------------------------------------------------------------------------------


def test_default_matches_the_spec_example_for_the_first_consumer():
    assert assign_default("a", ["a", "b"], SPEC_PARTITIONS) == ["0-0", "0-1", "0-10"]


def test_default_matches_the_spec_example_for_the_second_consumer():
    assert assign_default("b", ["a", "b"], SPEC_PARTITIONS) == ["0-2", "1-0"]


def test_default_sorts_unsorted_inputs_as_strings_first():
    partitions = ["1-0", "0-2", "0-10", "0-1", "0-0"]
    assert assign_default("b", ["b", "a"], partitions) == ["0-2", "1-0"]


def test_default_leaves_the_last_consumers_idle_when_consumers_outnumber_partitions():
    consumers = ["c1", "c2", "c3", "c4"]
    shares = [assign_default(consumer, consumers, ["0-0", "0-1"]) for consumer in consumers]
    assert shares == [["0-0"], ["0-1"], [], []]


def test_default_gives_an_absent_consumer_nothing():
    assert assign_default("z", ["a", "b"], SPEC_PARTITIONS) == []


def test_default_gives_the_extra_partitions_to_the_first_consumers():
    consumers = ["g_a", "g_b", "g_c"]
    partitions = [f"0-{number}" for number in range(8)]  # String order: 0-0 .. 0-7.
    shares = [assign_default(consumer, consumers, partitions) for consumer in consumers]
    assert shares == [["0-0", "0-1", "0-2"], ["0-3", "0-4", "0-5"], ["0-6", "0-7"]]


def test_default_with_no_consumers_assigns_nothing():
    assert assign_default("a", [], SPEC_PARTITIONS) == []


# --- CONSIST -----------------------------------------------------------------------------------


def reference_ring_owner(consumers, partition):
    """An independent reading of the spec: a sorted list of (point, rank, consumer) + bisect.

    Collisions are resolved by keeping, for each point, the entry added last (the highest rank),
    which is what "later consumers overwrite" means.
    """
    entries = []
    rank = 0
    for consumer in sorted(consumers):
        for i in range(40):
            digest = hashlib.md5((consumer + "-" + str(i)).encode("utf-8")).digest()
            for point in struct.unpack("<4I", digest):
                entries.append((point, rank, consumer))
                rank += 1
    entries.sort()
    latest = {}
    for point, _rank, consumer in entries:
        latest[point] = consumer
    points = [point for point, _rank, _consumer in entries]
    (key,) = struct.unpack("<I", hashlib.md5(partition.encode("utf-8")).digest()[:4])
    position = bisect.bisect_left(points, key)
    return latest[points[position] if position < len(points) else points[0]]


CONSUMERS = ["grp_10.0.0.1-100-a", "grp_10.0.0.2-200-b", "grp_10.0.0.3-300-c"]
PARTITIONS = sorted(f"{broker}-{number}" for broker in range(2) for number in range(4))
# Computed once by this implementation and checked against the reference above.
PINNED_CONSISTENT_SHARES = {
    "grp_10.0.0.1-100-a": ["0-1", "0-2", "1-1"],
    "grp_10.0.0.2-200-b": ["0-0", "0-3", "1-2"],
    "grp_10.0.0.3-300-c": ["1-0", "1-3"],
}


def test_consistent_agrees_with_an_independent_ring_implementation():
    for consumer in CONSUMERS:
        expected = sorted(p for p in PARTITIONS if reference_ring_owner(CONSUMERS, p) == consumer)
        assert assign_consistent(consumer, CONSUMERS, PARTITIONS) == expected


def test_consistent_gives_every_partition_exactly_one_owner():
    shares = [assign_consistent(consumer, CONSUMERS, PARTITIONS) for consumer in CONSUMERS]
    owned = [partition for share in shares for partition in share]
    assert sorted(owned) == PARTITIONS


def test_consistent_pins_its_answer_for_a_fixed_group():
    """Regression guard: the assignment of this group must never change between releases."""
    shares = {c: assign_consistent(c, CONSUMERS, PARTITIONS) for c in CONSUMERS}
    assert shares == {
        consumer: [p for p in PARTITIONS if reference_ring_owner(CONSUMERS, p) == consumer]
        for consumer in CONSUMERS
    }
    assert shares == PINNED_CONSISTENT_SHARES


def test_consistent_with_one_consumer_assigns_everything_to_it():
    assert assign_consistent("only", ["only"], PARTITIONS) == PARTITIONS


def test_consistent_with_no_consumers_assigns_nothing():
    assert assign_consistent("a", [], PARTITIONS) == []


def test_consistent_does_not_depend_on_the_input_order_of_consumers():
    reversed_consumers = list(reversed(CONSUMERS))
    for consumer in CONSUMERS:
        assert assign_consistent(consumer, reversed_consumers, PARTITIONS) == assign_consistent(
            consumer, CONSUMERS, PARTITIONS
        )


def test_ketama_hash_is_the_little_endian_first_word_of_md5():
    # MD5("") = d41d8cd98f00b204e9800998ecf8427e; bytes d4 1d 8c d9 read little-endian.
    assert ketama_hash("") == 0xD98C1DD4


# --- assign ------------------------------------------------------------------------------------


def test_assign_dispatches_by_java_strategy_name():
    assert set(STRATEGIES) == {"DEFAULT", "CONSIST"}
    assert assign("DEFAULT", "b", ["a", "b"], SPEC_PARTITIONS) == ["0-2", "1-0"]
    assert assign("CONSIST", "only", ["only"], SPEC_PARTITIONS) == sorted(SPEC_PARTITIONS)


def test_assign_refuses_an_unknown_strategy():
    with pytest.raises(ClientError, match="unknown load-balance strategy 'default'"):
        assign("default", "a", ["a"], SPEC_PARTITIONS)
