"""What happens to each fetched message before and after the listener (zk spec §3.6 step 2-5).

What lives here: ``Subscription``, the callable the fetch loop gives each message of a topic
to, and ``ProcessedIds``, the process-wide LRU of messages already processed.

For each message ``Subscription``:
    1. skips it when ``group + msgId`` is in the ``ProcessedIds`` cache (a message delivered
       again after a rebalance or a failed offset commit is not processed twice while it is
       remembered; the cache holds ``PROCESSED_IDS_MAX`` entries, as Java's default);
    2. asks the message filter, if any: ``filter(group, message)`` or an object with
       ``accept(group, message)``; a rejected message, or one whose filter raised, is not
       given to the listener but still counts as consumed (Java's rule);
    3. calls the listener (a callable, or an object with ``receive_messages(message)``);
    4. in auto-ack mode, remembers the message as processed when the listener returned
       without failing it.
A listener object with an ``executor`` attribute (a ``concurrent.futures.Executor``) has its
batches processed in that executor; the fetch thread waits, so each partition stays in order.

Thread-safety: ``ProcessedIds`` is thread-safe; a ``Subscription`` is called by fetch threads
(and the recover thread), one message at a time per partition.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

log = logging.getLogger("meta.client")

PROCESSED_IDS_MAX = 4096


class ProcessedIds:
    """A bounded, thread-safe LRU set of ``(group, msg_id)``."""

    def __init__(self, capacity: int = PROCESSED_IDS_MAX) -> None:
        assert capacity > 0
        self._capacity = capacity
        self._entries: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, key: tuple[str, int]) -> bool:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return True
            return False

    def add(self, key: tuple[str, int]) -> None:
        with self._lock:
            self._entries[key] = None
            self._entries.move_to_end(key)
            if len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


PROCESSED = ProcessedIds()
"""The process-wide cache (Java's static ``messageIdCache``)."""


class Subscription:
    """One topic's listener with its group, message filter and the processed-ids cache."""

    def __init__(
        self,
        group: str,
        listener: Any,
        message_filter: Any = None,
        processed: ProcessedIds = PROCESSED,
    ) -> None:
        self.group = group
        self.listener = listener
        self.message_filter = message_filter
        self._receive = getattr(listener, "receive_messages", listener)
        self._accept = getattr(message_filter, "accept", message_filter)
        self._processed = processed

    @property
    def executor(self) -> Any:
        """The listener's ``executor``, or None: batches then run on the fetch thread."""
        return getattr(self.listener, "executor", None)

    def __call__(self, message: Any) -> None:
        key = (self.group, message.id)
        if key in self._processed:
            return
        if self._accept is not None and not self._accepted(message):
            return
        self._receive(message)
        control = getattr(message, "partition_control", None)
        auto_ack = control is None or control.auto_ack
        if auto_ack and not getattr(message, "rollback_only", False):
            self._processed.add(key)

    def _accepted(self, message: Any) -> bool:
        try:
            return bool(self._accept(self.group, message))
        except Exception:
            log.warning(
                "message filter of group %s failed on message %d; skipping it",
                self.group,
                message.id,
                exc_info=True,
            )
            return False
