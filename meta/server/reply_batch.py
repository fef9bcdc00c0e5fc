"""``ReplyBatch``: the end of a batch of requests, where the broker writes what the batch
staged and sends the replies it made ready; ``AfterEvents``: the reactor's calls at the end
of a poll, which is where a batch ends.

A batch is what one poll of the reactor read from its connections (or one finished fsync
batch): the puts handled in it were staged in their partitions and the transaction
journal, and each connection gathered its ready replies and announced them
(``output_pending``). At the end of the batch (``commit_and_send``, run once per poll
through the reactor's ``call_after_events``) the journal and every staged partition are
written with one write each, which acknowledges the puts that need no fsync, and then each
announced connection writes its replies with one transport write (``flush_output``).

Per read the broker calls ``output_pending`` and asks the reactor's ``AfterEvents.call`` for
``commit_and_send`` (``Broker.end_of_batch``; a replicated put does so three times, a read
and a reply on the master, a read on the slave); this module is compiled in the compiled
build (``meta.compiled``) so that all three are compiled calls. Reactor thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ReplyBatch:
    """The connections with gathered replies, and the end of their batch.

    Args:
        write_journal: writes the transaction journal's staged records
            (``Journal.end_of_batch``).
        write_partitions: writes every partition's staged records and acknowledges them
            (``StoreManager.commit_staged``).
    """

    def __init__(
        self, write_journal: Callable[[], None], write_partitions: Callable[[], None]
    ) -> None:
        self._write_journal = write_journal
        self._write_partitions = write_partitions
        self._pending: list[Any] = []

    def output_pending(self, connection: Any) -> None:
        """``connection`` has replies gathered for the next ``flush_output``."""
        self._pending.append(connection)

    def flush_output(self) -> None:
        """Write the gathered replies of every connection (one transport write each)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        for connection in pending:
            connection.flush_output()

    def commit_and_send(self) -> None:
        """The end of a batch: write what it staged, then send the replies made ready."""
        self._write_journal()
        self._write_partitions()
        self.flush_output()


class AfterEvents:
    """The calls to run once the events of a reactor's current poll are handled: the state
    behind ``LeanEPollReactor.call_after_events`` (``meta.server.reactor``), which is this
    object's ``call``.

    Attributes:
        pending: the calls asked for while a poll's events are dispatched, in the order of
            their first asking; None between polls and in a poll of one event, when a call
            runs at once. The reactor sets it for a poll and runs what it holds after.
    """

    def __init__(self) -> None:
        self.pending: dict[Callable[[], object], None] | None = None

    def call(self, function: Callable[[], object]) -> None:
        """Call ``function()`` after the current poll's events, once however often it is
        asked for in the poll, or at once outside a poll of several events."""
        pending = self.pending
        if pending is None:
            function()
        else:
            pending[function] = None
