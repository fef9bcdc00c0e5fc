"""``Transaction``: one open transaction, local or an XA branch, and its messages.

What lives here: the record ``meta.tx.transaction_store`` keeps per transaction (its key,
state, session, messages in memory, first journal record, timeout timer, and what it is
counted against by ``meta.tx.branch_limits``). It changes only
through ``TransactionStore``, and its state only through ``meta.tx.states.transition``.

Thread affinity: reactor thread only.
"""

from __future__ import annotations

from typing import Any

from meta.tx import states
from meta.tx.journal_location import JournalLocation


class Transaction:
    """One open transaction (local or an XA branch) and the messages put into it."""

    __slots__ = (
        "batches",
        "byte_count",
        "is_xa",
        "key",
        "location",
        "message_count",
        "owner",
        "session",
        "state",
        "timer",
    )

    def __init__(self, key: str, session: object | None, state: str = states.START) -> None:
        self.key = key
        self.is_xa = key.startswith("XID:")
        self.session = session
        self.state = state
        # (topic, partition) -> stored message records in put order; once journaled, one
        # blob of all of them.
        self.batches: dict[tuple[str, int], list[bytes]] = {}
        self.message_count = 0
        self.byte_count = 0
        self.location: JournalLocation | None = None
        self.timer: Any = None
        # (connection, XA qualifier or None, client address or None) the transaction is
        # counted against by ``BranchLimits`` from its BEGIN until it leaves the open table;
        # None when not counted (restored from the journal, or no longer counted).
        self.owner: tuple[object, str | None, str | None] | None = None

    @property
    def unique_qualifier(self) -> str:
        return self.key.rsplit(":", 1)[1] if self.is_xa else ""
