"""What a put accepts and what it is answered: the one home of the put's rules.

Every path that writes a client's message (the general ``handlers.handle_put``, the batch
fast path of ``put_run``, the puts of a transaction in ``tx_handlers``, and any later
transport) takes its rules from here. ``take_put`` applies all of them to one plain put
and returns the record to stage; a new write path starts there. The rules:

* **Partition**: ``choose_partition`` (partition ``-1`` means a random one of the topic) and
  ``Broker.partition_for_put`` (the running configuration decides; a new partition is
  created); ``cached_target`` is the same lookup for runs of puts, cached per connection in a
  ``Targets`` dict (partition logs are never replaced in a running store; each connection
  clears its cache on every reload).
* **Checksum**: a put's checksum is absent, ``-1`` (not checked) or the record checksum of
  its body (``meta.protocol.message.checksum``); ``accepted_crc`` is the rule, for one put,
  and ``accepted_crcs`` applies it to a run of puts. Anything else is refused with
  ``CHECKSUM_FAILURE``.
* **Record**: the stored record is ``meta.protocol.message``'s header and the body as sent
  (``pack_record``); ``pack_header`` and ``RECORD_HEADER_BYTES`` are the same layout for
  paths that join many records.
* **Replication**: on a samsa master (``broker.sync`` set) ``replicated_put`` is the put:
  the rules above, then the role's refusal (slave disconnected, partition diverged) and the
  master's (its partition stopped on a failed write or fsync: nothing is forwarded), then
  ``broker.sync.replicate`` forwards and stages the record; the reply waits for both
  copies: 200 only when both are stored, else ``slave_failed`` or ``master_failed`` (500,
  Java's texts and what is in doubt: the slave's 500 comes for a put the master stored, the
  master's for one the slave may hold; a put that failed on both sides gets the master's).
  A put that names a transaction is refused there with ``SYNC_TRANSACTIONS_REFUSED``.
  ``replicate_run`` is the same for a run of taken puts of one partition (``put_run``'s
  batches).
* **Replies**: a taken put is answered by ``meta.protocol.put_reply`` (200 with
  ``<msg_id> <partition> <offset>``). A refused or failed one by ``put_failed`` (500, Java's
  ``Put message to ... failed.`` text), ``append_failed`` (its append or fsync failed),
  ``refused_by_slave`` (403, compatibility.md, on an async or a gregor slave), ``too_large``
  (500, compatibility.md) and, inside a transaction, ``transactional_put_failed`` (500 with
  the error's own text). Each counts the failure as Java does.

Nothing here stages, journals or writes a record: callers do, with what this module
returns. ``take_sync`` is the same for a ``sync`` from a samsa master (the master's id and
partition). ``take_put`` has the effects of accepting a put (the first put to a partition
creates it, and a message id is taken); the failure replies count the failure. Reactor
thread only (the broker's counters and statistics are not locked).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from meta.errors import DescriptorShortageError, MetaError, PartitionFailedError, XAError
from meta.protocol.codec import encode_result
from meta.protocol.commands import BodyTooLarge, Put
from meta.protocol.crc import crc32 as _crc32
from meta.protocol.message import CHECKSUM_MASK, HEADER, HEADER_SIZE
from meta.protocol.put_reply import PUT_REPLY, PUT_REPLY_BODY, put_reply
from meta.server.replies import PENDING
from meta.server.services import BrokerServices
from meta.store.partition import PartitionLog

log = logging.getLogger("meta.server")

CHECKSUM_FAILURE = "Checksum failure,message may be corrupted when transfering on networking."
TRANSACTION_NEEDS_PARTITION = "Invalid partition for transaction command:-1"
SYNC_TRANSACTIONS_REFUSED = "Transactions are not supported with synchronous replication"
# After Java's text of a replicated put's 500, where the put may be stored all the same
# (docs/samsa-master.md, "What a producer gets"): the sync went to the slave before the
# master's write, so one copy may hold a put that failed on the other.
MASTER_FAILED_DOUBT = "; not stored on the master, but the slave may hold it"
SLAVE_FAILED_DOUBT = "; stored on the master (consumers read it), maybe not on the slave"

RECORD_HEADER_BYTES = HEADER_SIZE
pack_header = HEADER.pack
"""``pack_header(body_length, crc, msg_id, flag)``: the header of a stored record."""


TARGETS_MAX = 1024
Targets = dict[tuple[bytes, bytes], tuple]
"""(topic, partition) header bytes -> (partition log, topic, partition): lookups kept per
connection, at most ``TARGETS_MAX`` (then cleared)."""


def choose_partition(broker: BrokerServices, topic: str, partition: int) -> int:
    """The partition a put goes to: ``partition``, or for ``-1`` a random one of the topic.

    Raises:
        MetaError: the topic is not accepted by the running configuration.
    """
    if partition == -1:
        return random.randrange(broker.config.topic_config(topic).num_partitions)
    return partition


def cached_target(
    broker: BrokerServices, targets: Targets, key: tuple[bytes, bytes]
) -> tuple | None:
    """(partition log, topic, partition) of an existing partition that the running config
    accepts and that takes appends; None: the caller's one-by-one path decides (a new
    partition, a refused topic or partition, a failed partition ...). ``key`` is the put
    header's (topic, partition) bytes, which the decoder took only when legal."""
    target = targets.get(key)
    if target is None:
        topic_bytes, partition_bytes = key
        topic = topic_bytes.decode("ascii")  # the decoder took only legal (ASCII) names
        partition = int(partition_bytes)
        partition_log = broker.store.accepting(topic, partition)
        if partition_log is None:
            return None
        if len(targets) >= TARGETS_MAX:
            targets.clear()
        target = targets[key] = (partition_log, topic, partition)
    return target if target[0].accepts_appends else None


def accepted_crcs(puts: Sequence[tuple[Any, ...]], start: int, stop: int) -> list[int]:
    """The record checksums of ``puts[start:stop]``, up to the first put refused for its
    checksum: the list is shorter than ``stop - start`` exactly when one was refused.

    Each item has ``codec.PutFields``' layout (a sync's ``SyncFields`` adds the id after it):
    the checksum at index 3 and the body, ``bytes`` or ``bytearray``, at index 5. The rule is
    ``accepted_crc``'s, for each put.
    """
    crcs: list[int] = []
    append = crcs.append
    for fields in puts[start:stop]:  # a put's fields, or a sync's (``codec.SyncFields``)
        # By its own name: a direct call when compiled (a local alias is a generic one).
        crc = accepted_crc(fields[5], fields[3])
        if crc is None:
            break
        append(crc)
    return crcs


def accepted_crc(data: bytes | bytearray, checksum: int | None) -> int | None:
    """The record checksum of one put's body, or None when its checksum refuses it.

    This is the checksum rule of every put path: a put's checksum field is absent, ``-1``
    (not checked), or the CRC-32 of its body with the top bit cleared.
    """
    crc = _crc32(data) & CHECKSUM_MASK
    if checksum is not None and checksum != crc and checksum != -1:
        return None
    return crc


def pack_record(data: bytes | bytearray, crc: int, msg_id: int, flag: int) -> bytes:
    """The stored record of a taken put (``message.pack_message`` with its checksum known)."""
    return pack_header(len(data), crc, msg_id, flag) + data


class PutRefused(MetaError):
    """``take_put`` refused a put.

    Attributes:
        partition: the partition the put went to (the chosen one for ``-1``, when chosen).
        detail: what was wrong, the ``detail`` of ``put_failed``'s text.
    """

    def __init__(self, partition: int, detail: str) -> None:
        super().__init__(detail)
        self.partition = partition
        self.detail = detail


class TakenPut(NamedTuple):
    """A plain put that passed every rule: stage ``record`` on ``partition_log``."""

    partition_log: PartitionLog
    partition: int
    msg_id: int
    record: bytes


def take_put(
    broker: BrokerServices, topic: str, partition: int, data: bytes, flag: int, checksum: int | None
) -> TakenPut:
    """Apply every rule of one plain put (outside a transaction) and build its record.

    Nothing is staged or counted: the caller stages the record, calls ``record_put``, and
    answers ``encode_put_reply`` on the store's ack or ``append_failed`` on its error.

    Args:
        broker: the broker taking the put (a master: ``refused_by_slave`` answers a slave's).
        topic: the topic as the client named it.
        partition: the partition, or -1 for a random one (``choose_partition``).
        data: the put body exactly as sent (stored verbatim).
        flag: the put's flag, stored verbatim.
        checksum: the put's checksum field (None when absent).

    Returns:
        The partition log, the partition, the new message id and the record.

    Raises:
        PutRefused: the topic or partition is refused, or the checksum is wrong; answer
            ``put_failed(broker, topic, refused.partition, opaque, refused.detail)``.
    """
    try:
        partition = choose_partition(broker, topic, partition)
        partition_log = broker.partition_for_put(topic, partition)
        crc = accepted_crc(data, checksum)
        if crc is None:
            raise MetaError(CHECKSUM_FAILURE)
        msg_id = broker.ids.next_id()
    except MetaError as error:
        raise PutRefused(partition, str(error)) from error
    return TakenPut(partition_log, partition, msg_id, pack_record(data, crc, msg_id, flag))


def failure_text(broker: BrokerServices, topic: str, partition: int, detail: str | None) -> bytes:
    """Java's put failure body (no space before ``Detail:``)."""
    text = f"Put message to [broker '{broker.uri}'] [partition '{topic}-{partition}'] failed."
    if detail is not None:
        text += f"Detail:{detail}"
    return text.encode()


def put_failed(
    broker: BrokerServices, topic: str, partition: int, opaque: int, detail: str | None
) -> bytes:
    """The 500 of a plain put that was refused or whose append failed; counts the failure."""
    broker.counters.put_failed += 1
    broker.record_put_failed(topic, partition)
    return encode_result(500, failure_text(broker, topic, partition, detail), opaque)


def append_failed(
    error: BaseException, broker: BrokerServices, topic: str, partition: int, opaque: int
) -> bytes:
    """The 500 of a put whose append or fsync failed with ``error`` (compatibility.md)."""
    if not isinstance(error, MetaError):
        log.error("append to %s-%d failed: %r", topic, partition, error)
    known = isinstance(error, PartitionFailedError | DescriptorShortageError)
    detail = str(error) if known else None
    return put_failed(broker, topic, partition, opaque, detail)


def refused_by_slave(broker: BrokerServices, topic: str, partition: int, opaque: int) -> bytes:
    """The 403 of a put sent to an async slave or a gregor (synchronous) slave
    (``broker.refuses_puts``; Java's slaves accept them; compatibility.md)."""
    broker.counters.put_failed += 1
    if broker.slave_id >= 0:
        role = f"async slave {broker.slave_id} of broker {broker.config.broker_id}"
    else:
        role = f"the gregor (synchronous replication) slave of broker {broker.config.broker_id}"
    detail = f"this broker is {role}; only the master takes puts"
    return encode_result(403, failure_text(broker, topic, partition, detail), opaque)


def take_sync(
    broker: BrokerServices, topic: str, partition: int, data: bytes, flag: int, msg_id: int,
    checksum: int | None,
) -> tuple[PartitionLog, bytes]:  # fmt: skip
    """Apply the rules of a put to a ``sync`` from a samsa master and build its record.

    The same partition, topic and checksum rules as ``take_put``, for exactly the partition
    given (no ``-1``), with the master's id and flag.

    Returns:
        The partition log and the record to stage on it.

    Raises:
        MetaError: the topic or partition is refused, or the checksum (unless -1 or absent)
            is wrong; answer ``put_failed(broker, topic, partition, opaque, str(error))``.
    """
    partition_log = broker.partition_for_put(topic, partition)
    crc = accepted_crc(data, checksum)
    if crc is None:
        raise MetaError(CHECKSUM_FAILURE)
    return partition_log, pack_record(data, crc, msg_id, flag)


def too_large(broker: BrokerServices, event: BodyTooLarge) -> bytes:
    """The 500 of a put whose body is over ``maxMessageSize``; counts the put."""
    assert event.topic is not None and event.partition is not None  # a put's event has both
    broker.counters.cmd_put += 1
    broker.counters.put_failed += 1
    broker.record_put_too_large(event.topic, event.partition, event.length)
    detail = (
        f"message body of {event.length} bytes is larger than "
        f"maxMessageSize {broker.config.message_bytes_max}"
    )
    return encode_result(
        500, failure_text(broker, event.topic, event.partition, detail), event.opaque
    )


def transactional_put_failed(broker: BrokerServices, error: MetaError, opaque: int) -> bytes:
    """The 500 of a put inside a transaction: the error's own text, as Java sends it."""
    broker.counters.put_failed += 1
    text = error.message if isinstance(error, XAError) else str(error)
    return encode_result(500, (text or "").encode(), opaque)


class ReplicationRole(Protocol):
    """What ``replicated_put`` uses of a samsa master (``meta.sync.samsa.SamsaMaster``)."""

    role: str  # "samsa"
    slave_uri: str  # meta://host:port of the slave, named in the slave-failed text

    def refusal(self, topic: str, partition: int) -> str | None: ...

    def replicate(
        self,
        topic: str,
        partition: int,
        partition_log: PartitionLog,
        record: bytes,
        done: Callable[[int | None, BaseException | None, str | None], None],
    ) -> None: ...

    def takes_run(self, topic: str, partition: int) -> bool: ...

    def ready(self, topic: str, partition: int) -> Any | None: ...

    def forward(
        self,
        state: Any,
        partition_log: PartitionLog,
        record: bytes,
        done: Callable[[int | None, BaseException | None, str | None], None],
    ) -> None: ...

    def replicate_run(
        self,
        topic: str,
        partition: int,
        partition_log: PartitionLog,
        parts: list,
        done: Callable[[int | None, BaseException | None, list], None],
    ) -> None: ...


def replicated_put(broker: BrokerServices, command: Put, connection) -> bytes | object:
    """The put of a samsa master (Java's, with its flaws corrected): every rule of ``take_put``
    first, then the role's refusal, then forward and stage; ``PENDING`` until both copies
    answered, then ``connection.respond`` with the 200 or the 500 (``cmd_put`` is counted
    by the caller)."""
    topic, opaque = command.topic, command.opaque
    role: ReplicationRole = broker.sync
    if command.tx_key is not None:
        return put_failed(broker, topic, command.partition, opaque, SYNC_TRANSACTIONS_REFUSED)
    data = command.data
    try:
        taken = take_put(broker, topic, command.partition, data, command.flag, command.checksum)
    except PutRefused as refused:
        return put_failed(broker, topic, refused.partition, opaque, refused.detail)
    partition, msg_id = taken.partition, taken.msg_id
    refusal = role.refusal(topic, partition)
    if refusal is not None:
        broker.counters.put_failed += 1
        broker.record_put_failed(topic, partition)
        return encode_result(500, refusal.encode(), opaque)
    stopped = taken.partition_log.failed
    if stopped is not None:  # the master's copy stopped: the slave gets nothing to store either
        return put_failed(broker, topic, partition, opaque, str(stopped))
    broker.record_put(topic, partition, len(data))
    done = replicated_done(
        broker, role, connection, topic, partition, msg_id, b"%d" % partition, b"%d" % opaque
    )
    role.replicate(topic, partition, taken.partition_log, taken.record, done)
    return PENDING


def replicated_done(
    broker: BrokerServices,
    role: ReplicationRole,
    connection,
    topic: str,
    partition: int,
    msg_id: int,
    partition_text: bytes,
    opaque_text: bytes,
) -> Callable[[int | None, BaseException | None, str | None], None]:
    """The ``done`` a taken put hands to ``role.replicate``: it answers the put once both
    copies are known, 200 when both are stored, else the master's or the slave's 500.
    ``partition_text`` and ``opaque_text`` are the put's partition and opaque as decimal
    ASCII (a put header's digits), which the 200 carries as they are."""

    def done(offset: int | None, error: BaseException | None, slave_failure: str | None) -> None:
        if error is not None:
            opaque = int(opaque_text)
            connection.respond(master_failed(error, broker, topic, partition, opaque))
        elif slave_failure is not None:
            opaque = int(opaque_text)
            connection.respond(slave_failed(broker, role, topic, partition, opaque, slave_failure))
        else:
            assert offset is not None  # the master stored it
            connection.respond(put_reply(msg_id, partition_text, offset, opaque_text))

    return done


def replicate_run(
    broker: BrokerServices,
    partition_log: PartitionLog,
    topic: str,
    partition_bytes: bytes,
    parts: list,
    ids: list[int],
    opaques: list[bytes],
    connection,
) -> None:
    """The replicated put for a run of taken puts of one partition (``put_run``'s batches on
    a samsa master, when ``broker.sync.takes_run``): forward and stage them together; each
    put is answered as ``replicated_put`` answers it, all in one ``respond_many``.

    Args:
        broker: the broker (its ``sync`` is a samsa master).
        partition_log: the partition's log.
        topic: the topic.
        partition_bytes: the partition as the put headers spelt it.
        parts: record header, body, header, body ... of the puts, in order.
        ids: their message ids.
        opaques: their opaques as header bytes.
        connection: where the replies go.
    """
    role: ReplicationRole = broker.sync
    partition = int(partition_bytes)
    count = len(opaques)
    bodies = parts[1::2]

    def done(offset: int | None, error: BaseException | None, codes: list) -> None:
        replies: list[bytes] = []
        append = replies.append
        reply_format, body_format = PUT_REPLY, PUT_REPLY_BODY
        for msg_id, opaque, body, code in zip(ids, opaques, bodies, codes, strict=True):
            if error is not None:
                append(master_failed(error, broker, topic, partition, int(opaque)))
            elif code != 200:
                append(slave_failed(broker, role, topic, partition, int(opaque), f"code {code}"))
            else:
                text = body_format % (msg_id, partition_bytes, offset)
                append(reply_format % (len(text), opaque, text))
            if offset is not None:
                offset += HEADER_SIZE + len(body)
        connection.respond_many(count, b"".join(replies))

    role.replicate_run(topic, partition, partition_log, parts, done)


def master_failed(
    error: BaseException, broker: BrokerServices, topic: str, partition: int, opaque: int
) -> bytes:
    """The 500 of a replicated put whose local append or fsync failed: Java's text, then
    what is in doubt (the slave may hold the put)."""
    if not isinstance(error, MetaError):
        log.error("append to %s-%d failed: %r", topic, partition, error)
    broker.counters.put_failed += 1
    broker.record_put_failed(topic, partition)
    text = f"Put message to [master '{broker.uri}'] [partition '{topic}-{partition}'] failed"
    text += MASTER_FAILED_DOUBT
    return encode_result(500, text.encode(), opaque)


def slave_failed(
    broker: BrokerServices,
    role: ReplicationRole,
    topic: str,
    partition: int,
    opaque: int,
    reason: str,
) -> bytes:
    """The 500 of a replicated put whose copy on the slave failed or is unknown (no answer
    in time): Java's text, then what is in doubt (the master stored the put)."""
    log.debug("put to %s-%d not replicated: %s", topic, partition, reason)
    broker.counters.put_failed += 1
    broker.record_put_failed(topic, partition)
    text = f"Put message to [slave '{role.slave_uri}'] [partition '{topic}-{partition}'] failed"
    text += SLAVE_FAILED_DOUBT
    return encode_result(500, text.encode(), opaque)
