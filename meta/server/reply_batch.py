"""``ReplyBatch``: the end of a batch of requests, where the broker writes what the batch
staged and sends the replies it made ready.

A batch is what one poll of the reactor read from its connections (or one finished fsync
batch): the puts handled in it were staged in their partitions and the transaction
journal, and each connection gathered its ready replies and announced them
(``output_pending``). At the end of the batch (``commit_and_send``, run once per poll
through the reactor's ``call_after_events``) the journal and every staged partition are
written with one write each, which acknowledges the puts that need no fsync, and then each
announced connection writes its replies with one transport write (``flush_output``).

Per read the broker calls ``output_pending`` and, once per poll, ``commit_and_send``; this
module is compiled in the compiled build (``meta.compiled``) so that both are compiled calls.
Reactor thread only.
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
