"""A broker in memory for protocol tests: a ``Clock``, recording files, a manual executor.

``memory_broker(directory)`` makes the broker the in-process tests of the put paths share:
one topic ``test`` stored under ``directory``, ZooKeeper off, the file layer recording what
it is asked (``tests.store.conftest.RecordingFiles``) and the flushes run by hand
(``ManualExecutor.run_all``). Not started: the caller sets what it needs first.
"""

from __future__ import annotations

import os

from twisted.internet.task import Clock

from meta.config import ZkConfig
from meta.server.broker import Broker
from meta.store.manager import StoreManager
from tests.store.conftest import ManualExecutor, RecordingFiles, broker_config, topic_config


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
    return Broker(config, clock, store=store), executor
