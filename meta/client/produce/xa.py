"""XA producer (Java's ``XAMessageProducer``); its ``XAResource`` is in ``transact.xa_resource``.

``MetaMessageSessionFactory.create_xa_producer`` returns an ``XAMessageProducer``, whose
``get_xa_resource()`` hands each thread an ``XAResource`` pinned to one broker chosen at random
among the *candidate brokers*: the masters common to every topic the producer published,
sorted by URI, recomputed from the current snapshots on every use. Between ``start`` and
``end``, the starting thread's ``send_message`` puts carry the key
``XID:<formatId>:<gtridHex>:<bqualHex>:<uniqueQualifier>`` and go to the pinned broker only.

Invariants: after ``commit`` or ``rollback`` on the thread that holds the resource, that
thread's next ``get_xa_resource`` picks a broker afresh (Java removes the thread's context
there); a resource kept by the caller stays usable, and ``start`` binds it again.

Thread-safety: producers are thread-safe; each thread has its own resource.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from meta.client.cluster import BrokerAddress
from meta.client.message import Message, SendResult
from meta.client.produce.producer import DEFAULT_TIMEOUT_S, MessageProducer
from meta.client.produce.selectors import PartitionSelector
from meta.client.transact.transaction import Xid, validate_unique_qualifier
from meta.client.transact.xa_resource import XAResource
from meta.errors import NoBrokerError

if TYPE_CHECKING:
    from meta.client.factory import ConnectionPool
    from meta.client.zk.cluster_view import ZkClusterView

__all__ = ["XAMessageProducer", "XAResource", "Xid"]

DEFAULT_UNIQUE_QUALIFIER_PREFIX = "XAMessageProducer"


class XAMessageProducer(MessageProducer):
    """A producer whose threads take part in XA transactions through ``get_xa_resource``.

    Args:
        pool: the factory's connection pool.
        selector: chooses a partition per message (among the pinned broker's, in XA).
        max_message_bytes: largest encoded payload accepted.
        view: the factory's ZooKeeper view (XA needs the brokers of every topic).
        on_shutdown: called once by ``shutdown``.
        unique_qualifier_prefix: the qualifier is ``<prefix>-<hostname>``; by default the
            prefix is ``XAMessageProducer``.
        hostname: the host name in the qualifier; ``socket.gethostname()`` when None.
        rng: chooses the pinned broker; a fresh ``random.Random`` when None.

    Raises:
        ClientError: the prefix (or the resulting qualifier) is not allowed.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        selector: PartitionSelector,
        max_message_bytes: int,
        view: ZkClusterView,
        on_shutdown: Callable[[MessageProducer], None] | None = None,
        unique_qualifier_prefix: str | None = None,
        hostname: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(pool, selector, max_message_bytes, view=view, on_shutdown=on_shutdown)
        self._hostname = hostname if hostname is not None else socket.gethostname()
        self._rng = rng if rng is not None else random.Random()
        prefix = DEFAULT_UNIQUE_QUALIFIER_PREFIX
        if unique_qualifier_prefix is not None:
            prefix = validate_unique_qualifier(unique_qualifier_prefix)
        self._unique_qualifier = validate_unique_qualifier(f"{prefix}-{self._hostname}")

    @property
    def unique_qualifier(self) -> str:
        """Names this producer's XA branches on the brokers; ``recover`` filters by it."""
        return self._unique_qualifier

    def set_unique_qualifier(self, qualifier: str) -> None:
        """Use ``qualifier`` for resources created from now on (validated)."""
        self._unique_qualifier = validate_unique_qualifier(qualifier)

    def set_unique_qualifier_prefix(self, prefix: str) -> None:
        """Use ``<prefix>-<hostname>`` for resources created from now on (validated)."""
        validate_unique_qualifier(prefix)
        self._unique_qualifier = validate_unique_qualifier(f"{prefix}-{self._hostname}")

    def candidate_brokers(self) -> list[BrokerAddress]:
        """The masters common to every published topic, sorted by URI."""
        common: dict[str, BrokerAddress] | None = None
        for topic in sorted(self.published_topics):
            brokers = {address.uri: address for address in self._snapshot(topic).brokers.values()}
            if common is None:
                common = brokers
            else:
                common = {uri: address for uri, address in common.items() if uri in brokers}
        return [common[uri] for uri in sorted(common)] if common else []

    def send_message_async(
        self, message: Message, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> Future[SendResult]:
        """As ``MessageProducer.send_message_async``; inside this thread's XA branch (between
        ``start`` and ``end``) the put joins the branch, so many puts of one branch can be
        in flight on its broker's connection, stored in the order sent.

        Check every future before ``end``/``prepare``: a put that failed is not part of the
        branch, and ``prepare`` cannot know it was meant to be.

        Raises:
            ClientError, MessageTooLargeError, InvalidTopicError: as ``send_message``.
            TransactionError: a local transaction is in progress on this thread.
        """
        branch = self._transactions.active()
        if isinstance(branch, XAResource):
            return self._send_in_transaction(message, branch, timeout_s)
        return super().send_message_async(message, timeout_s)

    def get_xa_resource_on(self, broker_uri: str) -> XAResource:
        """A new ``XAResource`` pinned to the candidate broker ``broker_uri``.

        For a transaction manager that enlists one branch per broker, or completes a branch
        on the broker where it was prepared. Like ``get_xa_resource``'s, its ``start`` makes
        it the calling thread's resource until ``end``.

        Raises:
            NoBrokerError: ``broker_uri`` is not a candidate broker now.
            ClientClosedError: the producer was shut down.
        """
        self._check_open()
        candidates = {address.uri: address for address in self.candidate_brokers()}
        address = candidates.get(broker_uri)
        if address is None:
            raise NoBrokerError(
                f"broker {broker_uri} does not serve every published topic "
                f"{sorted(self.published_topics)} now (candidates: {sorted(candidates)})"
            )
        return self._resource(address)

    def _resource(self, address: BrokerAddress) -> XAResource:
        return XAResource(
            self._pool,
            self._transactions,
            address,
            self.session_id,
            self._unique_qualifier,
            self._request_timeout,
            self.candidate_brokers,
        )

    def get_xa_resource(self) -> XAResource:
        """Return the calling thread's ``XAResource``, creating (and pinning) it if needed.

        Raises:
            NoBrokerError: no broker serves every published topic (or none is published).
            ClientClosedError: the producer was shut down.
        """
        self._check_open()
        slots = self._transactions
        if slots.xa is not None:
            return slots.xa
        candidates = self.candidate_brokers()
        if not candidates:
            raise NoBrokerError(
                f"Could not select a common broker url for topics: {sorted(self.published_topics)}"
            )
        with self._lock:
            address = self._rng.choice(candidates)
        slots.xa = self._resource(address)
        return slots.xa
