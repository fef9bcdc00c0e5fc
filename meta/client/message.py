"""The client-side message and the result of sending one.

``Message`` is what applications build and what consumers receive. Only ``topic``, ``data`` and
``attribute`` travel on the wire (through ``meta.protocol.message.encode_payload``); ``key`` is
a client-side ordering key read by ``HashPartitionSelector`` and is never sent. ``id``,
``partition`` and ``offset`` are filled in by the producer after a successful send, or by the
consumer from the fetched record.

Invariants: ``check_message`` is the gate a producer applies before selecting a partition,
matching Java's checks (topic not blank, data present) plus type checks Python needs.
Thread-safety: ``Message`` is mutable (Java sets id and partition after a send) and is not meant
to be shared between threads while a send is in flight; ``SendResult`` is immutable.
"""

from __future__ import annotations

from dataclasses import dataclass

from meta.client.cluster import Partition
from meta.errors import ClientError, SendFailedError
from meta.protocol.message import Record, decode_payload, encode_payload


@dataclass(slots=True)
class Message:
    """One message.

    Attributes:
        topic: the topic to send to (or the topic it was read from).
        data: the message body.
        attribute: optional string carried in the payload (flag bit 0), UTF-8 on the wire.
        key: client-side ordering key for the hash selector; never sent.
        id: the broker-assigned message id, once known.
        partition: the partition it was stored in, once known.
        offset: its absolute byte offset in that partition, once known (-1 for a
            transactional put, whose offset is unknown until commit).
    """

    topic: str
    data: bytes
    attribute: str | None = None
    key: str | bytes | None = None
    id: int | None = None
    partition: Partition | None = None
    offset: int | None = None

    def payload_and_flag(self) -> tuple[bytes, int]:
        """Return the put body and flag: the attribute section (if any) then the data."""
        return encode_payload(self.data, self.attribute)

    @classmethod
    def from_record(cls, topic: str, record: Record, partition: Partition) -> Message:
        """Build a received message from a fetched record, decoding its attribute.

        Args:
            topic: the topic the record was fetched from.
            record: the record; its ``offset`` must be absolute.
            partition: the partition it was fetched from.

        Raises:
            InvalidRecordError: the flag says there is an attribute but it does not fit.
        """
        attribute, data = decode_payload(record.flag, record.payload)
        # Positional (field order: topic, data, attribute, key, id, partition, offset): the
        # consumer's hot path, measurably cheaper than keywords.
        return cls(topic, data, attribute, None, record.msg_id, partition, record.offset)


def check_message(message: Message) -> None:
    """Refuse a message a producer must not send (Java ``SimpleMessageProducer.checkMessage``).

    Raises:
        ClientError: the message is None, its topic is blank, its data is not bytes, its
            attribute is not a string, or its key is neither a string nor bytes.
    """
    if message is None:
        raise ClientError("message must not be None")
    if not isinstance(message.topic, str) or not message.topic.strip():
        raise ClientError("topic must not be blank")
    if not isinstance(message.data, bytes):
        raise ClientError(f"message data must be bytes, got {type(message.data).__name__}")
    if message.attribute is not None and not isinstance(message.attribute, str):
        kind = type(message.attribute).__name__
        raise ClientError(f"message attribute must be a str or None, got {kind}")
    if message.key is not None and not isinstance(message.key, str | bytes):
        raise ClientError(f"message key must be str, bytes or None, got {type(message.key)}")


def as_message(
    topic_or_message: str | Message,
    data: bytes | None,
    attribute: str | None = None,
    key: str | bytes | None = None,
) -> Message:
    """The message of a Pythonic ``send(topic, data)`` or ``send(message)`` call.

    Raises:
        ClientError: a ``Message`` together with ``data``, ``attribute`` or ``key``, or a
            topic without ``data``.
    """
    if isinstance(topic_or_message, Message):
        if data is not None or attribute is not None or key is not None:
            raise ClientError("send(message) takes no data, attribute or key: set them on it")
        return topic_or_message
    if data is None:
        raise ClientError(f"send({topic_or_message!r}, data) needs the data (bytes)")
    return Message(topic_or_message, data, attribute, key)


@dataclass(frozen=True, slots=True)
class SendResult:
    """The outcome of one send, with Java's ``SendResult`` semantics.

    On success (``success`` means stored by a broker) ``partition`` is where the message went
    and ``offset`` its byte offset (-1 for a transactional put). On failure ``partition`` is
    None, ``offset`` is -1 and ``error_message`` is the broker's reply body (the literal
    ``"403"`` for a closed partition). An async producer's result says ``queued``: the
    message is on its way or in the local backlog, not yet stored, so ``success`` is False
    and ``error_message`` None.
    """

    success: bool
    partition: Partition | None
    offset: int
    error_message: str | None
    msg_id: int | None = None
    queued: bool = False

    @classmethod
    def failure(cls, error_message: str) -> SendResult:
        """Return a failed result: no partition, offset -1."""
        return cls(False, None, -1, error_message)

    @classmethod
    def queued_result(cls) -> SendResult:
        """Return the result of a message handed to an async producer: queued, not stored."""
        return cls(False, None, -1, None, None, True)

    @property
    def failed(self) -> bool:
        """True when the broker refused or failed the put (neither stored nor queued)."""
        return not self.success and not self.queued

    def raise_for_status(self) -> SendResult:
        """Raise if the put failed; return this result otherwise (stored or queued).

        Returns:
            This result, so that ``producer.send_message(m).raise_for_status().offset`` reads.

        Raises:
            SendFailedError: the broker refused or failed the put (its text in the message,
                this result as ``error.result``).
        """
        if self.failed:
            raise SendFailedError(
                f"the broker did not store the message: {self.error_message}", self
            )
        return self
