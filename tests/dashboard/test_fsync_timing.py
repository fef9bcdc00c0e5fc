"""The flusher reports each batch's duration once (the dashboard's fsync histogram)."""

from __future__ import annotations

from meta.store.group_commit import Flusher, SynchronousExecutor


class _Task:
    def run(self) -> None:
        pass


class _Client:
    def __init__(self) -> None:
        self.done = 0

    def flush_snapshot(self) -> _Task:
        return _Task()

    def flush_done(self, task: _Task) -> None:
        self.done += 1

    def flush_failed(self, task: _Task, error: BaseException) -> None:
        raise AssertionError(error)


def test_each_flush_batch_reports_one_duration():
    flusher = Flusher(SynchronousExecutor())
    durations: list[float] = []
    flusher.on_batch_seconds = durations.append
    client = _Client()
    flusher.request(client)
    flusher.request(client)
    assert client.done == 2
    assert len(durations) == 2
    assert all(duration >= 0 for duration in durations)
