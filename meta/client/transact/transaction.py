"""Local transactions of a ``MessageProducer``, as in Java.

``producer.begin_transaction(timeout)`` binds a ``LocalTransaction`` to the calling thread
without any network call (Java semantics). The first ``send_message`` of that thread selects
a partition normally, sends ``BEGIN`` with the key ``TX:<sessionId>:<n>`` synchronously to the
partition's broker, and pins the transaction to that broker: later sends select, with the
producer's selector, among that broker's partitions only, so every put of the transaction
travels on one connection (a broker keeps local transactions per connection). ``commit()``
sends ``COMMIT_ONE_PHASE``, ``rollback()`` sends ``ROLLBACK``; both unbind the transaction
from the thread first, so the thread is free again even when the command fails.

Departures from Java, on purpose:

* ``commit()`` / ``rollback()`` of a transaction that sent nothing (so nothing was begun on a
  broker) just unbind it; Java raises "No transaction is started" there.
* A ``BEGIN`` that fails does not pin the transaction: the next send begins it again (with the
  same key), instead of sending puts a broker never heard of (Java's quirk).
* ``send_message_async`` refuses to run inside a transaction (``TransactionError``); Java's
  callback send silently sends outside it.

Also here, shared with ``meta.client.produce.xa``: the transaction identifiers, that is session ids
(``<localHost>-<startupMillis>-<seq>``, never containing ``:`` because the key grammar splits
on it), the per-process local transaction counter (1, 2, ... wrapping within the 32-bit range
the broker parses), the XA ``Xid`` with its ``XID:`` key and the unique-qualifier rule; and
``request_transaction``, the blocking request/reply helper.

Invariants: a thread has at most one local transaction per producer; a transaction is pinned
to exactly one broker once its ``BEGIN`` succeeded and never moves.

Thread-safety: a ``LocalTransaction`` belongs to the thread that began it; ``commit`` and
``rollback`` from another thread raise ``TransactionError``. The counters are thread-safe.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from meta.client.cluster import BrokerAddress, local_host
from meta.errors import (
    ClientError,
    LocalProtocolError,
    MetaError,
    OperationTimeoutError,
    TransactionError,
)
from meta.protocol.commands import Result, Transaction
from meta.protocol.transaction_key import (
    INT_MAX,
    INT_MIN,
    LocalTransactionId,
    XATransactionId,
    parse_transaction_key,
)

if TYPE_CHECKING:
    from meta.client.factory import ConnectionPool
    from meta.client.net.pipeline import PipelinedConnection

log = logging.getLogger("meta.client")

DEFAULT_TRANSACTION_REQUEST_TIMEOUT_S = 5.0
"""Java's default ``transactionRequestTimeout``: the bound on every transaction command."""

BEGIN = "BEGIN"
COMMIT_ONE_PHASE = "COMMIT_ONE_PHASE"
COMMIT_TWO_PHASE = "COMMIT_TWO_PHASE"
ROLLBACK = "ROLLBACK"

_STARTUP_MS = int(time.time() * 1000)
_session_numbers = itertools.count(1)
_local_numbers = itertools.count(1)
_counter_lock = threading.Lock()
_host: list[str] = []  # local_host() asks the resolver: computed once, on first use


def new_session_id() -> str:
    """Return a fresh producer session id ``<localHost>-<startupMillis>-<seq>``.

    An IPv6 host loses its brackets and has its ``:`` replaced by ``.``: a ``:`` would break
    the ``TX:<sessionId>:<n>`` key, which the broker splits on ``:``.
    """
    with _counter_lock:
        if not _host:
            _host.append(local_host().strip("[]").replace(":", "."))
        sequence = next(_session_numbers)
    return f"{_host[0]}-{_STARTUP_MS}-{sequence}"


def next_local_number() -> int:
    """Return the next local transaction number: 1, 2, ... back to 1 after ``INT_MAX``."""
    with _counter_lock:
        return (next(_local_numbers) - 1) % INT_MAX + 1


def request_transaction(
    connection: PipelinedConnection, command: Transaction, timeout_s: float
) -> Result:
    """Send one transaction command and wait (bounded) for its ``result`` frame.

    Raises:
        OperationTimeoutError: no reply within ``timeout_s``.
        ClientError: the connection failed, or the reply was not a ``result`` frame.
    """
    future = connection.request(command, timeout_s)
    try:
        reply = future.result(timeout_s)
    except FutureTimeoutError:
        if future.cancel():
            raise OperationTimeoutError(
                f"no reply to {command.type} of {command.tx_key} from broker "
                f"{connection.name} within {timeout_s} s"
            ) from None
        reply = future.result()  # Completed at this very moment.
    if not isinstance(reply, Result):
        raise ClientError(f"unexpected value frame in reply to {command.type} of {command.tx_key}")
    return reply


def send_one_way(connection: PipelinedConnection, command: Transaction, timeout_s: float) -> None:
    """Send a command that gets no reply (``END``): queue it, then drop its table entry.

    Cancelling the still-pending future removes its opaque at once; the bytes are queued
    already, so they still leave, and nothing waits for an answer that never comes.
    """
    connection.request(command, timeout_s).cancel()


def reply_text(reply: Result) -> str:
    return reply.body.decode("utf-8", "replace")


def check_transaction_timeout(timeout: Any) -> int:
    """Return ``timeout`` (whole seconds, >= 0; 0 means none) or raise ``ClientError``."""
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0:
        raise ClientError(f"a transaction timeout is a whole number of seconds >= 0: {timeout!r}")
    return timeout


class ThreadTransactions(threading.local):
    """A producer's per-thread transaction slots: the local transaction and the XA resource.

    ``xa`` is a ``meta.client.transact.xa_resource.XAResource`` (typed loosely: that module
    builds on this one).
    """

    def __init__(self) -> None:
        self.local: LocalTransaction | None = None
        self.xa: Any = None

    def active(self) -> Any:
        """The branch this thread's sends join: the local transaction, else an XA resource
        whose xid this thread started, else None."""
        if self.local is not None:
            return self.local
        xa = self.xa
        if xa is not None and xa.associated_thread == threading.get_ident():
            return xa
        return None


class LocalTransaction:
    """One thread's local transaction on one producer; also a context manager.

    ``with producer.begin_transaction(timeout=10): ...`` commits when the block ends
    normally and rolls back (then re-raises) when it raises. A failing rollback there is
    logged, so the block's own exception is the one that propagates.

    Args:
        pool: the producer's connection pool.
        slots: the producer's per-thread slots (this transaction is ``slots.local``).
        session_id: the producer's session id.
        timeout: seconds sent with ``BEGIN`` (0: none).
        request_timeout_s: returns the producer's current transaction request timeout.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        slots: ThreadTransactions,
        session_id: str,
        timeout: int,
        request_timeout_s: Callable[[], float],
    ) -> None:
        self._pool = pool
        self._slots = slots
        self._thread = threading.get_ident()
        self.session_id = session_id
        self.timeout = timeout
        self._request_timeout_s = request_timeout_s
        self.key: str | None = None
        self.address: BrokerAddress | None = None  # pinned once BEGIN succeeded
        self.finished = False

    def __enter__(self) -> LocalTransaction:
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if self.finished:
            return  # The block committed or rolled back itself.
        if exc_type is None:
            self.commit()
            return
        try:
            self.rollback()
        except MetaError as error:
            log.warning("rollback of %s after %r failed: %s", self.key, exc, error)

    def transaction_key(self, connection: PipelinedConnection, address: BrokerAddress) -> str:
        """The key for a put to ``address``; begins the transaction there first if needed.

        Raises:
            TransactionError: ``BEGIN`` failed (the transaction stays unpinned).
        """
        if self.address is not None:
            assert address.uri == self.address.uri
            assert self.key is not None
            return self.key
        if self.key is None:
            self.key = LocalTransactionId(self.session_id, next_local_number()).key()
        self._request(connection, BEGIN)
        self.address = address
        return self.key

    def commit(self) -> None:
        """Commit: send ``COMMIT_ONE_PHASE`` to the pinned broker (nothing if none).

        Raises:
            TransactionError: the broker refused (its text), or no reply came in time
                (the text says the state is unknown); the thread is unbound either way.
        """
        self._finish(COMMIT_ONE_PHASE)

    def rollback(self) -> None:
        """Roll back: send ``ROLLBACK`` to the pinned broker (nothing if none).

        Raises:
            TransactionError: as ``commit``; the thread is unbound either way.
        """
        self._finish(ROLLBACK)

    def _finish(self, kind: str) -> None:
        if threading.get_ident() != self._thread:
            raise TransactionError(f"{kind} of a local transaction from another thread")
        if self.finished or self._slots.local is not self:
            raise TransactionError(f"{kind}: this local transaction is already finished")
        self._slots.local = None
        self.finished = True
        if self.address is None:
            return  # Nothing was begun on any broker: nothing to tell one.
        try:
            connection = self._pool.get(self.address)
        except ClientError as error:
            raise TransactionError(f"{kind} of {self.key} was not sent: {error}") from error
        self._request(connection, kind)

    def _request(self, connection: PipelinedConnection, kind: str) -> None:
        """Send ``kind`` for this transaction; raise ``TransactionError`` unless 200."""
        assert self.key is not None
        timeout_s = self._request_timeout_s()
        command = Transaction(
            self.key, self.session_id, kind, 0, self.timeout if kind == BEGIN else 0
        )
        unknown = ": the transaction state is unknown" if kind == COMMIT_ONE_PHASE else ""
        try:
            reply = request_transaction(connection, command, timeout_s)
        except OperationTimeoutError as error:
            raise TransactionError(
                f"{kind} of {self.key} got no reply within {timeout_s} s{unknown}"
            ) from error
        except ClientError as error:
            raise TransactionError(f"{kind} of {self.key} failed{unknown}: {error}") from error
        if reply.code == 500:
            raise TransactionError(reply_text(reply))
        if reply.code != 200:
            raise TransactionError(
                f"broker {connection.name} answered {reply.code} to {kind} of {self.key}: "
                f"{reply_text(reply)}"
            )


QUALIFIER_FORBIDDEN_CHARACTERS = "\r\n\t: "
XID_PART_BYTES_MAX = 64
"""JTA's ``MAXGTRIDSIZE`` and ``MAXBQUALSIZE``."""


@dataclass(frozen=True, slots=True)
class Xid:
    """A JTA transaction branch id: format id, global transaction id, branch qualifier.

    Raises:
        ClientError: the format id is not a 32-bit int, or a part is not bytes of at most
            ``XID_PART_BYTES_MAX``.
    """

    format_id: int
    global_transaction_id: bytes
    branch_qualifier: bytes

    def __post_init__(self) -> None:
        format_id = self.format_id
        if isinstance(format_id, bool) or not isinstance(format_id, int):
            raise ClientError(f"Xid format_id must be an int, got {format_id!r}")
        if not INT_MIN <= format_id <= INT_MAX:
            raise ClientError(f"Xid format_id {format_id} is not a 32-bit int")
        for name in ("global_transaction_id", "branch_qualifier"):
            value = getattr(self, name)
            if not isinstance(value, bytes) or len(value) > XID_PART_BYTES_MAX:
                raise ClientError(
                    f"Xid {name} must be bytes of at most {XID_PART_BYTES_MAX}, got {value!r}"
                )

    def key(self, unique_qualifier: str) -> str:
        """The wire key ``XID:<formatId>:<gtridHex>:<bqualHex>:<uniqueQualifier>``."""
        return XATransactionId(
            self.format_id, self.global_transaction_id, self.branch_qualifier, unique_qualifier
        ).key()

    @classmethod
    def from_key(cls, key: str) -> Xid:
        """The xid of an ``XID:`` key (its unique qualifier is dropped).

        Raises:
            ClientError: ``key`` is not an XA transaction key.
        """
        return parse_xid_key(key)[0]


def parse_xid_key(key: str) -> tuple[Xid, str]:
    """Split an ``XID:`` key into its xid and unique qualifier.

    Raises:
        ClientError: ``key`` is not an XA transaction key.
    """
    try:
        parsed = parse_transaction_key(key)
    except LocalProtocolError as error:
        raise ClientError(f"malformed XA transaction key {key!r}: {error}") from None
    if not isinstance(parsed, XATransactionId):
        raise ClientError(f"{key!r} is not an XA transaction key")
    xid = Xid(parsed.format_id, parsed.global_transaction_id, parsed.branch_qualifier)
    return xid, parsed.unique_qualifier


def validate_unique_qualifier(qualifier: str) -> str:
    """Return ``qualifier`` if it may appear in a key and a command line, else raise.

    Raises:
        ClientError: blank, or containing CR, LF, TAB, ``:`` or a space.
    """
    if not isinstance(qualifier, str) or not qualifier.strip():
        raise ClientError(f"blank unique qualifier {qualifier!r}")
    for character in qualifier:
        if character in QUALIFIER_FORBIDDEN_CHARACTERS:
            raise ClientError(
                f"invalid unique qualifier {qualifier!r}: it must not contain newlines, "
                f"tabs, ':' or spaces (found {character!r})"
            )
    return qualifier
