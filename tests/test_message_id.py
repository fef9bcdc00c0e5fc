import pytest

from meta.message_id import EPOCH_MS, IdWorker, id_time_ms, id_worker


def test_spec_example_id_decodes_to_broker_three():
    assert id_worker(4194316293) == 3
    assert id_time_ms(4194316293) == EPOCH_MS + 1000
    assert 4194316293 & 0xFFF == 5


def test_ids_carry_wall_clock_time_and_worker_id():
    worker = IdWorker(7, clock_ms=lambda: 1_800_000_000_000)
    msg_id = worker.next_id()
    assert msg_id > 0
    assert id_time_ms(msg_id) == 1_800_000_000_000
    assert id_worker(msg_id) == 7


def test_ids_never_go_backwards_when_the_clock_does():
    times = iter([2_000_000_000_000, 1_999_999_999_000, 1_999_999_999_500])
    worker = IdWorker(1, clock_ms=lambda: next(times))
    ids = [worker.next_id() for _ in range(3)]
    assert ids == sorted(ids)
    assert len(set(ids)) == 3


def test_sequence_overflow_borrows_the_next_millisecond():
    worker = IdWorker(0, clock_ms=lambda: 1_900_000_000_000)
    ids = [worker.next_id() for _ in range(4097)]
    assert ids == sorted(set(ids))
    assert id_time_ms(ids[-1]) == 1_900_000_000_001


@pytest.mark.parametrize("worker_id", [-1, 1024])
def test_worker_id_outside_ten_bits_is_refused(worker_id):
    with pytest.raises(ValueError):
        IdWorker(worker_id)


def test_a_block_of_ids_equals_as_many_single_ids():
    single = IdWorker(5, clock_ms=lambda: 1_900_000_000_000)
    block = IdWorker(5, clock_ms=lambda: 1_900_000_000_000)
    for count in (1, 7, 4000, 300, 9000, 2):
        assert list(block.next_ids(count)) == [single.next_id() for _ in range(count)]
