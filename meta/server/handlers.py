"""One function per command: ``handle_<command>(broker, command, connection) -> Reply``.

``broker`` is what ``meta.server.services.BrokerServices`` names. ``HANDLERS`` maps a
command's dispatch key (``dispatch_key``: its class, or ``TransactionalPut`` for a put that
names a transaction) to its handler; the rules of a put live in ``meta.server.puts``.

A reply is encoded bytes, a ``FileReply`` (a value frame whose body is streamed from a segment
file by the protocol), None (no reply: ``transaction END`` and dropped frames), or
``PENDING``: the handler will call ``connection.respond(reply)`` exactly once later (a put
waiting for its write and fsync, a long-polling get). Handlers never touch a transport: the
protocol decides what to write and when (STYLE 2, 17). Puts use a plain callback rather than
a Deferred because a Deferred costs more than the rest of the put path (measured 3.4 us).
Status codes, texts and counters are Java's, except where docs/compatibility.md says.

Reactor thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from meta.errors import MetaError
from meta.protocol.codec import encode_result, encode_value_header
from meta.protocol.commands import (
    LONG_MAX,
    BodyTooLarge,
    Data,
    Get,
    Offset,
    Put,
    Result,
    Stats,
    Sync,
    Transaction,
    Version,
)
from meta.protocol.put_reply import encode_put_reply
from meta.server.puts import (
    PutRefused,
    append_failed,
    put_failed,
    refused_by_slave,
    replicated_put,
    take_put,
    take_sync,
    too_large,
)
from meta.server.replies import PENDING, FileReply, Reply
from meta.server.services import BrokerServices
from meta.server.tx_handlers import handle_transaction, handle_transactional_put
from meta.sync.gregor import POOL_BUSY
from meta.sync.peers import HELLO_ITEM

log = logging.getLogger("meta.server")

NO_PROCESSOR = "未注册请求处理器，请求处理器类为com.taobao.metamorphosis.network."


def not_exists_text(topic: str, partition: int) -> bytes:
    return f"The topic `{topic}` in partition `{partition}` is not exists".encode()


def handle_put(broker: BrokerServices, command: Put, connection) -> Reply:
    """Stage one plain put; the reply is sent when the store acknowledges it (compatibility.md).

    What a put accepts and what it is answered are ``meta.server.puts``'s rules; a put that
    names a transaction is dispatched to ``tx_handlers.handle_transactional_put`` instead.
    """
    broker.counters.cmd_put += 1
    topic = command.topic
    partition = command.partition
    opaque = command.opaque
    if broker.refuses_puts:
        return refused_by_slave(broker, topic, partition, opaque)
    sync = broker.sync
    if sync is not None and sync.role == "samsa":
        return replicated_put(broker, command, connection)
    data = command.data
    try:
        taken = take_put(broker, topic, partition, data, command.flag, command.checksum)
    except PutRefused as refused:
        return put_failed(broker, topic, refused.partition, opaque, refused.detail)
    partition = taken.partition
    msg_id = taken.msg_id
    broker.record_put(topic, partition, len(data))

    def acknowledged(offset: int | None, error: BaseException | None) -> None:
        if error is None:
            connection.respond(encode_put_reply(msg_id, partition, offset, opaque))
        else:
            connection.respond(append_failed(error, broker, topic, partition, opaque))

    taken.partition_log.stage(taken.record, acknowledged)
    return PENDING


def handle_body_too_large(broker: BrokerServices, event: BodyTooLarge, connection) -> Reply:
    """A put over ``maxMessageSize`` gets 500 (compatibility.md), and so does a sync on a
    gregor slave (elsewhere 503: no sync processor); other frames are dropped."""
    if event.command == "put":
        return too_large(broker, event)
    if event.command == "sync":
        if broker.sync is not None and broker.sync.role == "gregor":
            return too_large(broker, event)
        return _no_processor("SyncCommand", event.opaque)
    return None


def handle_get(broker: BrokerServices, command: Get, connection) -> Reply:
    """Serve a slice of one segment, or the 301/400/404 answers of a Java broker's get."""
    broker.counters.cmd_get += 1
    partition_log = broker.store.get(command.topic, command.partition)
    if partition_log is None:
        broker.counters.get_miss += 1
        return encode_result(404, not_exists_text(command.topic, command.partition), command.opaque)
    if command.max_size <= 0:
        text = f"Bad request,invalid max size:{command.max_size}".encode()
        return encode_result(400, text, command.opaque)
    broker.record_get(command.topic, command.group)
    limit = min(broker.config.transfer_bytes_max, command.max_size)
    found = partition_log.slice(command.offset, limit)
    if found.kind == "data":
        header = encode_value_header(found.length, command.opaque)
        return FileReply(header, found.segment, found.position, found.length)
    if command.max_wait_ms and found.kind == "after" and command.offset == found.offset:
        # Long polling: hold the get until data arrives at this offset or the wait ends.
        def woken() -> None:
            connection.respond(_get_after_wait(broker, command, partition_log, limit))

        broker.wait_for_data(partition_log, command.max_wait_ms / 1000, woken)
        return PENDING
    return _get_out_of_range(broker, command, found.kind, found.offset)


def _get_after_wait(broker: BrokerServices, command: Get, partition_log, limit: int) -> Reply:
    found = partition_log.slice(command.offset, limit)
    if found.kind == "data":
        header = encode_value_header(found.length, command.opaque)
        return FileReply(header, found.segment, found.position, found.length)
    return _get_out_of_range(broker, command, found.kind, found.offset)


def _get_out_of_range(broker: BrokerServices, command: Get, kind: str, answer: int) -> bytes:
    counters = broker.counters
    counters.get_miss += 1
    counters.get_failed += 1
    broker.record_get_miss(command.topic, command.group)
    moved = broker.config.update_consumer_offsets or command.offset == LONG_MAX
    if kind == "before" or (command.offset > answer and moved):
        # Java counts a get answered 301 as an offset command too; ``get_moved`` says how
        # many of ``cmd_offset`` these are (the metrics count them as gets only).
        counters.cmd_offset += 1
        counters.get_moved += 1
        return encode_result(301, b"%d" % answer, command.opaque)
    text = b"Could not find message at position %d" % command.offset
    return encode_result(404, text, command.opaque)


def handle_offset(broker: BrokerServices, command: Offset, connection) -> Reply:
    """The start of the segment holding ``offset``, clamped to the partition."""
    broker.counters.cmd_offset += 1
    partition_log = broker.store.get(command.topic, command.partition)
    if partition_log is None:
        return encode_result(404, not_exists_text(command.topic, command.partition), command.opaque)
    broker.record_offset(command.topic, command.group)
    return encode_result(200, b"%d" % partition_log.nearest_offset(command.offset), command.opaque)


def handle_version(broker: BrokerServices, command: Version, connection) -> Reply:
    return encode_result(200, broker.version.encode(), command.opaque)


def handle_stats(broker: BrokerServices, command: Stats, connection) -> Reply:
    sync = broker.sync
    if sync is not None and sync.role == "gregor" and command.item.startswith(HELLO_ITEM):
        code, body = sync.hello(command.item, connection)  # a samsa master's sync-hello
        return encode_result(code, body, command.opaque)
    code, body = broker.render_stats(command.item)
    return encode_result(code, body, command.opaque)


def _no_processor(class_name: str, opaque: int) -> bytes:
    return encode_result(503, (NO_PROCESSOR + class_name).encode(), opaque)


def handle_sync(broker: BrokerServices, command: Sync, connection) -> Reply:
    """Store a message pushed by a samsa master, on a gregor slave.

    The record keeps the master's id and flag; the reply is a put reply with the master's id
    and this slave's offset, sent after the fsync this slave's flush mode requires. A full
    partition queue gets 503 (``meta.sync.gregor``). Any other broker has no sync processor
    and answers 503.
    """
    gregor = broker.sync
    if gregor is None or gregor.role != "gregor":
        return _no_processor("SyncCommand", command.opaque)
    refusal = gregor.refusal(connection)
    if refusal is not None:  # not the master (meta.sync.peers): nothing is stored
        return encode_result(403, refusal.encode(), command.opaque)
    broker.counters.cmd_put += 1
    topic, partition, opaque, data = command.topic, command.partition, command.opaque, command.data
    size = len(data)
    if not gregor.admit(topic, partition, size, connection):
        return encode_result(503, POOL_BUSY.encode(), opaque)
    try:
        partition_log, record = take_sync(
            broker, topic, partition, data, command.flag, command.msg_id, command.checksum
        )
    except MetaError as error:
        gregor.finished(topic, partition, size, False)
        return put_failed(broker, topic, partition, opaque, str(error))
    broker.record_put(topic, partition, size)
    msg_id = command.msg_id

    def acknowledged(offset: int | None, error: BaseException | None) -> None:
        gregor.finished(topic, partition, size, error is None)
        if error is None:
            connection.respond(encode_put_reply(msg_id, partition, offset, opaque))
        else:
            connection.respond(append_failed(error, broker, topic, partition, opaque))

    partition_log.stage(record, acknowledged)
    return PENDING


def handle_reply_frame(broker: BrokerServices, command: Result | Data, connection) -> Reply:
    """Replies sent to the broker match no request of ours; they are dropped."""
    return None


class TransactionalPut:
    """The dispatch key of a ``Put`` that names a transaction (``Put.tx_key`` set)."""


def dispatch_key(command: object) -> type:
    """The ``HANDLERS`` key of a decoded command (callers on hot paths inline it)."""
    kind = command.__class__
    if kind is Put and command.tx_key is not None:  # type: ignore[attr-defined]
        return TransactionalPut
    return kind


Handler = Callable[[BrokerServices, Any, Any], Reply]

HANDLERS: dict[type, Handler] = {
    Put: handle_put,
    TransactionalPut: handle_transactional_put,
    Get: handle_get,
    Offset: handle_offset,
    Version: handle_version,
    Stats: handle_stats,
    Transaction: handle_transaction,
    Sync: handle_sync,
    Result: handle_reply_frame,
    Data: handle_reply_frame,
    BodyTooLarge: handle_body_too_large,
}
