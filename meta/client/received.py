"""What a consumer's listener receives: ``ReceivedMessage`` and its ``PartitionControl``.

``PartitionControl`` is Java's ``commons.cluster.Partition`` ack flags for one partition
(manual acknowledgement, zk spec §3.8); ``ReceivedMessage`` is a ``Message`` carrying it.
A ``PartitionControl`` belongs to the fetch thread holding its request: call it only from
inside the listener call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from meta.client.message import Message
from meta.errors import ClientError


class PartitionControl:
    """Manual acknowledgement of one partition (Java's ``commons.cluster.Partition`` flags).

    Owned by a ``FetchRequest``, so ``auto_ack`` persists across batches (until the next
    rebalance builds new requests); ``acked`` and ``rolled_back`` last one batch.
    """

    def __init__(self) -> None:
        self.auto_ack = True
        self.acked = False
        self.rolled_back = False

    def set_auto_ack(self, auto_ack: bool) -> None:
        """Switch between auto mode (default) and manual mode (``False``)."""
        self.auto_ack = bool(auto_ack)

    def ack(self) -> None:
        """Commit this message and every one since the last ack; ends the batch.

        Raises:
            ClientError: in auto mode, or after ``rollback()`` in the same batch.
        """
        self._check_manual("ack", "rollback" if self.rolled_back else None)
        self.acked = True

    def rollback(self) -> None:
        """Forget every message since the last ack (they are delivered again); ends the batch.

        Raises:
            ClientError: in auto mode, or after ``ack()`` in the same batch.
        """
        self._check_manual("rollback", "ack" if self.acked else None)
        self.rolled_back = True

    def reset(self) -> None:
        """Clear the per-batch flags (the fetch loop calls this at the end of a batch)."""
        self.acked = False
        self.rolled_back = False

    def _check_manual(self, call: str, earlier: str | None) -> None:
        if self.auto_ack:
            raise ClientError(f"{call}() is invalid in auto-ack mode: call set_auto_ack(False)")
        if earlier is not None:
            raise ClientError(f"{call}() after {earlier}() in the same batch")


@dataclass(slots=True)
class ReceivedMessage(Message):
    """A message given to a listener: a ``Message`` plus its partition's ack handle.

    Attributes:
        partition_control: the partition's ``PartitionControl`` (a detached one in auto
            mode for messages redelivered from the recover store).
        rollback_only: set by ``set_rollback_only()``: the message counts as failed.
    """

    partition_control: PartitionControl | None = field(default=None, repr=False, compare=False)
    rollback_only: bool = field(default=False, repr=False, compare=False)

    def set_rollback_only(self) -> None:
        """Fail this message without raising: the batch stops and it is fetched again."""
        self.rollback_only = True
