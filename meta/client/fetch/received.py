"""What a consumer's listener receives: ``ReceivedMessage`` and its ``PartitionControl``.

``PartitionControl`` is Java's ``commons.cluster.Partition`` ack flags for one partition
(manual acknowledgement, as in Java); ``ReceivedMessage`` is a ``Message`` carrying it.
``decode_batch`` turns a fetched message set into ``ReceivedMessage`` objects in one loop
(the consumer's hot path: no intermediate ``Record``), with exactly the checks of
``meta.protocol.message.iter_messages`` (a test pins the two to the same results).
``deliver_batch`` gives a decoded batch to a listener, message by message, until one fails
or the listener raises ``StopBatch`` (the message it was given is then neither consumed nor
failed: the next fetch delivers it again; a consumer's ``poll`` ends a batch this way when
nobody takes the message).
A ``PartitionControl`` belongs to the fetch thread holding its request: call it only from
inside the listener call.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from meta.client.cluster import Partition
from meta.client.message import Message
from meta.errors import ClientError, InvalidRecordError
from meta.protocol.crc import crc32
from meta.protocol.message import (
    CHECKSUM_MASK,
    FLAG_ATTRIBUTE,
    HEADER,
    HEADER_SIZE,
    decode_payload,
    is_zero_header,
    zero_header_error,
)

log = logging.getLogger("meta.client")


class StopBatch(Exception):
    """Raised by a listener to end the batch before the message it was given.

    That message does not count as consumed and the listener does not count as failed (no
    retry is counted, nothing is rejected); the next fetch of the partition starts at it.
    """


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


def decode_batch(
    data: bytes,
    base_offset: int,
    topic: str,
    partition: Partition,
    control: PartitionControl | None,
) -> Iterator[tuple[ReceivedMessage, int]]:
    """Yield ``(message, record_size)`` for each complete record of a fetched message set.

    Same rules as ``iter_messages``: stops quietly at a trailing partial record.

    Raises:
        InvalidRecordError: a complete record has a negative length, a wrong checksum, an
            all-zero header (``is_zero_header``) or an attribute section that does not fit
            (after the good records before it).
    """
    unpack = HEADER.unpack_from
    total = len(data)
    position = 0
    while total - position >= HEADER_SIZE:
        length, stored_checksum, msg_id, flag = unpack(data, position)
        if length < 0:
            offset = base_offset + position
            raise InvalidRecordError(f"negative payload length {length} at offset {offset}")
        start = position + HEADER_SIZE
        end = start + length
        if end > total:
            return
        if length == 0 and is_zero_header(length, stored_checksum, msg_id, flag):
            raise zero_header_error(base_offset + position)
        payload = data[start:end]
        if crc32(payload) & CHECKSUM_MASK != stored_checksum:
            raise InvalidRecordError(f"checksum mismatch at offset {base_offset + position}")
        if flag & FLAG_ATTRIBUTE:
            attribute, payload = decode_payload(flag, payload)
        else:
            attribute = None
        # Positional (field order of Message, then partition_control): the hot path.
        yield (
            ReceivedMessage(
                topic, payload, attribute, None, msg_id, partition, base_offset + position, control
            ),
            end - position,
        )
        position = end


@dataclass
class Delivery:
    """What giving one batch to a listener did (``deliver_batch``'s answer)."""

    consumed: int = 0
    last_id: int | None = None
    failed: bool = False
    stopped: bool = False
    invalid: InvalidRecordError | None = None


def call_listener(listener: Any, message: Message) -> None:
    """Call a listener: a callable, or an object with ``receive_messages(message)``."""
    receive = getattr(listener, "receive_messages", None)
    (receive if receive is not None else listener)(message)


def deliver_batch(
    listener: Any,
    data: bytes,
    base: int,
    topic: str,
    partition: Partition,
    control: PartitionControl,
) -> Delivery:
    """Call ``listener`` on each complete message of ``data`` until one fails or it ends.

    Args:
        listener: a callable, or an object with ``receive_messages(message)``.
        data: the fetched message set; its first byte is at offset ``base``.
        base: the partition offset of ``data[0]``.
        topic: the topic of the messages.
        partition: their partition.
        control: the partition's ``PartitionControl`` (its flags stop the batch).

    Returns:
        The bytes and last id of the messages consumed, whether the listener failed one,
        and the ``InvalidRecordError`` of a bad record that ended the batch, if any.
    """
    receive = getattr(listener, "receive_messages", listener)
    batch = Delivery()
    consumed = 0
    last_id = None
    try:
        for message, size in decode_batch(data, base, topic, partition, control):
            try:
                receive(message)
            except StopBatch:
                batch.stopped = True
                break
            except Exception:
                log.exception("listener failed on %s/%s@%d", topic, partition, message.offset)
                message.rollback_only = True
            if message.rollback_only:
                batch.failed = True
                break
            if control.rolled_back:
                break
            consumed += size
            last_id = message.id
            if control.acked:
                break
    except InvalidRecordError as error:
        batch.invalid = error
    batch.consumed = consumed
    batch.last_id = last_id
    return batch
