"""Shared helpers for the transaction tests.

``EventFiles`` is the store tests' ``RecordingFiles`` that also records renames and removals
(checkpoints and journal files use both). ``TxBroker`` wires a real ``StoreManager`` and a
``TransactionManager`` on one data directory the way ``meta.server.broker`` does, with a
``task.Clock`` as the reactor; it can crash (close every descriptor with no flush and no last
checkpoint) and start again on the same directories; what it leaves open is closed after the
test (``tests.descriptors.closers``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
from twisted.internet.task import Clock

from meta.config import BrokerConfig
from meta.store.group_commit import SynchronousExecutor
from meta.store.manager import StoreManager
from meta.tx.journal_location import JournalLocation
from meta.tx.manager import TransactionManager
from meta.tx.records import FILE_MAGIC, read_record
from tests.descriptors import closers
from tests.store.conftest import (
    ManualExecutor,
    RecordingFiles,
    broker_config,
    collect,
    record,
    short_name,
    topic_config,
)

TOPIC = "test"
LOCAL = "TX:s:1"
XID = "XID:1:0a:0b:q1"


class EventFiles(RecordingFiles):
    """``RecordingFiles`` that also records ``("rename", target)`` and ``("remove", name)``."""

    def rename(self, source: str, target: str) -> None:
        self._record("rename", short_name(target))
        super().rename(source, target)

    def remove(self, path: str) -> None:
        self._record("remove", short_name(path))
        super().remove(path)

    def of(self, name: str) -> list[str]:
        """The kinds of the events on ``name``, in order."""
        return [kind for kind, target in self.events if target == name]


@pytest.fixture
def files() -> EventFiles:
    return EventFiles()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def tx_config(tmp_path, unflush_threshold: int = 0, **fields: Any) -> BrokerConfig:
    """A broker on ``<tmp_path>/meta`` with topic ``test`` (4 partitions; group commit unless
    ``unflush_threshold`` is set); ``fields`` replace broker settings."""
    data = os.path.join(str(tmp_path), "meta")
    os.makedirs(data, exist_ok=True)
    topic = topic_config(TOPIC, data, unflush_threshold=unflush_threshold)
    config = broker_config(data, topics=(topic,))
    return dataclasses.replace(config, **fields)


def journal_records(directory: str) -> list[tuple[JournalLocation, Any]]:
    """Every whole record of the redo files in ``directory``, read without the journal."""
    found = []
    numbers = sorted(int(name[5:]) for name in os.listdir(directory) if name.startswith("redo."))
    for number in numbers:
        with open(os.path.join(directory, f"redo.{number}"), "rb") as file:
            data = file.read()
        position = len(FILE_MAGIC)
        while (entry := read_record(data, position)) is not None:
            found.append((JournalLocation(number, position), entry[0]))
            position += entry[1]
    return found


class Done:
    """A ``done(result, error)`` callback that keeps what it was called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, BaseException | None]] = []

    def __call__(self, result: Any, error: BaseException | None) -> None:
        self.calls.append((result, error))

    @property
    def ok(self) -> bool:
        """Called exactly once, without an error."""
        return len(self.calls) == 1 and self.calls[0][1] is None

    @property
    def error(self) -> BaseException | None:
        assert len(self.calls) == 1, self.calls
        return self.calls[0][1]


class TxBroker:
    """A store and its transactions on one data directory, opened as the broker opens them."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        files: RecordingFiles | None = None,
        manual: bool = False,
        background: Any = None,
    ) -> None:
        self.config = config
        self.message_ids = 0
        self.clock = Clock()
        self.files = files if files is not None else EventFiles()
        self.executor: Any = ManualExecutor() if manual else SynchronousExecutor()
        self.store = StoreManager(
            config,
            self.clock,
            files=self.files,
            executor=self.executor,
            background=background,
        )
        closers.add(self.release)
        self.store.load()
        self.store.start()
        self.tx = TransactionManager(config, self.clock, self.store)
        opened = collect(self.tx.open())
        self.run()
        assert opened == [None], opened

    @property
    def transactions(self):
        return self.tx.transactions

    @property
    def journal(self):
        return self.tx.journal

    @property
    def report(self):
        return self.tx.report

    @property
    def journal_directory(self) -> str:
        return self.tx.directory

    def run(self) -> int:
        """Run every queued flush batch (nothing to do with a synchronous executor)."""
        if isinstance(self.executor, ManualExecutor):
            return self.executor.run_all()
        return 0

    def log(self, partition: int = 0):
        return self.store.get_or_create(TOPIC, partition)

    def segment_path(self, partition: int = 0) -> str:
        return os.path.join(self.config.data_path, f"{TOPIC}-{partition}", f"{0:020d}.meta")

    def segment_bytes(self, partition: int = 0) -> bytes:
        with open(self.segment_path(partition), "rb") as file:
            return file.read()

    def put(self, key: str, payloads, partition: int = 0, session: object = "c1") -> list[bytes]:
        """Put each payload into transaction ``key``; return the stored records."""
        records = []
        for payload in payloads:
            self.message_ids += 1
            stored = record(payload, msg_id=self.message_ids)
            transaction = self.transactions.check_put(key, session)
            self.transactions.put(transaction, TOPIC, partition, stored)
            records.append(stored)
        return records

    def end_of_batch(self) -> None:
        """What the broker does after each network read (``Broker.end_of_batch``): write
        staged journal records (unless a requested flush will) and partition records."""
        self.journal.end_of_batch()
        self.store.commit_staged()

    def commit(self, key: str, session: object = "c1", one_phase: bool = True) -> Done:
        """COMMIT, then ``end_of_batch`` as the broker after the read that carried it."""
        done = Done()
        self.transactions.commit(key, session, one_phase, done)
        self.end_of_batch()
        return done

    def rollback(self, key: str, session: object = "c1") -> Done:
        done = Done()
        self.transactions.rollback(key, session, done)
        return done

    def prepare(self, key: str) -> Done:
        done = Done()
        self.transactions.prepare(key, done)
        return done

    def crash(self) -> None:
        """Stop as a process crash at the end of a reactor turn would: no flush, no last
        checkpoint, queued flush batches dropped.

        What was written stays in the files (the page cache survives a process crash);
        staged records are written first, as ``end_of_batch`` would have.
        """
        self.end_of_batch()
        if isinstance(self.executor, ManualExecutor):
            self.executor.queue.clear()
        for log in self.store.partitions():
            for segment in log.segments:
                segment.close()
        self.tx.journal.close()

    def restart(self) -> TxBroker:
        """Crash, then open a new store and transactions on the same directories."""
        self.crash()
        return TxBroker(self.config, manual=isinstance(self.executor, ManualExecutor))

    def release(self) -> None:
        """Close what is still open, as after a crash (no flush); nothing when closed."""
        for log in self.store.partitions():
            for segment in log.segments:
                segment.close()
        if getattr(self, "tx", None) is not None:
            self.tx.journal.close()

    def close(self) -> None:
        """The broker's clean stop: last checkpoint, store flushed and closed, journal closed."""
        self.tx.close()
        closed = collect(self.store.close())
        self.run()
        assert closed == [None], closed
        self.tx.close_files()
