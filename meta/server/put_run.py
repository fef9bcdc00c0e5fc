"""The broker's batch fast path for runs of plain puts: ``handle_put_run``.

What lives here: the handler of what ``Decoder.next_put_run`` returns (consecutive plain puts
of one read, as field tuples) and ``_Batch``, the records of one run for one partition. It
does per put only what a put must: a CRC-32 of the body, a record header, and on its ack a
reply. Ids come in one block, each partition gets one staged entry (``PartitionLog.stage``
with a count) and each batch one ack, which formats its replies and hands them over at once.
The rules are those of ``meta.server.puts`` and the replies those of
``meta.protocol.put_reply``, bound to module names; checksums are checked per stretch of
puts by ``puts.accepted_crcs``, and a single put's by ``puts.accepted_crc``, the rule itself.
A read holding one put (a synchronous producer's) takes ``handle_single_put``: the same rules
for a stretch of one, without a batch (on a samsa master, the role's ``ready`` check first,
then its ``forward`` of the record, answered by ``puts.replicated_done``). Both answer
through ``RunConnection``: a put answered while its handler still runs (its partition refused
it at once) is a ready reply, not a pending one, so it never counts among the connection's
requests in flight.

Invariants (tests/server/test_put_run.py checks them against ``handle_put``):
    * The fast path only takes puts whose outcome is plain: the partition exists and takes
      appends, and the checksum is absent, -1 or right. Every other put (a new partition, an
      illegal topic, a wrong checksum, a failed partition, a slave broker) goes to
      ``handlers.handle_put``, which applies every rule of ``meta.server.puts``; batches
      built so far are staged first, so the store sees the same records in the same order.
    * Ids, offsets, records, segment rolls, counters and the reply bytes are exactly those of
      ``handle_put`` called once per put: ids are taken per stretch of fast puts before any
      later put's, a batch ends with the record that fills its segment, and partitions are
      staged in the order of their first put.

Reactor thread only.
"""

from __future__ import annotations

from meta.protocol.codec import PutFields
from meta.protocol.commands import Put
from meta.protocol.put_reply import PUT_REPLY, PUT_REPLY_BODY, put_reply
from meta.server.handlers import handle_put
from meta.server.puts import (
    RECORD_HEADER_BYTES,
    Targets,
    accepted_crc,
    accepted_crcs,
    append_failed,
    cached_target,
    pack_header,
    replicate_run,
    replicated_done,
)
from meta.server.replies import PENDING
from meta.server.services import BrokerServices
from meta.store.partition import PartitionLog

# The put rules of ``meta.server.puts`` and ``meta.protocol.put_reply``, bound for the loops.
_pack_header = pack_header
_PUT_REPLY = PUT_REPLY
_PUT_REPLY_BODY = PUT_REPLY_BODY
_RECORD_HEADER_BYTES = RECORD_HEADER_BYTES
_accepted_crcs = accepted_crcs


class RunConnection:
    """The connection as a run of puts (or one put) answers it while the run is handled.

    A put can be answered before its handler returns: its partition refuses appends (it
    stopped on a failed write or fsync) or fails under the stage that fills its segment, and
    the store then calls the put's ack at once. Such a reply is not pending, so it goes out
    as a ready reply (``send_reply``) and is counted in ``answered``; the caller's count of
    pending replies (``pending``) takes those out, so a refused put holds no place among the
    connection's requests in flight. Once the handler returned (``pending``), every later
    reply goes to the connection's ``respond`` / ``respond_many`` as usual.

    Attributes:
        connection: what answers the puts (``protocol.BrokerProtocol``, or an HTTP put).
        answered: replies given while the run was handled.
    """

    __slots__ = ("answered", "connection", "handling")

    def __init__(self, connection) -> None:
        self.connection = connection
        self.answered = 0
        self.handling = True

    def respond(self, reply: bytes | None) -> None:
        """One put's reply (``handle_put``'s ack)."""
        if self.handling:
            self.answered += 1
            if reply is not None:
                self.connection.send_reply(reply)
        else:
            self.connection.respond(reply)

    def respond_many(self, count: int, replies: bytes) -> None:
        """The joined replies of ``count`` puts (a batch's ack)."""
        if self.handling:
            self.answered += count
            if replies:
                self.connection.send_reply(replies)
        else:
            self.connection.respond_many(count, replies)

    def send_reply(self, reply: bytes) -> None:
        """A reply that is ready now."""
        self.connection.send_reply(reply)

    def pending(self, taken: int) -> int:
        """End of the handler: of ``taken`` puts whose replies were to come later, how many
        still are (those not answered while it ran)."""
        self.handling = False
        assert self.answered <= taken
        return taken - self.answered


class _Batch:
    """One partition's share of a run: joined records waiting to be staged, and their puts."""

    __slots__ = (
        "ids",
        "log",
        "opaques",
        "partition",
        "partition_bytes",
        "parts",
        "room",
        "size",
        "stat",
        "topic",
    )

    def __init__(
        self,
        broker: BrokerServices,
        partition_log,
        topic: str,
        partition: int,
        partition_bytes: bytes,
    ) -> None:
        self.log = partition_log
        self.topic = topic
        self.partition = partition
        self.partition_bytes = partition_bytes
        self.parts: list = []  # record header, body, record header, body, ...
        self.ids: list[int] = []
        self.opaques: list[bytes] = []
        self.stat = broker.stat_enabled(topic)
        self.size = 0
        self.room = partition_log.room_bytes

    def stage(self, broker: BrokerServices, connection) -> None:
        """Stage the records gathered so far as one entry; its ack answers every put."""
        parts, ids, opaques = self.parts, self.ids, self.opaques
        if not opaques:
            return
        self.parts, self.ids, self.opaques = [], [], []
        self.size = 0
        topic, partition, partition_bytes = self.topic, self.partition, self.partition_bytes
        count = len(opaques)
        bodies = parts[1::2]  # a record is its header and its body

        def acknowledged(offset: int | None, error: BaseException | None) -> None:
            replies: list[bytes] = []
            append = replies.append
            if error is None:
                assert offset is not None  # the store appended the batch
                body_format, reply_format = _PUT_REPLY_BODY, _PUT_REPLY
                header_bytes = _RECORD_HEADER_BYTES
                for msg_id, opaque, body in zip(ids, opaques, bodies, strict=True):
                    text = body_format % (msg_id, partition_bytes, offset)
                    append(reply_format % (len(text), opaque, text))
                    offset += header_bytes + len(body)
            else:
                for opaque in opaques:
                    append(append_failed(error, broker, topic, partition, int(opaque)))
            connection.respond_many(count, b"".join(replies))

        if broker.sync is None:
            self.log.stage(b"".join(parts), acknowledged, count)
        else:  # synchronous replication: the replicated rule, for the whole batch
            replicate_run(broker, self.log, topic, partition_bytes, parts, ids, opaques, connection)
        self.room = self.log.room_bytes


def _open_batch(
    broker: BrokerServices, targets: Targets, key: tuple[bytes, bytes]
) -> _Batch | None:
    """A batch for ``cached_target(key)``; None: ``handle_put`` decides."""
    target = cached_target(broker, targets, key)
    if target is None:
        return None
    partition_log, topic, partition = target
    if broker.sync is not None and not broker.sync.takes_run(topic, partition):
        return None  # a refusal, or a wait for the slave: handle_put decides
    return _Batch(broker, partition_log, topic, partition, key[1])


def handle_put_run(
    broker: BrokerServices, puts: list[PutFields], connection, targets: Targets
) -> int:
    """Handle consecutive plain puts of one read; return how many replies are still to come.

    Replies ready before this returns (``handle_put``'s immediate ones, and puts the store
    answered at once because their partition refused them: ``RunConnection``) are sent
    through ``connection.send_reply`` and not counted; the others arrive later through
    ``connection.respond_many`` (fast puts) or ``connection.respond`` (``handle_put``).
    ``targets`` is the caller's lookup cache (one per connection; partition logs are never
    replaced in a running store).
    """
    assert not broker.refuses_puts  # a slave answers every put 403: the caller never comes here
    if len(puts) == 1:  # nothing to batch (a synchronous producer): no batch either
        return handle_single_put(broker, puts, connection, targets)
    # A put answered before this returns (refused by its partition) is not pending.
    answering = RunConnection(connection)
    run = _Run(broker, answering, targets)
    total = len(puts)
    index = 0
    while index < total:
        stop = run.take_stretch(puts, index)
        if stop < total:
            # A put the fast path does not take: everything before it is staged first.
            run.stage_all()
            run.handle_one(puts[stop])
            stop += 1
        index = stop
    run.stage_all()
    return answering.pending(run.pending)


class _Run:
    """The state of one ``handle_put_run`` call."""

    __slots__ = ("batches", "broker", "connection", "order", "pending", "targets")

    def __init__(self, broker: BrokerServices, connection, targets: Targets) -> None:
        self.broker = broker
        self.connection = connection
        self.targets = targets
        self.batches: dict[tuple[bytes, bytes], _Batch] = {}
        # Batches holding records, in the order of their first record since they were last
        # staged: the order in which single puts would have reached the store's commit list.
        self.order: dict[_Batch, None] = {}
        self.pending = 0

    def take_stretch(self, puts: list[PutFields], index: int) -> int:
        """Add the longest stretch of fast puts from ``index``; return where it stops.

        First each put's batch (stopping at the first put whose partition the fast path does
        not take), then the CRCs (stopping at the first checksum ``accepted_crcs`` refuses),
        then the ids for the whole stretch, then the records.
        """
        batches, broker = self.batches, self.broker
        plan = []
        stop = index
        total = len(puts)
        while stop < total:
            topic_bytes, partition_bytes, _flag, _checksum, _opaque, _body = puts[stop]
            key = (topic_bytes, partition_bytes)
            batch = batches.get(key)
            if batch is None:
                batch = _open_batch(broker, self.targets, key)
                if batch is None:
                    break
                batches[key] = batch
            plan.append(batch)
            stop += 1
        crcs = _accepted_crcs(puts, index, stop)
        if len(crcs) < len(plan):
            del plan[len(crcs) :]
            stop = index + len(crcs)
        if not plan:
            return stop
        broker.counters.cmd_put += len(plan)
        ids = broker.ids.next_ids(len(plan))
        order = self.order
        header_bytes = _RECORD_HEADER_BYTES
        for batch, crc, msg_id, fields in zip(plan, crcs, ids, puts[index:stop], strict=True):
            body = fields[5]
            size = len(body)
            if not batch.opaques:
                order[batch] = None
            batch.parts += (_pack_header(size, crc, msg_id, fields[2]), body)
            batch.ids.append(msg_id)
            batch.opaques.append(fields[4])
            if batch.stat:
                broker.record_put(batch.topic, batch.partition, size)
            batch.size += header_bytes + size
            if batch.size >= batch.room:  # this record fills the segment: stage, roll
                batch.stage(broker, self.connection)
                del order[batch]
        self.pending += len(plan)
        return stop

    def stage_all(self) -> None:
        for batch in self.order:
            batch.stage(self.broker, self.connection)
        self.order.clear()

    def handle_one(self, fields: PutFields) -> None:
        """``handle_put`` for a put the fast path does not take (its rules decide)."""
        self.pending += _handle_one(self.broker, fields, self.connection)
        # handle_put may have created the partition or failed it: look again.
        self.batches.clear()


def _handle_one(broker: BrokerServices, fields: PutFields, connection) -> int:
    """``handle_put`` for one put of a run; returns 1 when its reply comes later, else 0."""
    topic_bytes, partition_bytes, flag, checksum, opaque, body = fields
    command = Put(
        topic_bytes.decode("ascii"), int(partition_bytes), bytes(body), flag, int(opaque), checksum
    )
    reply = handle_put(broker, command, connection)
    if reply is PENDING:
        return 1
    if reply is not None:
        connection.send_reply(reply)
    return 0


def handle_single_put(
    broker: BrokerServices, puts: list[PutFields], connection, targets: Targets
) -> int:
    """The one plain put of ``puts`` (a synchronous producer's, or an HTTP put): the fast
    path's rules for a stretch of one, without the batch; anything else goes to
    ``handle_put``. Returns 1 when its reply comes later through ``connection.respond``, 0
    when it was sent through ``connection.send_reply``. The caller answers a slave's puts
    itself (``refused_by_slave``)."""
    answering = RunConnection(connection)  # an answer before the return is not pending
    return answering.pending(_single_put(broker, puts[0], answering, targets))


def _single_put(broker: BrokerServices, fields: PutFields, connection, targets: Targets) -> int:
    """``handle_single_put`` without the count of replies answered at once."""
    topic_bytes, partition_bytes, flag, checksum, opaque, body = fields
    target = cached_target(broker, targets, (topic_bytes, partition_bytes))
    if target is None:
        return _handle_one(broker, fields, connection)
    # Typed, so that the compiled build calls the partition log's methods directly.
    partition_log: PartitionLog = target[0]
    topic: str = target[1]
    partition: int = target[2]
    sync = broker.sync
    state = None  # a samsa master's state of the partition (``ready``)
    if sync is not None:
        state = sync.ready(topic, partition)
        if state is None:  # a refusal, or a wait for the slave
            return _handle_one(broker, fields, connection)
    # The rule for one put, without a run's slice and list; by its own name, not a module
    # global's: a direct call when compiled.
    crc = accepted_crc(body, checksum)
    if crc is None:
        return _handle_one(broker, fields, connection)
    broker.counters.cmd_put += 1
    msg_id = broker.ids.next_id()
    size = len(body)
    broker.record_put(topic, partition, size)
    record = _pack_header(size, crc, msg_id, flag) + body
    if sync is not None:  # synchronous replication: the replicated rule
        done = replicated_done(
            broker, sync, connection, topic, partition, msg_id, partition_bytes, opaque
        )
        sync.forward(state, partition_log, record, done)
        return 1

    def acknowledged(offset: int | None, error: BaseException | None) -> None:
        if error is None:
            assert offset is not None  # the store appended the record
            # By its own name: a direct call when compiled, with the formats built natively.
            connection.respond(put_reply(msg_id, partition_bytes, offset, opaque))
        else:
            connection.respond(append_failed(error, broker, topic, partition, int(opaque)))

    partition_log.stage(record, acknowledged)
    return 1
