"""``XAResource``: one thread's XA branch handle, pinned to one broker (Java's
``XAResource`` of its XA producer). Made by ``meta.client.produce.xa.XAMessageProducer``.

The XA methods follow the JTA ``XAResource`` contract and raise ``meta.errors.XAError``
carrying ``error_code`` (``meta.protocol.xa``): a 500 reply whose body is
``XAException:code=N,msg=...`` gives ``XAError(N, msg)``; any other refusal ``XAER_RMERR``; no
reply within the transaction request timeout, a connection that is down or cannot be made
``XAER_RMFAIL``. ``end`` sends ``END`` one-way (the broker never answers it).
``recover`` asks every candidate broker, skips those that fail, and returns the merged,
de-duplicated xids (the full list on every call, whatever the scan flags, as Java does); a
later ``commit``/``rollback``/``forget`` of a recovered xid goes to the broker that listed it.

Departures from Java, on purpose: ``start`` associates the xid only once ``BEGIN`` succeeded,
and a ``BEGIN`` (``TMNOFLAGS``) that gets no reply in time is followed by a one-way
``ROLLBACK``, so the broker does not keep an empty branch nobody will finish;
``end`` clears the association even when it fails with ``XAER_RMFAIL`` (the transaction
manager rolls back next); ``TMRESUME`` accepts the xid suspended on this resource, so
suspend/resume works (Java always answers ``XAER_NOTA`` or ``XAER_DUPID``); ``TMJOIN`` of an
xid this resource has not seen sends ``BEGIN``, which joins the broker's branch (the broker
keeps one XA table, and BEGIN of a known key does nothing), so two resources that
``is_same_rm`` (same broker, same qualifier) can share a branch; prepare or commit of a
suspended branch is ``XAER_PROTO``. A request that gets no reply in time is ``XAER_RMFAIL``:
the branch's state is then unknown, and Java's ``XA_RBTIMEOUT`` would tell the transaction
manager it was rolled back (JTA allows ``XA_RB*`` from commit only in one phase, and then it
means the work was rolled back). ``set_unique_qualifier`` validates the new value (Java
validated the old one).

Invariants: a resource is pinned to one broker for its whole life (recovered xids aside); at
most one xid is associated with it, and with one thread: the one that called ``start``, whose
sends join the xid until ``end``.

Thread-safety: ``prepare``/``commit``/``rollback``/``recover``/``forget`` may be called from
any thread (the resource's state is guarded by a lock).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import TYPE_CHECKING

from meta.client.cluster import BrokerAddress
from meta.client.transact.transaction import (
    BEGIN,
    COMMIT_ONE_PHASE,
    COMMIT_TWO_PHASE,
    ROLLBACK,
    ThreadTransactions,
    Xid,
    reply_text,
    request_transaction,
    send_one_way,
)
from meta.errors import ClientError, OperationTimeoutError, XAError
from meta.protocol import xa as jta
from meta.protocol.commands import Result, Transaction

if TYPE_CHECKING:
    from meta.client.factory import ConnectionPool

log = logging.getLogger("meta.client")


def _check_xid(xid: Xid | None) -> Xid:
    if not isinstance(xid, Xid):
        raise XAError(jta.XAER_INVAL, f"expected an Xid, got {xid!r}")
    return xid


class XAResource:
    """One thread's XA resource, pinned to one broker (Java's ``TransactionContext``).

    Created by ``XAMessageProducer.get_xa_resource``; see the module docstring for the
    semantics and error mapping.

    Args:
        pool: the producer's connection pool.
        slots: the producer's per-thread slots of the thread that owns this resource.
        address: the pinned broker.
        session_id: the producer's session id.
        unique_qualifier: the producer's qualifier when the resource was made.
        request_timeout_s: returns the producer's transaction request timeout.
        candidates: returns the producer's current candidate brokers (for ``recover``).
    """

    def __init__(
        self,
        pool: ConnectionPool,
        slots: ThreadTransactions,
        address: BrokerAddress,
        session_id: str,
        unique_qualifier: str,
        request_timeout_s: Callable[[], float],
        candidates: Callable[[], list[BrokerAddress]],
    ) -> None:
        self._pool = pool
        self._slots = slots
        self.address = address
        self.session_id = session_id
        self.unique_qualifier = unique_qualifier
        self._request_timeout_s = request_timeout_s
        self._candidates = candidates
        self._lock = threading.Lock()
        self._timeout = 0
        self._associated: Xid | None = None
        self.associated_thread: int | None = None  # the thread whose sends join the xid
        self._detached: Xid | None = None  # ended (TMSUCCESS) or suspended: JOIN/RESUME
        self._suspended = False  # _detached was suspended (TMSUSPEND), not ended
        # Where the last ``recover`` found each xid (replaced by every recover, so bounded).
        self._recovered: dict[Xid, BrokerAddress] = {}

    def __repr__(self) -> str:
        return f"XAResource({self.address.uri}, {self.unique_qualifier})"

    @property
    def associated_xid(self) -> Xid | None:
        """The xid between ``start`` and ``end``; the owning thread's sends join it."""
        return self._associated

    def transaction_key(self, connection: object, address: BrokerAddress) -> str:
        """The key for a put of the owning thread (called by ``MessageProducer``)."""
        assert address.uri == self.address.uri
        xid = self._associated
        if xid is None:
            raise XAError(jta.XAER_PROTO, "no xid is associated with this XA resource any more")
        return xid.key(self.unique_qualifier)

    def start(self, xid: Xid, flags: int = jta.TMNOFLAGS) -> None:
        """Associate ``xid``; with ``TMNOFLAGS`` send ``BEGIN`` (timeout, qualifier) first,
        and with ``TMJOIN`` of an xid not seen here too (it joins the broker's branch).

        Raises:
            XAError: ``XAER_NOTA`` (resume of an xid not suspended here), ``XAER_PROTO`` (a
                local transaction is in progress on this thread), ``XAER_DUPID`` (an xid is
                associated already), ``XAER_INVAL`` (bad flags), or a BEGIN failure.
        """
        _check_xid(xid)
        if flags not in (jta.TMNOFLAGS, jta.TMJOIN, jta.TMRESUME):
            raise XAError(jta.XAER_INVAL, f"start flags {flags:#x}")
        with self._lock:
            known = xid in (self._associated, self._detached)
            if flags == jta.TMRESUME and not (known and self._suspended):
                raise XAError(jta.XAER_NOTA, f"{xid} is not suspended on this resource")
            if self._slots.local is not None:
                raise XAError(jta.XAER_PROTO, "a local transaction is in progress on this thread")
            if self._associated is not None:
                raise XAError(jta.XAER_DUPID, f"{self._associated} is associated already")
            if self._slots.active() is not None:
                raise XAError(jta.XAER_PROTO, "another XA resource is associated on this thread")
        if flags == jta.TMNOFLAGS or (flags == jta.TMJOIN and not known):
            try:
                self._request(BEGIN, xid, self._timeout)
            except XAError as error:
                if flags == jta.TMNOFLAGS and isinstance(error.__cause__, OperationTimeoutError):
                    self._roll_back_unanswered_begin(xid)
                raise
        with self._lock:
            self._associated = xid
            self.associated_thread = threading.get_ident()
            self._detached = None
            self._suspended = False
        self._slots.xa = self  # This thread's sends join ``xid`` until ``end``.

    def _roll_back_unanswered_begin(self, xid: Xid) -> None:
        """``BEGIN`` of ``xid`` got no reply in time, so the broker may hold an empty branch
        that no transaction manager will finish (``start`` failed: this resource is not
        enlisted); it would stay open until its timeout, or for ever with timeout 0.

        Send ``ROLLBACK`` one-way on the same connection, behind the ``BEGIN``: the broker
        drops the branch, or answers ``XAER_NOTA`` (never read) when it never saw the
        ``BEGIN``. ``TMJOIN`` never gets here: its branch may be another resource's.
        """
        command = self._command(ROLLBACK, xid)
        try:
            send_one_way(self._connection(), command, self._request_timeout_s())
        except (ClientError, XAError) as error:
            log.warning("ROLLBACK of %s after its unanswered BEGIN not sent: %s", xid, error)

    def end(self, xid: Xid, flags: int = jta.TMSUCCESS) -> None:
        """Dissociate ``xid`` and send ``END`` one-way (no reply is awaited).

        ``TMSUCCESS`` of an xid that is not associated does nothing (as Java).

        Raises:
            XAError: ``XAER_PROTO`` (a local transaction on this thread, or suspend/fail of
                an xid that is not associated), ``XAER_INVAL`` (bad flags), ``XAER_RMFAIL``
                (the broker's connection is down; the xid is dissociated all the same).
        """
        _check_xid(xid)
        if self._slots.local is not None:
            raise XAError(jta.XAER_PROTO, "a local transaction is in progress on this thread")
        if flags not in (jta.TMSUCCESS, jta.TMSUSPEND, jta.TMFAIL):
            raise XAError(jta.XAER_INVAL, f"end flags {flags:#x}")
        with self._lock:
            if xid != self._associated:
                if flags == jta.TMSUCCESS:
                    return
                raise XAError(jta.XAER_PROTO, f"{xid} is not associated with this resource")
            self._dissociate()
            self._detached = xid if flags != jta.TMFAIL else None
            self._suspended = flags == jta.TMSUSPEND
        command = self._command("END", xid)
        try:
            send_one_way(self._connection(), command, self._request_timeout_s())
        except ClientError as error:
            raise XAError(jta.XAER_RMFAIL, f"END to broker {self.address.uri}: {error}") from error

    def prepare(self, xid: Xid) -> int:
        """Send ``PREPARE``; return the broker's vote, ``XA_OK`` (0) or ``XA_RDONLY`` (3).

        Raises:
            XAError: ``XAER_PROTO`` while ``xid`` is still associated, or the broker's error.
        """
        self._check_not_associated(xid, "prepare")
        reply = self._request("PREPARE", xid)
        text = reply_text(reply).strip()
        if text not in (str(jta.XA_OK), str(jta.XA_RDONLY)):
            raise XAError(jta.XAER_RMERR, f"malformed prepare reply {text!r}")
        self._forget_detached(xid)  # prepared (or read-only): no more joining or resuming
        return int(text)

    def commit(self, xid: Xid, one_phase: bool) -> None:
        """Send ``COMMIT_ONE_PHASE`` (``one_phase``) or ``COMMIT_TWO_PHASE``.

        Raises:
            XAError: ``XAER_PROTO`` while ``xid`` is still associated, or the broker's error.
        """
        self._check_not_associated(xid, "commit")
        try:
            self._request(COMMIT_ONE_PHASE if one_phase else COMMIT_TWO_PHASE, xid)
        finally:
            self._completed(xid)

    def rollback(self, xid: Xid) -> None:
        """Send ``ROLLBACK`` (an associated xid is dissociated too).

        Raises:
            XAError: the broker's error, a timeout or a connection failure.
        """
        _check_xid(xid)
        try:
            self._request(ROLLBACK, xid)
        finally:
            with self._lock:
                if self._associated == xid:
                    self._dissociate()
            self._completed(xid)

    def forget(self, xid: Xid) -> None:
        """Send ``FORGET``: the broker drops a heuristically completed branch."""
        _check_xid(xid)
        try:
            self._request("FORGET", xid)
        finally:
            self._completed(xid)

    def recover(self, flag: int = jta.TMSTARTRSCAN | jta.TMENDRSCAN) -> list[Xid]:
        """The prepared (and heuristically completed) xids of this producer's qualifier.

        ``RECOVER`` goes to every candidate broker at once; a broker that fails, refuses
        or does not answer in time is skipped (logged). Keys are merged without duplicates.

        Raises:
            XAError: ``XAER_RMFAIL`` when there is no candidate broker, ``XAER_INVAL`` for
                flags other than ``TMSTARTRSCAN``/``TMENDRSCAN``/``TMNOFLAGS``.
        """
        if isinstance(flag, bool) or not isinstance(flag, int):
            raise XAError(jta.XAER_INVAL, f"recover flags {flag!r}")
        if flag & ~(jta.TMSTARTRSCAN | jta.TMENDRSCAN):
            raise XAError(jta.XAER_INVAL, f"recover flags {flag:#x}")
        candidates = self._candidates()
        if not candidates:
            raise XAError(jta.XAER_RMFAIL, "no candidate broker to recover from")
        command = Transaction("null", self.session_id, "RECOVER", 0, 0, self.unique_qualifier)
        timeout_s = self._request_timeout_s()
        pending = []
        for address in candidates:
            try:
                pending.append((address, self._pool.get(address).request(command, timeout_s)))
            except ClientError as error:
                log.warning("RECOVER to broker %s failed: %s", address.uri, error)
        deadline = time.monotonic() + timeout_s
        found: dict[Xid, BrokerAddress] = {}  # in candidate order; the first broker wins
        for address, future in pending:
            for xid in _recovered(address, future, deadline):
                found.setdefault(xid, address)
        with self._lock:
            self._recovered = found
        return list(found)

    def get_transaction_timeout(self) -> int:
        """Seconds sent with ``BEGIN`` (0: the broker's default, no timeout)."""
        return self._timeout

    def set_transaction_timeout(self, seconds: int) -> bool:
        """Set the timeout of later ``start`` calls; True (it is always accepted).

        Raises:
            XAError: ``XAER_INVAL`` for a negative or non-integer value.
        """
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
            raise XAError(jta.XAER_INVAL, f"transaction timeout {seconds!r}")
        self._timeout = seconds
        return True

    def is_same_rm(self, other: object) -> bool:
        """True when ``other`` is an ``XAResource`` pinned to the same broker with the same
        qualifier: their branches of one xid are one broker transaction (``TMJOIN``)."""
        return (
            isinstance(other, XAResource)
            and other.address.uri == self.address.uri
            and other.unique_qualifier == self.unique_qualifier
        )

    def _check_not_associated(self, xid: Xid, what: str) -> None:
        _check_xid(xid)
        if xid == self._associated or (xid == self._detached and self._suspended):
            raise XAError(jta.XAER_PROTO, f"{what} of {xid} before end")

    def _dissociate(self) -> None:
        """Lock held: no xid is associated any more."""
        self._associated = None
        self.associated_thread = None

    def _forget_detached(self, xid: Xid) -> None:
        with self._lock:
            if self._detached == xid:
                self._detached = None

    def _completed(self, xid: Xid) -> None:
        """After commit/rollback: the owning thread picks a broker afresh next time."""
        self._forget_detached(xid)
        with self._lock:
            self._recovered.pop(xid, None)
        if self._slots.xa is self and self._associated is None and self._detached is None:
            self._slots.xa = None

    def _command(self, kind: str, xid: Xid, timeout: int = 0) -> Transaction:
        key = xid.key(self.unique_qualifier)
        return Transaction(key, self.session_id, kind, 0, timeout, self.unique_qualifier)

    def _connection(self, address: BrokerAddress | None = None):
        """The connection to ``address`` (the pinned broker by default), connecting if needed.

        Raises:
            XAError: ``XAER_RMFAIL`` when it is down or cannot be made.
        """
        address = address or self.address
        try:
            connection = self._pool.get(address)
        except ClientError as error:
            raise XAError(jta.XAER_RMFAIL, f"broker {address.uri}: {error}") from error
        if connection.closed:
            raise XAError(jta.XAER_RMFAIL, f"connection to broker {address.uri} is down")
        return connection

    def _broker_of(self, xid: Xid) -> BrokerAddress:
        """Where ``xid``'s branch lives: the pinned broker, unless the last ``recover`` found
        it elsewhere (and it is not this resource's own branch)."""
        with self._lock:
            if xid in (self._associated, self._detached):
                return self.address
            return self._recovered.get(xid, self.address)

    def _request(self, kind: str, xid: Xid, timeout: int = 0) -> Result:
        """Send ``kind`` for ``xid`` to its broker (``_broker_of``); return the 200 reply.

        Raises:
            XAError: mapped as the module docstring says.
        """
        command = self._command(kind, xid, timeout)
        timeout_s = self._request_timeout_s()
        address = self._broker_of(xid)
        try:
            reply = request_transaction(self._connection(address), command, timeout_s)
        except OperationTimeoutError as error:
            text = f"{kind} of {xid} to broker {address.uri}: {error}; its outcome is unknown"
            raise XAError(jta.XAER_RMFAIL, text) from error
        except ClientError as error:
            raise XAError(jta.XAER_RMFAIL, str(error)) from error
        if reply.code == 200:
            return reply
        error = jta.parse_xa_error(reply.body)
        if error is None:
            text = reply_text(reply)
            error = XAError(jta.XAER_RMERR, f"{kind} refused with {reply.code}: {text}")
        raise error


def _recovered(address: BrokerAddress, future, deadline: float) -> list[Xid]:
    """The xids of one broker's ``RECOVER`` reply; [] (logged) when it failed."""
    try:
        reply = future.result(max(0.0, deadline - time.monotonic()))
    except FutureTimeoutError:
        future.cancel()
        log.warning("RECOVER to broker %s: no reply in time", address.uri)
        return []
    except ClientError as error:
        log.warning("RECOVER to broker %s failed: %s", address.uri, error)
        return []
    if not isinstance(reply, Result) or reply.code != 200:
        log.warning("RECOVER to broker %s refused: %r", address.uri, reply)
        return []
    xids = []
    for key in reply_text(reply).split("\r\n"):
        if key.strip():
            try:
                xids.append(Xid.from_key(key.strip()))
            except ClientError as error:
                log.warning("RECOVER from broker %s: skipping %s", address.uri, error)
    return xids
