"""Handlers of the ``transaction`` command and of puts inside a transaction.

``handle_transaction(broker, command, connection)`` and ``handle_transactional_put`` follow
the contract of ``meta.server.handlers``: they return reply bytes, None (END gets no reply at
all), or ``PENDING`` when the reply waits for the journal's sync or the commit's appends.
``handle_tx_put_run`` answers a run of one transaction's puts (``Decoder.next_put_run``)
with the replies ``handle_transactional_put`` gives each, in one call.
BEGIN counts the transaction against the connection's peer address (``meta.tx.branch_limits``:
``maxTxPerAddress`` and ``maxTxBytesPerAddress``). Replies and error bodies are Java's: 200
with an empty body, ``0``/``3`` for PREPARE, the RECOVER keys joined by CRLF; XA failures as
``500 XAException:code=N,msg=...``, other failures as 500 with the plain text. Counters go
up before the operation runs, so failures count too.

With synchronous replication (``broker.sync`` set: a samsa master or a gregor slave) there
are no transactions: every ``transaction`` command but END gets 500
``Unsupported <method>``, a put inside a transaction gets 500
``Transactions are not supported with synchronous replication`` on a samsa master, and 403
on a gregor slave, which refuses every put.

``HEURISTIC_COMMIT`` / ``HEURISTIC_ROLLBACK`` are this project's stand-in for Java's JMX
operations (used by ``meta-admin tx``); they are accepted only from the broker's own host.

Reactor thread only.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from meta.errors import MetaError, TransactionError, XAError
from meta.log_limits import PROTOCOL_WARNINGS
from meta.operator_access import is_operator_peer
from meta.protocol.codec import PutFields, encode_result
from meta.protocol.commands import Put, Transaction
from meta.protocol.put_reply import (
    PUT_REPLY,
    PUT_REPLY_BODY,
    PUT_REPLY_JOINED,
    TRANSACTIONAL_OFFSET,
    encode_put_reply,
)
from meta.protocol.transaction_key import CANONICAL_LOCAL_KEY, parse_transaction_key
from meta.protocol.xa import XAER_NOTA, format_xa_error
from meta.server.puts import (
    CHECKSUM_FAILURE,
    RECORD_HEADER_BYTES,
    TRANSACTION_NEEDS_PARTITION,
    Targets,
    accepted_crc,
    accepted_crcs,
    cached_target,
    pack_header,
    pack_record,
    refused_by_slave,
    transactional_put_failed,
)
from meta.server.replies import PENDING, Reply
from meta.server.services import BrokerServices
from meta.tx.branch_limits import client_address

log = logging.getLogger("meta.server")

# The put rules of ``meta.server.puts`` and ``meta.protocol.put_reply``, bound for the runs.
_pack_header = pack_header
_PUT_REPLY = PUT_REPLY
_PUT_REPLY_BODY = PUT_REPLY_BODY
_PUT_REPLY_JOINED = PUT_REPLY_JOINED

OK = b""

UNSUPPORTED_METHODS = {
    "BEGIN": "beginTransaction",
    "PREPARE": "prepareTransaction",
    "COMMIT_ONE_PHASE": "commitTransaction",
    "COMMIT_TWO_PHASE": "commitTransaction",
    "ROLLBACK": "rollbackTransaction",
    "FORGET": "forgetTransaction",
    "RECOVER": "getPreparedTransactions",
    "HEURISTIC_COMMIT": "heuristicCommit",
    "HEURISTIC_ROLLBACK": "heuristicRollback",
}
"""Transaction type -> the Java method a samsa master or gregor slave names in its 500
``Unsupported <method>`` (Java's names; the heuristic types are this project's own)."""

SAMSA_TRANSACTION_REFUSED = b"Transactions are not supported with synchronous replication"


def refused_by_samsa(broker: BrokerServices, opaque: int) -> bytes:
    """The 500 of a put inside a transaction on a samsa master; counts the failure (Java
    stores such a put at once, as a plain put)."""
    broker.counters.put_failed += 1
    return encode_result(500, SAMSA_TRANSACTION_REFUSED, opaque)


@functools.lru_cache(maxsize=4096)
def canonical_key(text: str) -> str:
    """The key as Java writes it back (``TX:s:01`` is ``TX:s:1``, hex in lower case).

    Java looks transactions up by the parsed key, so two spellings name one transaction.
    The decoder has already checked the grammar.
    """
    if CANONICAL_LOCAL_KEY.fullmatch(text) is not None:
        return text
    parsed = parse_transaction_key(text)
    return "null" if parsed is None else parsed.key()


def handle_transactional_put(broker: BrokerServices, command: Put, connection) -> Reply:
    """Journal one message of a transaction; 200 ``<msgId> <partition> -1``."""
    broker.counters.cmd_put += 1
    partition = command.partition
    opaque = command.opaque
    if broker.refuses_puts:
        return refused_by_slave(broker, command.topic, partition, opaque)
    if broker.sync is not None:
        return refused_by_samsa(broker, opaque)
    try:
        transaction = broker.transactions.check_put(canonical_key(command.tx_key), connection)
        if partition == -1:
            raise TransactionError(TRANSACTION_NEEDS_PARTITION)
        msg_id = _put_into(
            broker, transaction, command.topic, partition, command.data, command.flag,
            command.checksum,
        )  # fmt: skip
    except MetaError as error:
        return transactional_put_failed(broker, error, opaque)
    return encode_put_reply(msg_id, partition, TRANSACTIONAL_OFFSET, opaque)


def handle_tx_put_run(
    broker: BrokerServices, key: str, puts: list[PutFields], connection, lookups: Targets
) -> bytes:
    """The replies of ``handle_transactional_put`` for consecutive puts of one transaction
    (``Decoder.next_put_run``), joined. The transaction is looked up once: nothing between
    the puts can change what that finds (a failed put leaves the transaction as it was).
    When every put will be taken (existing partitions accepted, checksums right, within the
    byte bound), ids come in one block and each partition's records join the transaction at
    once; otherwise each put goes through ``_put_into`` in order, as one at a time.
    ``lookups`` is the connection's partition cache (``meta.server.puts.Targets``)."""
    broker.counters.cmd_put += len(puts)
    if broker.sync is not None:
        return b"".join(refused_by_samsa(broker, int(fields[4])) for fields in puts)
    transactions = broker.transactions
    try:
        transaction = transactions.check_put(canonical_key(key), connection)
    except MetaError as error:
        return b"".join(transactional_put_failed(broker, error, int(fields[4])) for fields in puts)
    crcs = accepted_crcs(puts, 0, len(puts))
    targets = _checked_run(broker, transaction, puts, crcs, lookups)
    if targets is None:
        return _one_by_one(broker, transaction, puts)
    ids = broker.ids.next_ids(len(puts))
    records: dict[tuple[bytes, bytes], list[bytes]] = {name: [] for name in targets}
    replies = []
    first, last = b"%d" % ids[0], b"%d" % ids[-1]
    if len(first) == len(last) and len(targets) == 1:  # every reply body has one length
        ((name, _target),) = targets.items()
        parts = records[name]
        text_length = len(first) + len(name[1]) + len(b"%d" % TRANSACTIONAL_OFFSET) + 2
        for (_t, partition_bytes, flag, _c, opaque, body), crc, msg_id in zip(
            puts, crcs, ids, strict=True
        ):
            parts += (_pack_header(len(body), crc, msg_id, flag), body)
            replies.append(
                _PUT_REPLY_JOINED
                % (text_length, opaque, msg_id, partition_bytes, TRANSACTIONAL_OFFSET)
            )
    else:
        for (topic_bytes, partition_bytes, flag, _c, opaque, body), crc, msg_id in zip(
            puts, crcs, ids, strict=True
        ):
            records[topic_bytes, partition_bytes] += (
                _pack_header(len(body), crc, msg_id, flag),
                body,
            )
            text = _PUT_REPLY_BODY % (msg_id, partition_bytes, TRANSACTIONAL_OFFSET)
            replies.append(_PUT_REPLY % (len(text), opaque, text))
    for name, (topic, partition, stat) in targets.items():
        parts = records[name]
        transactions.put(transaction, topic, partition, b"".join(parts), len(parts) // 2)
        if stat:
            for body in parts[1::2]:
                broker.record_put(topic, partition, len(body))
    return b"".join(replies)


def _checked_run(
    broker: BrokerServices, transaction, puts: list[PutFields], crcs: list[int], lookups: Targets
) -> dict | None:
    """The run's targets, ``{(topic, partition) bytes: (topic, partition, stat)}``, when
    every put of the run will be taken (into ``transaction``), else None: ``_one_by_one``
    then decides each put (and creates a new partition, as ``_put_into`` does). ``crcs`` are
    ``puts.accepted_crcs``'s: shorter than ``puts`` when a checksum refuses a put."""
    if len(crcs) < len(puts):
        return None
    size = RECORD_HEADER_BYTES * len(puts)
    targets: dict[tuple[bytes, bytes], tuple[str, int, bool]] = {}
    for topic_bytes, partition_bytes, _f, _c, _o, body in puts:
        size += len(body)
        name = (topic_bytes, partition_bytes)
        if name not in targets:
            target = cached_target(broker, lookups, name)
            if target is None:
                return None
            _log, topic, partition = target
            targets[name] = (topic, partition, broker.stat_enabled(topic))
    if not broker.transactions.has_room(transaction, size):
        return None
    return targets


def _one_by_one(broker: BrokerServices, transaction, puts: list[PutFields]) -> bytes:
    replies = []
    for topic, partition, flag, checksum, opaque, body in puts:
        try:
            msg_id = _put_into(
                broker, transaction, topic.decode("ascii"), int(partition), body, flag, checksum
            )
        except MetaError as error:
            replies.append(transactional_put_failed(broker, error, int(opaque)))
            continue
        text = _PUT_REPLY_BODY % (msg_id, partition, TRANSACTIONAL_OFFSET)
        replies.append(_PUT_REPLY % (len(text), opaque, text))
    return b"".join(replies)


def _put_into(
    broker: BrokerServices, transaction, topic: str, partition: int, data, flag, checksum
) -> int:
    """Add one message to ``transaction``; its message id. Raises ``MetaError``."""
    if (topic, partition) not in transaction.batches:  # checked once per transaction
        broker.partition_for_put(topic, partition)
    crc = accepted_crc(data, checksum)
    if crc is None:
        raise TransactionError(CHECKSUM_FAILURE)
    msg_id = broker.ids.next_id()
    broker.transactions.put(transaction, topic, partition, pack_record(data, crc, msg_id, flag))
    broker.record_put(topic, partition, len(data))
    return msg_id


def handle_transaction(broker: BrokerServices, command: Transaction, connection) -> Reply:
    """BEGIN, PREPARE, COMMIT_*, ROLLBACK, RECOVER, FORGET and END.

    On a samsa master or a gregor slave every type but END gets 500 ``Unsupported <method>``
    with Java's method name; END gets no reply, as everywhere.
    """
    type_ = command.type
    if type_ == "END":
        return None
    if broker.sync is not None:
        method = UNSUPPORTED_METHODS.get(type_, type_)
        return encode_result(500, f"Unsupported {method}".encode(), command.opaque)
    key = canonical_key(command.tx_key)
    counters = broker.counters
    transactions = broker.transactions
    opaque = command.opaque
    try:
        if type_ == "BEGIN":
            counters.tx_begin += 1
            if key.startswith("XID:"):
                counters.tx_xa_begin += 1
            transactions.begin(key, connection, command.timeout, _client_address(connection))
            return encode_result(200, OK, opaque)
        if type_ == "RECOVER":
            keys = transactions.recover_keys(command.unique_qualifier)
            return encode_result(200, "\r\n".join(keys).encode(), opaque)
        if type_ == "PREPARE":
            return _later(connection, opaque, lambda done: transactions.prepare(key, done))
        if type_ in ("COMMIT_ONE_PHASE", "COMMIT_TWO_PHASE"):
            counters.tx_commit += 1
            one_phase = type_ == "COMMIT_ONE_PHASE"
            return _later(
                connection,
                opaque,
                lambda done: transactions.commit(key, connection, one_phase, done),
            )
        if type_ == "ROLLBACK":
            counters.tx_rollback += 1
            return _later(
                connection, opaque, lambda done: transactions.rollback(key, connection, done)
            )
        if type_ == "FORGET":
            if not key.startswith("XID:"):
                raise XAError(XAER_NOTA, f"Transaction '{key}' is not an XA transaction.")
            return _later(connection, opaque, lambda done: transactions.forget(key, done))
        return _heuristic(broker, command, connection)
    except MetaError as error:
        return _error_reply(error, opaque)


def _client_address(connection) -> str | None:
    """The address the connection's transactions count against (``maxTxPerAddress``)."""
    return client_address(getattr(connection.transport.getPeer(), "host", None))


def _heuristic(broker: BrokerServices, command: Transaction, connection) -> Reply:
    peer = connection.transport.getPeer()
    local = connection.transport.getHost()
    if not is_operator_peer(getattr(peer, "host", ""), getattr(local, "host", "")):
        host, text = getattr(peer, "host", "?"), "refused %s of %s from %s"
        PROTOCOL_WARNINGS.warn(log, host, text, command.type, command.tx_key, peer)
        raise TransactionError(f"{command.type} is accepted only from the broker's own host.")
    commit = command.type == "HEURISTIC_COMMIT"
    log.warning("operator at %s: %s %s", getattr(peer, "host", peer), command.type, command.tx_key)
    transactions = broker.transactions
    return _later(
        connection,
        command.opaque,
        lambda done: transactions.heuristic(canonical_key(command.tx_key), commit, done),
    )


def _later(connection, opaque: int, start: Callable) -> Reply:
    """Run ``start(done)``; its reply is returned when ``done`` came at once, else PENDING."""
    ready: list[bytes] = []
    waiting = [False]

    def done(result, error: BaseException | None) -> None:
        reply = _error_reply(error, opaque) if error is not None else _success(result, opaque)
        if waiting[0]:
            connection.respond(reply)
        else:
            ready.append(reply)

    start(done)
    if ready:
        return ready[0]
    waiting[0] = True
    return PENDING


def _success(result, opaque: int) -> bytes:
    return encode_result(200, OK if result is None else b"%d" % result, opaque)


def _error_reply(error: BaseException, opaque: int) -> bytes:
    if isinstance(error, XAError):
        return encode_result(500, format_xa_error(error.error_code, error.message), opaque)
    if not isinstance(error, MetaError):
        log.error("transaction command failed: %r", error)
    return encode_result(500, str(error).encode(), opaque)
