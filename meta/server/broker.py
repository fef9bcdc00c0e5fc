"""``Broker``: owns the config, the store, the transactions, the id worker, counters and the
ZooKeeper registry.

Lifecycle: ``start()`` loads and recovers every partition on disk, starts the flush timers,
recovers the transactions (``meta.tx.manager``), listens, then registers in ZooKeeper (as
Java's broker does). ``stop()`` stops accepting connections, deregisters, waits
``zkSyncTimeMs`` on the reactor so clients can move away, stops handling requests (one not
handled yet goes unanswered with its connection, so its client sends it elsewhere), writes a
last transaction checkpoint, flushes and closes the store (which answers every waiting put),
then closes connections.

Reload (``reload()``, docs/operations.md): the topic sections of the re-read
``server.ini`` replace the running ones; ``[system]`` and ``[zookeeper]`` keep their running
values until restart (each changed key is logged), and topic keys a section leaves blank
keep inheriting the running ``[system]`` values. The rule for topics is "as a restart with
the new file would have it":

* new topics are accepted and registered in ZooKeeper at once; a topic whose section changed
  is registered again with the new settings, its nodes updated in place (a node whose payload
  changes is replaced in one ZooKeeper transaction; unchanged nodes and other topics are not
  touched);
* a removed topic keeps its partitions: its data stays on disk and is still served to
  consumers, partitions that exist still take puts, new partitions are refused (the topic
  is no longer legal). In ZooKeeper a removed topic that has data stays registered, now with
  the ``[system]`` defaults (what a restart registers for a topic found on disk; Java's
  reload does the same); one without data is unregistered (Java keeps its nodes until
  restart, but nothing here would accept it any more);
* ``master_config_checksum`` is rewritten with the new file's CRC-32;
* open partitions keep their files and flush settings (``StoreManager.set_config``); new
  settings apply to partitions created from now on.

Reloads are serialised with each other and with ``start`` (one ``DeferredLock``); a
ZooKeeper error does not undo the reload: it is logged and named in the outcome.

The reactor is injected (STYLE 11); everything here runs on the reactor thread. Kazoo lives
only in ``registry.py`` and never runs on this thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from twisted.internet import defer, task

from meta import __version__
from meta.config import BrokerConfig
from meta.errors import describe_error
from meta.local_address import is_loopback, local_host
from meta.message_id import IdWorker
from meta.server.connections import ConnectionGuard
from meta.server.json_stats import is_json_item, render_json_stats
from meta.server.long_poll import DataWaiters
from meta.server.protocol import BrokerFactory
from meta.server.reactor import after_events_caller
from meta.server.reload import (  # re-exported: callers import them from here
    RELOAD_DONE,
    RELOAD_FAILED,
    ReloadOutcome,
    ReloadRefused,
    lock_data_paths,
    log_reload,
    reload_outcome,
    reload_registry,
)
from meta.server.reply_batch import ReplyBatch
from meta.server.reply_budget import ReplyBudget
from meta.server.request_stats import RequestStats
from meta.server.stats import (
    BrokerCounters,
    BrokerView,
    PartitionView,
    RealtimeStats,
    render_stats,
)
from meta.server.topic_counters import TopicCounters
from meta.server.topic_limits import check_new_topic
from meta.server.transport import use_broker_transport
from meta.store.lock import DataPathLock
from meta.store.manager import StoreManager
from meta.tx.manager import TransactionManager

__all__ = [
    "RELOAD_DONE",
    "RELOAD_FAILED",
    "Broker",
    "ReloadOutcome",
    "ReloadRefused",
    "advertised_host",
    "broker_uri",
    "reload_outcome",
]

log = logging.getLogger("meta.server")

CLOSE_LINGER_S = 2.0
"""How long a stopping broker keeps reading (and dropping) what clients still send after
its last replies and FIN, so that closing does not reset connections under unread replies."""
CLOSE_QUIET_S = 0.05

WIRE_VERSION = f"1.4.6.3-metaq-py-{__version__}"
"""The ``version`` reply: the Java protocol level this broker speaks, then our own version."""

TOO_LARGE_LOG_INTERVAL_S = 60.0
"""At most one log line per minute about puts refused for their size (each is counted)."""


def advertised_host(config: BrokerConfig) -> str:
    """``hostName`` when set, else this machine's address as Java finds it (compatibility.md,
    ``meta.local_address``)."""
    return config.host_name or local_host()


def broker_uri(host: str, port: int) -> str:
    """``meta://host:port``, with IPv6 hosts in brackets."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"meta://{host}:{port}"


class Broker:
    """A Metamorphosis-compatible broker.

    Args:
        config: the validated configuration.
        reactor: the reactor to use (default: the global one).
        registry: a ``BrokerRegistry``-like object, or None to build one from the config.
        store: a ``StoreManager`` (tests inject one with a recording file layer), or None.
        slave_id: -1 for a master; ``N >= 0`` for async slave N (as in Java: registers as
            ``ids/B/slave<N>`` and ``B-s<N>``, answers puts 403; ``meta.slave`` copies).
    """

    def __init__(
        self,
        config: BrokerConfig,
        reactor: Any = None,
        registry: Any = None,
        store: StoreManager | None = None,
        slave_id: int = -1,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self.config = config
        self.slave_id = slave_id
        self._reactor = reactor
        self.store = store if store is not None else StoreManager(config, reactor)
        self.ids = IdWorker(config.broker_id)
        self.tx = TransactionManager(config, reactor, self.store)
        self.transactions = self.tx.transactions
        self.counters = BrokerCounters()
        self._too_large_logged_at: float | None = None
        self.put_failed_by_topic = TopicCounters()  # read by the dashboard's metrics
        self.get_miss_by_topic = TopicCounters()
        self.realtime = RealtimeStats(reactor.seconds)
        # The per-request statistics are the methods of ``RequestStats``, bound here so that
        # a put's count calls them directly (compiled code to compiled code when compiled).
        stats = RequestStats(
            config, self.realtime, self.put_failed_by_topic, self.get_miss_by_topic
        )
        self.request_stats = stats
        self.stat_enabled = stats.stat_enabled
        self.record_put = stats.record_put
        self.record_put_failed = stats.record_put_failed
        self.record_get = stats.record_get
        self.record_get_miss = stats.record_get_miss
        self.record_offset = stats.record_offset
        self.version = WIRE_VERSION
        self.connections: set = set()
        self.connection_guard = ConnectionGuard(config, reactor)
        self.reply_budget = ReplyBudget(config.queued_reply_bytes_max, reactor.seconds)
        self.host = advertised_host(config)
        self.uri = broker_uri(self.host, config.server_port)
        self.registry = registry
        # An async slave's ``meta.slave.replicator.Replicator`` (set by main): ``stats slave``.
        self.replication: Any = None
        # The synchronous-replication role (``meta.sync``; set by main): a samsa master or a
        # gregor slave, None on a plain broker. It answers ``stats sync``.
        self.sync: Any = None
        # Every put gets 403: an async slave, or a gregor slave (main sets it with ``sync``).
        self.refuses_puts = slave_id >= 0
        # True from the end of a successful start (stores open, registered) until stop.
        self.serving = False
        self._port = None
        self._started_at = reactor.seconds()
        # The replies gathered in a batch (``ReplyBatch``), its methods bound here as above.
        replies = ReplyBatch(self.tx.journal.end_of_batch, self.store.commit_staged)
        self._replies = replies
        self.output_pending = replies.output_pending
        self.data_waiters = DataWaiters(reactor, replies.flush_output)
        # After each read of a connection: write what its puts staged, then send the replies
        # that became ready, once per poll (``reactor.call_after_events``); called per read.
        self.end_of_batch: Callable[[], None] = partial(
            after_events_caller(reactor), replies.commit_and_send
        )
        # After a finished fsync batch: write the transaction batches it released (one write
        # per partition), then send the replies its acks made, in one go.
        self.store.flusher.on_batch_done = self.end_of_batch
        self._stopping: defer.Deferred | None = None
        # Held by start() and by each reload, so they never interleave.
        self._config_lock = defer.DeferredLock()
        self._data_lock = DataPathLock()  # one broker per data directory, held while running

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self, listen: bool = True) -> defer.Deferred:
        """Recover the store, listen, and register in ZooKeeper."""
        return self._config_lock.run(self._start, listen)

    @defer.inlineCallbacks
    def _start(self, listen: bool):
        config = self.config
        self._data_lock.acquire(
            [config.data_path, *(t.data_path for t in config.topics), config.data_log_path]
        )
        try:
            self.store.load()
        except BaseException:
            self._data_lock.release()
            raise
        self.store.start()
        yield self.tx.open()
        if listen:
            interface = self.config.host_name or ""
            self._port = self._reactor.listenTCP(
                self.config.server_port, BrokerFactory(self), interface=interface
            )
            use_broker_transport(self._port)
            port = self._port.getHost().port
            self.uri = broker_uri(self.host, port)
            if not interface and is_loopback(self.host):
                log.warning(
                    "broker %d registers %s, a loopback address, but listens on every "
                    "interface: clients on other hosts cannot reach it; set hostName in "
                    "[system] to an address they can reach",
                    self.config.broker_id,
                    self.uri,
                )
        if self.registry is None and self.config.zookeeper.enabled:
            from meta.server.registry import BrokerRegistry

            self.registry = BrokerRegistry(self.config, self._reactor, self.uri, self.slave_id)
        if self.registry is not None:
            topics = sorted({log_.topic for log_ in self.store.partitions()})
            yield self.registry.start(topics)
        self.serving = True
        log.info(
            "broker %d serving %s (data in %s, %d partitions loaded, zookeeper %s)",
            self.config.broker_id,
            self.uri,
            self.config.data_path,
            len(self.store.partitions()),
            self.config.zookeeper.connect if self.config.zookeeper.enabled else "disabled",
        )

    @property
    def port(self) -> int:
        return self._port.getHost().port if self._port is not None else self.config.server_port

    def stop(self) -> defer.Deferred:
        """Graceful stop: deregister, let clients move away, flush, close. Idempotent."""
        if self._stopping is None:
            self._stopping = defer.ensureDeferred(self._stop())
        return self._stopping

    async def _stop(self) -> None:
        log.info("broker %d stopping", self.config.broker_id)
        self.serving = False
        if self._port is not None:
            await defer.maybeDeferred(self._port.stopListening)
        if self.registry is not None:
            try:
                await self.registry.stop()
            except Exception:
                log.exception("could not deregister from ZooKeeper")
            delay_s = self.config.zookeeper.sync_time_ms / 1000
            if delay_s > 0 and self.connections:
                await task.deferLater(self._reactor, delay_s, lambda: None)
        for connection in list(self.connections):
            connection.stop_requests()
        self.data_waiters.release_all()
        self.connection_guard.stop()
        self.tx.close()
        await self.store.close()
        self.tx.close_files()
        self._data_lock.release()
        await self._finish_connections()
        log.info("broker %d stopped", self.config.broker_id)

    async def _finish_connections(self) -> None:
        """Give every connection its last replies and a FIN, then close each one once its
        client closed too or sent nothing for a ``CLOSE_QUIET_S`` tick (closing with unread
        bytes would reset it under replies the client has not read); at most
        ``CLOSE_LINGER_S`` in all."""
        quiet = {connection: -1 for connection in self.connections if connection.finish()}
        deadline = self._reactor.seconds() + CLOSE_LINGER_S
        while quiet and self._reactor.seconds() < deadline:
            await task.deferLater(self._reactor, CLOSE_QUIET_S, lambda: None)
            for connection, received in list(quiet.items()):
                if connection not in self.connections or connection.received_bytes == received:
                    del quiet[connection]
                    connection.transport.loseConnection()
                else:
                    quiet[connection] = connection.received_bytes
        for connection in list(self.connections):
            connection.transport.loseConnection()

    # --- reload ---------------------------------------------------------------------------------

    def reload(self, reread: BrokerConfig) -> defer.Deferred:
        """Apply a re-read ``server.ini``: its topic sections take effect now.

        See the module docstring for what changes and what waits for a restart.

        Args:
            reread: the file as re-read, best with ``load_config(path, overrides,
                topic_defaults=broker.config)``, so that blank topic keys inherit the running
                ``[system]`` values (as in Java).

        Returns:
            A Deferred that fires with a ``ReloadOutcome`` once ZooKeeper is updated (failed
            ZooKeeper updates are in its ``problems``), or fails with ``ReloadRefused`` when
            the broker is stopping.
        """
        return self._config_lock.run(lambda: defer.ensureDeferred(self._reload(reread)))

    async def _reload(self, reread: BrokerConfig) -> ReloadOutcome:
        if self._stopping is not None:
            raise ReloadRefused("the broker is stopping")
        running = self.config
        open_topics = {partition_log.topic for partition_log in self.store.partitions()}
        outcome = reload_outcome(running, reread, open_topics)
        lock_data_paths(self._data_lock, reread)
        for change in outcome.at_restart:
            log.warning("config reload: %s, takes effect at restart", change)
        config = running.with_overrides(topics=reread.topics, checksum=reread.checksum)
        self.config = config
        self.request_stats.set_config(config)
        self.store.set_config(config)
        for connection in self.connections:
            connection.config_changed()
        if self.registry is not None:
            with_data = {partition_log.topic for partition_log in self.store.partitions()}
            problems = await reload_registry(self.registry, config, with_data)
            outcome = dataclasses.replace(outcome, problems=tuple(problems))
        log_reload(self.config.path, outcome)
        return outcome

    # --- used by handlers -------------------------------------------------------------------------

    def partition_for_put(self, topic: str, partition: int):
        """The partition log for a put, created (and registered) on the first put.

        As Java's getOrCreateMessageStore, every put is checked against the running
        configuration, also for a partition that exists (loaded from disk, or left by a
        reload that removed its topic or lowered numPartitions): ``InvalidTopicError`` or
        ``StoreError("wrong partition <p>")``.
        """
        store = self.store
        partition_log = store.accepting(topic, partition)
        if partition_log is not None:
            return partition_log
        created = store.get(topic, partition) is None
        # A slave copies whatever its master has; an illegal topic gets get_or_create's error.
        if created and self.slave_id < 0 and self.config.is_legal_topic(topic):
            check_new_topic(self.config, store.partitions(), topic)
        partition_log = store.get_or_create(topic, partition)
        if created and self.registry is not None:
            registered = self.registry.register_topic(topic)
            registered.addErrback(self._topic_registration_failed, topic)
        return partition_log

    def _topic_registration_failed(self, failure, topic: str) -> None:
        reason = describe_error(failure)
        log.error("could not register topic %s in ZooKeeper: %s; retrying", topic, reason)

    def wait_for_data(self, partition_log, timeout_s: float, woken: Callable[[], None]) -> None:
        """Call ``woken()`` once ``partition_log``'s visible end moves, or after ``timeout_s``
        (``long_poll.DataWaiters``: many woken at once are answered in slices). While the
        broker stops, ``woken`` is called at once."""
        if self._stopping is not None:
            woken()
            return
        self.data_waiters.wait(partition_log, timeout_s, woken)

    # --- connections and stats ------------------------------------------------------------------

    def flush_output(self) -> None:
        """Write the gathered replies of every connection (one transport write each)."""
        self._replies.flush_output()

    def call_soon(self, call: Callable[[], None]) -> None:
        """Run ``call()`` in the next reactor turn (a connection's next slice of requests)."""
        self._reactor.callLater(0, call)

    def connection_made(self, connection) -> None:
        if not self.connection_guard.admit(connection):
            return  # closed at once: maxConnections are open
        self.connections.add(connection)

    def connection_lost(self, connection) -> None:
        self.connection_guard.lost(connection)
        self.connections.discard(connection)
        rolled_back = self.transactions.session_closed(connection)
        if rolled_back:
            log.info("rolled back %d open local transactions of a closed connection", rolled_back)

    def record_put_too_large(self, topic: str, partition: int, size: int) -> None:
        """Count a put refused for its size (compatibility.md) for ``stats rejected``, and log it:
        the first one, then at most one line per ``TOO_LARGE_LOG_INTERVAL_S`` with the count."""
        counters = self.counters
        counters.put_too_large += 1
        counters.put_too_large_last = f"{topic}-{partition} {size}"
        now = self._reactor.seconds()
        if self._too_large_logged_at is not None and (
            now - self._too_large_logged_at < TOO_LARGE_LOG_INTERVAL_S
        ):
            return
        self._too_large_logged_at = now
        log.warning(
            "refused a put of %d bytes to %s-%d: larger than maxMessageSize %d (a Java broker "
            "stores it, but no get can return it); %d refused so far, see 'stats rejected'",
            size,
            topic,
            partition,
            self.config.message_bytes_max,
            counters.put_too_large,
        )

    def render_stats(self, item: str) -> tuple[int, bytes]:
        if is_json_item(item):  # ours: one JSON document per item (meta.server.json_stats)
            return render_json_stats(item, self, self._started_at, self._reactor.seconds())
        if item == "slave" and self.replication is not None:
            # Ours, on a slave only: replication lag per partition (meta.slave.lag). On a
            # master "slave" stays what Java makes of it: a topic name.
            return 200, self.replication.lag_body()
        if item == "sync" and self.sync is not None:
            # Ours, on a samsa master or a gregor slave: the replication state. Elsewhere
            # "sync" stays a topic name, as on Java brokers (a samsa master tells a metaq-py
            # slave from a Java one by this difference).
            return 200, self.sync.stats_body()
        partitions = tuple(
            PartitionView(
                p.topic, p.partition, p.min_offset, p.max_offset, p.message_count, p.byte_count
            )
            for p in self.store.partitions()
        )
        view = BrokerView(
            pid=os.getpid(),
            broker_id=self.config.broker_id,
            port=self.port,
            started_at=self._started_at,
            now=self._reactor.seconds(),
            version=self.version,
            slave=self.slave_id >= 0,
            curr_connections=len(self.connections),
            threads=threading.active_count(),
            counters=self.counters,
            config=self.config,
            partitions=partitions,
            transactions=tuple(self.transactions.describe()) if item == "transactions" else (),
        )
        return render_stats(item, view, self.realtime)
