"""``BrokerServices``: what the command handlers and the connection protocol may use of a broker.

``meta.server.broker.Broker`` is the one implementation. Handlers (``handlers``,
``tx_handlers``, ``put_run``, ``puts``) and ``BrokerProtocol`` are written against this
``typing.Protocol`` rather than against ``Broker``, so the seam between a connection and the
broker is named: a handler that needs something more grows this protocol first, and a test
double implements exactly this. Members are the ones the handlers and the protocol really use;
the broker's lifecycle (``start``, ``stop``, ``reload``) is not among them.

Types only; importing this module imports none of the implementations. Reactor thread only,
as every member is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from meta.config import BrokerConfig
    from meta.message_id import IdWorker
    from meta.server.reply_budget import ReplyBudget
    from meta.server.stats import BrokerCounters
    from meta.store.manager import StoreManager
    from meta.store.partition import PartitionLog
    from meta.tx.transaction_store import TransactionStore


class BrokerServices(Protocol):
    """The broker as its connections and command handlers see it.

    Attributes:
        config: the running configuration (replaced as a whole by a reload).
        slave_id: this broker's slave number, or -1 for a master (an async slave refuses puts).
        uri: ``meta://host:port`` as registered, named in put failure texts.
        version: the text of the ``version`` reply.
        counters: the ``stats`` counters, incremented in place.
        ids: the message id generator.
        store: the partition logs.
        transactions: open and prepared transactions (``transaction`` and transactional puts).
        reply_budget: the bytes of replies queued over all connections (``maxQueuedReplyBytes``).
        refuses_puts: every put gets 403 (an async slave or a gregor slave, compatibility.md).
        sync: the synchronous-replication role (``meta.sync``; its ``role`` is ``"samsa"`` or
            ``"gregor"``), or None on a plain broker or an async slave.
    """

    config: BrokerConfig
    slave_id: int
    uri: str
    version: str
    counters: BrokerCounters
    ids: IdWorker
    store: StoreManager
    transactions: TransactionStore
    reply_budget: ReplyBudget
    refuses_puts: bool
    sync: Any

    def partition_for_put(self, topic: str, partition: int) -> PartitionLog:
        """The partition log a put goes to, created on the first put; raises ``MetaError``."""
        ...

    def stat_enabled(self, topic: str) -> bool:
        """Whether puts to ``topic`` are counted per topic (``stat`` in the topic section)."""
        ...

    def record_put(self, topic: str, partition: int, size: int) -> None:
        """Count a put of ``size`` body bytes in the realtime statistics."""
        ...

    def record_put_failed(self, topic: str, partition: int) -> None:
        """Count a failed put in the realtime statistics."""
        ...

    def record_put_too_large(self, topic: str, partition: int, size: int) -> None:
        """Count and log a put refused for its size (``stats rejected``)."""
        ...

    def record_get(self, topic: str, group: str) -> None:
        """Count a get that found data."""
        ...

    def record_get_miss(self, topic: str, group: str) -> None:
        """Count a get that found none."""
        ...

    def record_offset(self, topic: str, group: str) -> None:
        """Count an ``offset`` command."""
        ...

    def render_stats(self, item: str) -> tuple[int, bytes]:
        """The code and body of the ``stats <item>`` reply."""
        ...

    def wait_for_data(
        self, partition_log: Any, timeout_s: float, woken: Callable[[], None]
    ) -> None:
        """Call ``woken()`` once the log's visible end moves, or after ``timeout_s``."""
        ...

    def end_of_batch(self) -> None:
        """A connection handled one read: stage what it gathered and write ready replies."""
        ...

    def output_pending(self, connection: Any) -> None:
        """``connection`` has replies to write at the end of the current batch."""
        ...

    def call_soon(self, call: Callable[[], None]) -> None:
        """Run ``call()`` in the next reactor turn."""
        ...

    def connection_made(self, connection: Any) -> None:
        """A client connection opened."""
        ...

    def connection_lost(self, connection: Any) -> None:
        """A client connection closed (its local transactions are rolled back)."""
        ...
