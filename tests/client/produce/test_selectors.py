"""Producer partition selectors (zk spec §2.2)."""

import random
import threading

import pytest

from meta.client.cluster import Partition
from meta.client.message import Message
from meta.client.produce.selectors import (
    HashPartitionSelector,
    PartitionSelector,
    RandomPartitionSelector,
    RoundRobinPartitionSelector,
)
from meta.errors import ClientError, NoPartitionError

FOUR = [Partition(0, 0), Partition(0, 1), Partition(1, 0), Partition(1, 1)]
FIVE = [Partition(0, number) for number in range(5)]


def message(key=None, topic="t"):
    return Message(topic, b"x", key=key)


def test_round_robin_sends_the_first_message_to_index_one():
    selector = RoundRobinPartitionSelector()
    picks = [selector.get_partition("t", FOUR, message()) for _ in range(5)]
    assert picks == [FOUR[1], FOUR[2], FOUR[3], FOUR[0], FOUR[1]]


def test_round_robin_sends_the_first_message_to_index_zero_with_one_partition():
    assert RoundRobinPartitionSelector().get_partition("t", FOUR[:1], message()) == FOUR[0]


def test_round_robin_shares_one_counter_across_topics():
    selector = RoundRobinPartitionSelector()
    assert selector.get_partition("a", FOUR, message(topic="a")) == FOUR[1]
    assert selector.get_partition("b", FOUR, message(topic="b")) == FOUR[2]
    assert selector.get_partition("a", FOUR, message(topic="a")) == FOUR[3]


def test_round_robin_counters_are_per_selector():
    first, second = RoundRobinPartitionSelector(), RoundRobinPartitionSelector()
    first.get_partition("t", FOUR, message())
    assert second.get_partition("t", FOUR, message()) == FOUR[1]


def test_round_robin_stays_non_negative_when_the_java_int_counter_wraps():
    selector = RoundRobinPartitionSelector()
    selector._counter = 2**31 - 1  # Java's Integer.MAX_VALUE; the next increment wraps.
    # Java: incrementAndGet() = -2147483648, masked to 0, 0 % 5 = 0.
    assert selector.get_partition("t", FIVE, message()) == FIVE[0]


def test_round_robin_is_thread_safe():
    """Goal: no increment is lost under contention. Method: 8 threads x 1000 picks over 4."""
    selector = RoundRobinPartitionSelector()
    counts = {partition: 0 for partition in FOUR}
    lock = threading.Lock()

    def pick_many():
        for _ in range(1000):
            partition = selector.get_partition("t", FOUR, message())
            with lock:
                counts[partition] += 1

    threads = [threading.Thread(target=pick_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert list(counts.values()) == [2000, 2000, 2000, 2000]


@pytest.mark.parametrize(
    "selector",
    [RoundRobinPartitionSelector(), RandomPartitionSelector(), HashPartitionSelector()],
    ids=["round-robin", "random", "hash"],
)
@pytest.mark.parametrize("partitions", [[], None], ids=["empty", "none"])
def test_every_selector_raises_a_no_partition_error_naming_the_topic(selector, partitions):
    with pytest.raises(NoPartitionError, match="for topic 'orders': .*empty partition list"):
        selector.get_partition("orders", partitions, message(key="k"))


def test_random_selector_picks_every_partition_from_the_list():
    selector = RandomPartitionSelector(random.Random(7))
    picks = {selector.get_partition("t", FOUR, message()) for _ in range(200)}
    assert picks == set(FOUR)


def test_hash_selector_maps_a_known_crc32_to_its_partition():
    # CRC-32("123456789") = 0xCBF43926; & 0x7FFFFFFF = 1274296614; % 5 = 4.
    assert HashPartitionSelector().get_partition("t", FIVE, message("123456789")) == FIVE[4]


def test_hash_selector_hashes_str_keys_as_utf8():
    selector = HashPartitionSelector()
    text_pick = selector.get_partition("t", FIVE, message("clé"))
    assert text_pick == selector.get_partition("t", FIVE, message("clé".encode()))


def test_hash_selector_sends_one_key_to_one_partition():
    selector = HashPartitionSelector()
    picks = {selector.get_partition("t", FIVE, message(b"order-42")) for _ in range(20)}
    assert len(picks) == 1


def test_hash_selector_accepts_a_key_function():
    selector = HashPartitionSelector(key=lambda m: m.data)
    # CRC-32("x") = 0x8CDC1683; & 0x7FFFFFFF = 215750275; % 4 = 3.
    assert selector.get_partition("t", FOUR, message()) == FOUR[3]


def test_hash_selector_refuses_a_message_without_a_key():
    with pytest.raises(ClientError, match="needs Message.key"):
        HashPartitionSelector().get_partition("t", FOUR, message())


def test_selectors_satisfy_the_protocol():
    selectors: list[PartitionSelector] = [
        RoundRobinPartitionSelector(),
        RandomPartitionSelector(),
        HashPartitionSelector(),
    ]
    assert all(callable(selector.get_partition) for selector in selectors)
