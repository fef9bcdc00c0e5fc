"""The gregor slave's batch stage for runs of ``sync`` commands: ``handle_sync_run``.

What lives here: the handler of what ``Decoder.next_sync_run`` returns (consecutive ``sync``
commands of one read, as field tuples). It is to a gregor slave what ``put_run`` is to a
master: per sync only a CRC-32 of the body and a record header; each stretch of syncs to one
partition is admitted at once (``GregorSlave.admit_run``), staged as one entry (one append
and one flush decision) and acknowledged with one joined write of its replies. A read holding
one sync (a master replicating a synchronous producer's put) takes ``handle_single_sync``:
the same rules for a stretch of one, without the stretch's lists; the protocol calls it
itself for a read that is exactly one whole sync (``Decoder.one_sync``, no decoder buffer).

The rules are ``handlers.handle_sync``'s: ``puts.cached_target`` for the partition,
``puts.accepted_crcs`` for the checksums, ``puts.pack_header`` for the record (with the
master's id and flag), ``meta.protocol.put_reply`` for the replies, ``append_failed`` for a
failed write. Any sync the batch does not take (a partition that does not exist yet or that
refuses appends, a wrong checksum) goes to ``handle_sync`` itself, after what was gathered
before it was staged, so the store sees the same records in the same order.

Invariants (tests/server/test_sync_run.py checks them against ``handle_sync``): records,
offsets, replies and the admission counts are those of ``handle_sync`` called once per sync;
a stretch ends with the record that fills its segment, so rolls fall where they would.

Reactor thread only.
"""

from __future__ import annotations

from meta.protocol.codec import SyncFields
from meta.protocol.commands import Sync
from meta.protocol.put_reply import PUT_REPLY, PUT_REPLY_BODY, put_reply
from meta.server.handlers import handle_sync
from meta.server.puts import (
    RECORD_HEADER_BYTES,
    Targets,
    accepted_crc,
    accepted_crcs,
    append_failed,
    cached_target,
    pack_header,
)
from meta.server.replies import PENDING
from meta.server.services import BrokerServices
from meta.sync.gregor import POOL_BUSY, GregorSlave

_POOL_BUSY = POOL_BUSY.encode()
_BUSY_FORMAT = b"result 503 %d %s\r\n%s"
"""``encode_result(503, POOL_BUSY, opaque)`` with the opaque as header bytes."""


def handle_sync_run(
    broker: BrokerServices, syncs: list[SyncFields], connection, targets: Targets
) -> int:
    """Handle consecutive syncs of one read; return how many replies are still to come.

    Replies that are ready at once (503 for a full queue, ``handle_sync``'s immediate ones)
    go through ``connection.send_reply``; the others arrive later through
    ``connection.respond_many`` (one per staged stretch) or ``connection.respond``.
    ``targets`` is the connection's lookup cache (``puts.Targets``).
    """
    if len(syncs) == 1:  # nothing to batch (a synchronous producer's put): no lists either
        return handle_single_sync(broker, syncs[0], connection, targets)
    gregor: GregorSlave = broker.sync
    refusal = gregor.refusal(connection)
    if refusal is not None:  # not the master: nothing of the run is stored
        for fields in syncs:
            connection.send_reply(_refused(refusal, fields[4]))
        return 0
    pending = 0
    total = len(syncs)
    index = 0
    while index < total:
        topic_bytes, partition_bytes = syncs[index][0], syncs[index][1]
        stop = index + 1
        while stop < total and syncs[stop][1] == partition_bytes and syncs[stop][0] == topic_bytes:
            stop += 1
        target = cached_target(broker, targets, (topic_bytes, partition_bytes))
        if target is None:  # a new or failing partition: handle_sync decides, one by one
            pending += _handle_one(broker, syncs[index], connection)
            index += 1
            continue
        crcs = accepted_crcs(syncs, index, stop)
        taken = index + len(crcs)
        if taken > index:
            pending += _stage_stretch(broker, target, syncs, index, crcs, connection)
        if taken < stop:  # a wrong checksum: handle_sync answers it
            pending += _handle_one(broker, syncs[taken], connection)
            taken += 1
        index = taken
    return pending


def handle_single_sync(
    broker: BrokerServices, fields: SyncFields, connection, targets: Targets
) -> int:
    """The one sync of a read (``next_sync_run``'s or ``Decoder.one_sync``'s fields):
    ``_stage_stretch``'s rules for a stretch of one; anything else goes to ``handle_sync``.
    Returns 1 when its reply comes later, else 0."""
    topic_bytes, partition_bytes, flag, checksum, opaque, body, msg_id = fields
    # Typed: the compiled build calls the role's methods directly (syncs reach this module
    # only on a gregor slave).
    gregor: GregorSlave = broker.sync
    refusal = gregor.refusal(connection)
    if refusal is not None:  # not the master: nothing is stored
        connection.send_reply(_refused(refusal, opaque))
        return 0
    target = cached_target(broker, targets, (topic_bytes, partition_bytes))
    if target is None:
        return _handle_one(broker, fields, connection)
    crc = accepted_crc(body, checksum)
    if crc is None:  # a wrong checksum: handle_sync answers it
        return _handle_one(broker, fields, connection)
    partition_log, topic, partition = target
    broker.counters.cmd_put += 1
    size = len(body)
    waiting = gregor.admit_one(topic, partition, size, connection)
    if waiting is None:
        connection.send_reply(_BUSY_FORMAT % (len(_POOL_BUSY), opaque, _POOL_BUSY))
        return 0
    broker.record_put(topic, partition, size)

    def acknowledged(offset: int | None, error: BaseException | None) -> None:
        gregor.finished_one(waiting, size, error is None)
        if error is None:
            assert offset is not None  # the store appended the record
            connection.respond(put_reply(msg_id, partition_bytes, offset, opaque))
        else:
            connection.respond(append_failed(error, broker, topic, partition, int(opaque)))

    partition_log.stage(pack_header(size, crc, msg_id, flag) + body, acknowledged)
    return 1


def _refused(reason: str, opaque: bytes) -> bytes:
    """The 403 reply to a sync from a connection that is not the master's."""
    text = reason.encode()
    return b"result 403 %d %s\r\n%s" % (len(text), opaque, text)


def _stage_stretch(
    broker: BrokerServices,
    target: tuple,
    syncs: list[SyncFields],
    start: int,
    crcs: list[int],
    connection,
) -> int:
    """Admit and stage ``syncs[start:start + len(crcs)]`` (one partition, checksums right)
    in entries that end where a segment fills; a sync the queue cannot take gets 503.
    Returns the replies still to come."""
    partition_log, topic, partition = target
    gregor = broker.sync
    stretch = syncs[start : start + len(crcs)]
    broker.counters.cmd_put += len(stretch)
    admitted = gregor.admit_run(
        topic, partition, [len(fields[5]) for fields in stretch], connection
    )
    for fields in stretch[admitted:]:
        connection.send_reply(_BUSY_FORMAT % (len(_POOL_BUSY), fields[4], _POOL_BUSY))
    stat = broker.stat_enabled(topic)
    header_bytes = RECORD_HEADER_BYTES
    batch: list = []  # (fields, crc) of the entry being built
    size = 0
    room = partition_log.room_bytes
    for fields, crc in zip(stretch[:admitted], crcs, strict=False):
        batch.append((fields, crc))
        if stat:
            broker.record_put(topic, partition, len(fields[5]))
        size += header_bytes + len(fields[5])
        if size >= room:  # this record fills the segment: stage, roll
            _stage(broker, partition_log, topic, partition, batch, connection)
            batch, size, room = [], 0, partition_log.room_bytes
    if batch:
        _stage(broker, partition_log, topic, partition, batch, connection)
    return admitted


def _stage(
    broker: BrokerServices, partition_log, topic: str, partition: int, batch: list, connection
) -> None:
    """Stage ``batch`` (admitted syncs with their record checksums) as one entry; its ack
    ends their admission and answers them all in one write."""
    gregor = broker.sync
    parts: list = []  # record header, body, record header, body, ...
    append_part = parts.append
    header = pack_header
    size_total = 0
    for fields, crc in batch:
        body = fields[5]
        size_total += len(body)
        append_part(header(len(body), crc, fields[6], fields[2]))
        append_part(body)
    count = len(batch)
    partition_bytes = batch[0][0][1]

    def acknowledged(offset: int | None, error: BaseException | None) -> None:
        gregor.finished_run(topic, partition, count, size_total, error is None)
        replies: list[bytes] = []
        append = replies.append
        if error is None:
            assert offset is not None  # the store appended the entry
            body_format, reply_format = PUT_REPLY_BODY, PUT_REPLY
            header_bytes = RECORD_HEADER_BYTES
            for fields, _crc in batch:
                text = body_format % (fields[6], partition_bytes, offset)
                append(reply_format % (len(text), fields[4], text))
                offset += header_bytes + len(fields[5])
        else:
            for fields, _crc in batch:
                append(append_failed(error, broker, topic, partition, int(fields[4])))
        connection.respond_many(count, b"".join(replies))

    partition_log.stage(b"".join(parts), acknowledged, count)


def _handle_one(broker: BrokerServices, fields: SyncFields, connection) -> int:
    """``handle_sync`` for one sync of a run; returns 1 when its reply comes later, else 0."""
    topic_bytes, partition_bytes, flag, checksum, opaque, body, msg_id = fields
    command = Sync(
        topic_bytes.decode("ascii"), int(partition_bytes), bytes(body), flag, msg_id,
        int(opaque), checksum,
    )  # fmt: skip
    reply = handle_sync(broker, command, connection)
    if reply is PENDING:
        return 1
    if reply is not None:
        connection.send_reply(reply)
    return 0
