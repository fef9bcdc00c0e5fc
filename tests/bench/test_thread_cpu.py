"""``meta.bench.thread_cpu``: CPU per thread name from ``/proc`` samples."""

from __future__ import annotations

import os
import threading

from meta.bench.thread_cpu import per_thread, task_times

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def test_per_thread_sums_threads_of_one_name_and_counts_new_ones_from_zero():
    before = {1: ("reactor", 10, 5), 2: ("worker", 3, 0)}
    after = {1: ("reactor", 30, 15), 2: ("worker", 5, 1), 3: ("worker", 4, 0)}
    rows = per_thread(before, after, 2 << 20)  # 2 MiB
    assert list(rows) == ["reactor", "worker"]  # busiest first
    assert rows["reactor"] == {
        "threads": 1,
        "user_ms_per_mib": round(20 * TICK_MS / 2, 3),
        "system_ms_per_mib": round(10 * TICK_MS / 2, 3),
        "ms_per_mib": round(30 * TICK_MS / 2, 3),
    }
    assert rows["worker"]["threads"] == 2
    assert rows["worker"]["user_ms_per_mib"] == round(6 * TICK_MS / 2, 3)
    assert rows["worker"]["system_ms_per_mib"] == round(1 * TICK_MS / 2, 3)


def test_task_times_lists_every_live_thread_of_this_process():
    started = threading.Event()
    finish = threading.Event()

    def wait() -> None:
        started.set()
        finish.wait(10)

    thread = threading.Thread(target=wait)
    thread.start()
    try:
        assert started.wait(10)
        sample = task_times(os.getpid())
    finally:
        finish.set()
        thread.join(10)
    assert os.getpid() in sample
    assert thread.native_id in sample
    name, user, system = sample[thread.native_id]
    assert isinstance(name, str) and user >= 0 and system >= 0


def test_task_times_of_no_process_is_empty():
    assert task_times(2**22 + 12345) == {}  # above the kernel's pid limit
