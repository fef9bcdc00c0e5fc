"""A broker in memory for protocol tests: a ``Clock``, recording files, a manual executor.

``memory_broker(directory)`` makes the broker the in-process tests of the put paths share:
one topic ``test`` stored under ``directory``, ZooKeeper off, the file layer recording what
it is asked (``tests.store.conftest.RecordingFiles``) and the flushes run by hand
(``ManualExecutor.run_all``). Not started: the caller sets what it needs first.

``stop_broker`` stops such a broker (or any broker on a ``Clock``) through its own ``stop``,
stepping the clock and the executor it waits on; ``closing_broker`` has that done after the
running test (``tests.descriptors.closers``), so its store, journal and lock files close.
"""

from __future__ import annotations

import os
from typing import Any

from twisted.internet.task import Clock

from meta.config import ZkConfig
from meta.server.broker import CLOSE_LINGER_S, CLOSE_QUIET_S, Broker
from meta.store.manager import StoreManager
from tests.descriptors import closers
from tests.store.conftest import (
    ManualExecutor,
    RecordingFiles,
    broker_config,
    collect,
    topic_config,
)

STOP_TURNS_MAX = int(CLOSE_LINGER_S / CLOSE_QUIET_S) + 10
"""Clock steps ``stop_broker`` allows: the connections' whole linger, and a margin."""


def memory_broker(directory: str) -> tuple[Broker, ManualExecutor]:
    """The broker (not started) and the executor that runs its flushes."""
    os.makedirs(directory, exist_ok=True)
    clock = Clock()
    config = broker_config(
        directory,
        topics=(topic_config("test", directory),),
        zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False),
    )
    executor = ManualExecutor()
    store = StoreManager(config, clock, files=RecordingFiles(), executor=executor)
    return closing_broker(Broker(config, clock, store=store), clock, executor), executor


def stop_broker(broker: Broker, clock: Any, executor: ManualExecutor | None = None) -> None:
    """Stop ``broker`` (``Broker.stop``, idempotent) on its ``clock``: run the flushes its
    store waits for on a manual ``executor`` and step the clock through the connections'
    linger, at most ``STOP_TURNS_MAX`` times. The test's clients leave first: their
    in-memory transports cannot take the half-close a stopping broker sends."""
    for connection in list(broker.connections):
        connection.connectionLost()
    stopped = collect(broker.stop())
    for _ in range(STOP_TURNS_MAX):
        if stopped:
            break
        if executor is not None:
            executor.run_all()
        clock.advance(CLOSE_QUIET_S)
    assert stopped == [None], stopped


def closing_broker(broker: Broker, clock: Any, executor: ManualExecutor | None = None) -> Broker:
    """``broker``, stopped (``stop_broker``) after the running test."""
    closers.add(lambda: stop_broker(broker, clock, executor))
    return broker
