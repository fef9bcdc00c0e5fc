"""What happens to each fetched message before and after the listener.

What lives here: ``Subscription``, the callable the fetch loop gives each message of a topic
to, and ``ProcessedIds``, the process-wide LRU of messages already processed.

For each message ``Subscription``:
    1. skips it when ``group + msgId`` is in the ``ProcessedIds`` cache (a message delivered
       again after a rebalance or a failed offset commit is not processed twice while it is
       remembered; the cache holds the last ``PROCESSED_IDS_MAX`` entries, Java's default);
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
    """A bounded, thread-safe set of the ``capacity`` most recently added ``(group, msg_id)``.

    Lookups take no lock (a dict lookup is atomic); adds do. The oldest entry goes first.
    """

    def __init__(self, capacity: int = PROCESSED_IDS_MAX) -> None:
        assert capacity > 0
        self._capacity = capacity
        self._entries: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._entries

    def add(self, key: tuple[str, int]) -> None:
        with self._lock:
            entries = self._entries
            if key in entries:
                entries.move_to_end(key)
                return
            entries[key] = None
            if len(entries) > self._capacity:
                entries.popitem(last=False)

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
        """Deliver one ``ReceivedMessage`` (see the module docstring)."""
        key = (self.group, message.id)
        processed = self._processed
        if key in processed:
            return
        if self._accept is not None and not self._accepted(message):
            return
        self._receive(message)
        control = message.partition_control
        if (control is None or control.auto_ack) and not message.rollback_only:
            processed.add(key)

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
