"""The slave's fetch loop: the client's ``FetchManager``, handing raw batches to the reactor.

``SlaveFetchManager`` keeps everything of ``meta.client.fetch.FetchManager`` (threads, the
delay queue, ``slaveMaxDelayInMills`` as the back-off maximum, long polling, growing the
fetch size for a large record, the connection pool) and replaces what is done with a fetched
batch: instead of decoding messages for a listener, it checks every complete record (length
and CRC, ``iter_messages``), hands the record bytes **verbatim** to the reactor thread
(``callFromThread``), and waits until the reactor has appended and acknowledged all of them.
So memory stays bounded (one batch per fetch thread) and a partition's next fetch starts
where its last append ended.

A partition stops (its request leaves the manager; ``halt(key, reason)`` runs on the
reactor, which logs an ERROR) when the master sends a bad record, answers 301 (its data no
longer starts at our end), or the append is refused (local end differs from the fetched
offset, the local partition failed, the topic is not accepted here). Nothing is skipped.

Thread-safety: as ``FetchManager``; ``_process`` runs on the fetch threads, ``append`` and
``halt`` are called on the reactor thread only. Overrides ``FetchManager._process`` and
``_moved`` and uses its ``_grow``/``_backoff``: a public raw-batch hook in the client would
make this independent of those private methods.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any

from twisted.internet import defer

from meta.client.fetch import FetchManager, FetchRequest, FetchSettings
from meta.errors import InvalidRecordError, MetaError
from meta.protocol.message import iter_messages

log = logging.getLogger("meta.slave")

POOL_USER = "meta-slave"
APPEND_WAIT_S = 60.0
"""Longest wait of a fetch thread for the reactor to append and acknowledge its batch."""

Append = Callable[[str, int, int, bytes, list[int]], Any]
"""Reactor side: ``append(topic, partition, base, records, sizes)`` -> Deferred[bytes]."""
Halt = Callable[[tuple[str, str], str], None]
"""Reactor side: ``halt((topic, "B-P"), reason)`` after a partition stopped."""


class ReplicationHalted(MetaError):
    """A partition cannot be copied on; the text says why (logged as an ERROR)."""


def record_sizes(data: bytes, base: int) -> tuple[list[int], int]:
    """Sizes of the complete records at the start of a get reply, and the last one's id.

    Args:
        data: the reply body.
        base: the offset of its first byte.

    Returns:
        ``(sizes, last_msg_id)``; ``([], -1)`` when no record is complete.

    Raises:
        InvalidRecordError: a complete record has a negative length or a wrong CRC.
    """
    sizes: list[int] = []
    last_id = -1
    for record in iter_messages(data, base):
        sizes.append(record.size)
        last_id = record.msg_id
    return sizes, last_id


class SlaveFetchManager(FetchManager):
    """Fetches the master's partitions and appends what it gets, verbatim, on the reactor.

    Args:
        pool: a ``ConnectionPool`` (owned by the caller).
        settings: fetch settings (group = ``slaveGroup``).
        reactor: the reactor the appends run on.
        append: see ``Append``.
        halt: see ``Halt``.
    """

    def __init__(
        self, pool: Any, settings: FetchSettings, reactor: Any, append: Append, halt: Halt
    ) -> None:
        super().__init__(pool, POOL_USER, settings, listeners={})
        self._reactor = reactor
        self._append = append
        self._halt = halt

    def _process(self, request: FetchRequest, data: bytes) -> None:
        """Append the batch's complete records and move on past them (a fetch thread)."""
        base = request.next_offset
        try:
            sizes, last_id = record_sizes(data, base)
        except InvalidRecordError as error:
            self._stop_partition(request, f"the master sent a bad record: {error}")
            return
        consumed = sum(sizes)
        if not consumed:
            self._backoff(request)
            self._grow(request, data)  # a record larger than the fetch size: ask for it whole
            return
        try:
            self._hand_off(request, base, bytes(data[:consumed]), sizes)
        except ReplicationHalted as error:
            self._stop_partition(request, str(error))
            return
        request.offset = base + consumed
        request.tmp_offset = -1
        request.msg_id = last_id
        request.retries = 0
        request.delay_ms = 0
        if len(data) < request.max_size // 2 and request.max_size > request.initial_max_size:
            request.max_size = max(request.initial_max_size, request.max_size // 2)

    def _hand_off(self, request: FetchRequest, base: int, records: bytes, sizes: list[int]) -> None:
        """Run the append on the reactor and wait for its acknowledgement (bounded).

        Raises:
            ReplicationHalted: the append was refused or failed, or took too long.
        """
        done: concurrent.futures.Future = concurrent.futures.Future()
        partition = request.partition.partition
        self._reactor.callFromThread(
            self._append_on_reactor, done, request.topic, partition, base, records, sizes
        )
        try:
            appended = done.result(timeout=APPEND_WAIT_S)
        except concurrent.futures.TimeoutError:
            raise ReplicationHalted(
                f"the append at offset {base} was not acknowledged within {APPEND_WAIT_S:g} s"
            ) from None
        except ReplicationHalted:
            raise
        except Exception as error:  # The store's error, e.g. PartitionFailedError.
            raise ReplicationHalted(f"the append at offset {base} failed: {error!r}") from None
        assert appended == len(records), (appended, len(records))

    def _append_on_reactor(self, done: concurrent.futures.Future, *arguments: Any) -> None:
        appended = defer.maybeDeferred(self._append, *arguments)
        appended.addCallbacks(done.set_result, lambda failure: done.set_exception(failure.value))

    def _moved(self, request: FetchRequest, offset: int) -> bool:
        """A 301: the master's data no longer covers our end; copying on would leave a gap."""
        self._stop_partition(
            request,
            f"the master has no data at offset {request.next_offset} (it answered 301 with "
            f"{offset}: its retention deleted what this slave has not copied yet, or this "
            "slave's data is not a copy of this master's)",
        )
        return False

    def _stop_partition(self, request: FetchRequest, reason: str) -> None:
        """Drop ``request`` (it is not fetched again) and tell the reactor why."""
        with self._cond:
            if self._requests.get(request.key) is request:
                del self._requests[request.key]
        self._reactor.callFromThread(self._halt, request.key, reason)
