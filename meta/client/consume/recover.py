"""The consumer's local recover store: rejected messages, redelivered later.

A message whose listener failed more than ``max_fetch_retries`` times is appended here
(``RecoverStore.append``) and the partition moves on. ``RecoverManager`` gives the stored
messages back to the topic's listener every ``recover_interval_ms`` and removes each one only
after its listener call succeeded. The store is local to one client host and does not
interoperate with Java's: each ``<directory>/<topic>@<group>`` file is a ``RecoverFile``
(``meta.client.local.message_file``, where the format is written down).

Thread-safety: ``RecoverStore`` is thread-safe. The manager calls listeners on its own
thread, concurrently with the fetch threads, and is the one thread that removes records.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from meta.client.fetch.received import PartitionControl, ReceivedMessage, call_listener
from meta.client.local.message_file import RecoverFile
from meta.client.message import Message

log = logging.getLogger("meta.client")

DEFAULT_DIRECTORY = "~/.meta_recover"


class RecoverStore:
    """The recover files of one group under ``directory``, opened on first use.

    Args:
        directory: where the files live (created if missing; ``~`` is expanded).
        group: the consumer group.
        messages_max: the bound of each file.
    """

    def __init__(self, directory: str | os.PathLike[str], group: str, messages_max: int) -> None:
        self.directory = Path(directory).expanduser()
        self.group = group
        self.messages_max = messages_max
        self._lock = threading.Lock()
        self._files: dict[str, RecoverFile] = {}

    def file(self, topic: str, create: bool = True) -> RecoverFile | None:
        """The file of ``topic``, opened and recovered on first use.

        Args:
            topic: the topic.
            create: create the directory and file if missing; if False, return None for a
                file that does not exist (so consumers that never reject write nothing).
        """
        with self._lock:
            if topic not in self._files:
                path = self.directory / f"{topic}@{self.group}"
                if not create and not path.exists():
                    return None
                self.directory.mkdir(parents=True, exist_ok=True)
                self._files[topic] = RecoverFile(path, topic, self.messages_max)
            return self._files[topic]

    def append(self, message: Message) -> bool:
        """Store a rejected message (the default reject handler); False if it was dropped."""
        recover_file = self.file(message.topic)
        assert recover_file is not None
        return recover_file.append(message)

    def close(self) -> None:
        """Close every open file."""
        with self._lock:
            files, self._files = list(self._files.values()), {}
        for recover_file in files:
            recover_file.close()


class RecoverManager:
    """Redelivers stored messages to their topic's listener on a thread of its own.

    Args:
        store: the consumer's recover store.
        listeners: topic -> listener (topics without a listener are left alone).
        interval_ms: the pause between rounds; the first round runs after
            ``min(interval_ms, 5000)`` ms (Java waits 5 s).
    """

    def __init__(self, store: RecoverStore, listeners: Mapping[str, Any], interval_ms: int):
        self._store = store
        self._listeners = dict(listeners)
        self._interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread."""
        self._thread = threading.Thread(target=self._run, name="meta-recover", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; a round in progress ends after its current listener call."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def run_once(self) -> int:
        """Run one round over every subscribed topic; return how many messages were delivered."""
        delivered = 0
        for topic, listener in self._listeners.items():
            if self._stop.is_set():
                break
            recover_file = self._store.file(topic, create=False)
            if recover_file is None:
                continue
            done = [p for p, ok in self._deliver_all(recover_file, listener) if ok]
            recover_file.remove(done)
            delivered += len(done)
        return delivered

    def _deliver_all(self, recover_file: RecoverFile, listener: Any) -> Iterator[tuple[int, bool]]:
        for stored in recover_file.pending():
            if self._stop.is_set():
                return
            yield stored.position, deliver(listener, stored.message)

    def _run(self) -> None:
        wait_s = min(self._interval_s, 5.0)
        while not self._stop.wait(wait_s):
            try:
                self.run_once()
            except Exception:  # The next round tries again; the thread must not die.
                log.exception("recover round of group %s failed", self._store.group)
            wait_s = self._interval_s


def deliver(listener: Any, message: Message) -> bool:
    """Give a recovered message to ``listener``; True if it succeeded (no raise, no rollback)."""
    if isinstance(message, ReceivedMessage):
        message.partition_control = PartitionControl()  # Detached: auto mode, nothing to ack.
    try:
        call_listener(listener, message)
    except Exception:
        log.exception("listener failed on recovered message %s of %s", message.id, message.topic)
        return False
    rolled_back = isinstance(message, ReceivedMessage) and (
        message.rollback_only or message.partition_control.rolled_back
    )
    return not rolled_back
