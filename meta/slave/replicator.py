"""``Replicator``: an async slave copying its master, byte for byte.

The slave is an ordinary client of its master (STYLE 24): every ``POLL_INTERVAL_S`` it reads
through its ``BrokerRegistry`` the master with its own ``brokerId`` (``ids/B/master``) and the
topics that master serves to subscribers (``topics-sub/T/B-m``, partitions
``0..numParts-1``), and runs a ``SlaveFetchManager`` (the client's fetch loop) on exactly those
partitions, as consumer group ``slaveGroup``, with ``slaveMaxDelayInMills`` as the fetch
back-off maximum (and as the long-polling wait, compatibility.md). When the master, its address,
or its topics and partitions change (a topic created on the master, a master restarted), the
fetch loop is stopped and started again on the new set.

Offsets: every partition is fetched from the **local** end of its log (0 when there is no
local partition yet), never from ZooKeeper (Java's ``SlaveOffsetStorage``): the
consumer-id node is registered (``meta.slave.consumer_node``) but no offset and no owner
node is ever written. When the master's data for a partition with no local data starts
after 0 (it answers 301), the local partition is created with its first segment at the
master's first offset (``_start_at``, as Java's slave does), so offsets match exactly. Each
fetched record is appended verbatim (same header, id, flag and payload) through the broker's
store, the records of one fetch as one write (two around a master segment boundary, see
"Segment boundaries" in ``meta.slave.fetcher``), so segments roll at the same offsets as on
the master and every file stays byte-identical; the append checks first that the local end
equals the fetched offset, and the fetch goes on once the write is done (the fsync and its
acknowledgement follow). A partition that cannot go on (see ``meta.slave.fetcher``) is
stopped with an ERROR until the slave restarts; the others go on.

Each poll also asks the master ``stats offsets`` (``MasterLink``) to follow the replication
lag (``meta.slave.lag``, shown by ``stats slave``), and, with ``autoSyncMasterConfig``, reads
``ids/B/master_config_checksum``: when it differs from the last synced one (and once after
start-up), the master's ``server.ini`` is fetched with ``stats config`` and applied as a
reload, keeping the slave's own settings (``meta.slave.config_sync``). The config is synced
before the fetch set changes, and with ``autoSyncMasterConfig`` a master topic that this
slave's config does not accept yet is left out (logged) until a synced config accepts it,
since the master registers a new topic before it rewrites its checksum.

Thread affinity: reactor thread only; the fetch threads reach it through ``callFromThread``;
blocking calls (``MasterLink``, ``ConsumerNode``, stopping the fetch loop) run in Twisted's
thread pool, one at a time under ``_lock``.
"""

from __future__ import annotations

import logging
from typing import Any

from twisted.internet import defer, task, threads

from meta.client.cluster import Partition
from meta.client.factory import ConnectionPool
from meta.client.fetch.manager import FetchRequest, FetchSettings
from meta.config import SlaveConfig
from meta.config.reload import ReloadRefused
from meta.errors import ConfigError, MetaError, describe_error
from meta.protocol.commands import LONG_MAX
from meta.slave.config_sync import write_merged_config
from meta.slave.consumer_node import ConsumerNode, ConsumerNodeError
from meta.slave.fetcher import Layout, ReplicationHalted, SlaveFetchManager
from meta.slave.lag import LagTracker, PartitionLag, parse_offsets, stats_body
from meta.slave.master_link import MasterLink, MasterLinkError
from meta.slave.plan import NO_MASTER, MasterView, master_view
from meta.slave.services import SlaveBroker
from meta.store.partition import PartitionLog

log = logging.getLogger("meta.slave")

POLL_INTERVAL_S = 1.0
"""How often ZooKeeper is read for the master and its topics."""
FETCH_BYTES = 1024 * 1024
"""Fetch size per get (Java's slave subscribes with 1 MiB); grows for a larger record."""
FETCH_THREADS_MAX = 16
FETCH_TIMEOUT_S = 10.0
LONG_POLL_MAX_MS = 5000
CONFIG_ATTEMPTS = 3
"""``stats config`` attempts per checksum change (Java's ``SubscribeHandler``)."""


class Replicator:
    """Copies the master of ``broker``'s id into ``broker``'s store.

    Args:
        broker: the started slave ``Broker`` (``slave_id >= 0``, ZooKeeper enabled); only
            what ``meta.slave.services.SlaveBroker`` names is used.
        slave: the ``async_slave.properties`` settings.
        reactor: the reactor (the broker's).
        poll_interval_s: how often ZooKeeper is read.
    """

    def __init__(
        self,
        broker: SlaveBroker,
        slave: SlaveConfig,
        reactor: Any,
        poll_interval_s: float = POLL_INTERVAL_S,
    ) -> None:
        self._broker = broker
        self._slave = slave
        self._reactor = reactor
        self._poll_interval_s = poll_interval_s
        self._pool = ConnectionPool(connect_timeout_s=FETCH_TIMEOUT_S, value_in_place=True)
        self._view: MasterView = NO_MASTER
        self._problems: tuple[str, ...] = ()
        self._fetcher: SlaveFetchManager | None = None
        self._halted: dict[tuple[str, str], str] = {}
        self._lock = defer.DeferredLock()
        self._loop: task.LoopingCall | None = None
        self._stopped = False
        self._lag = LagTracker()
        self._link = MasterLink(FETCH_TIMEOUT_S)
        self._link_failing = False
        self._synced_checksum: bytes | None = None
        self._waiting_topics: frozenset[str] = frozenset()
        self._node = ConsumerNode(broker.config.zookeeper, slave.slave_group)
        self._node_failing = False

    @property
    def halted(self) -> dict[tuple[str, str], str]:
        """Stopped partitions, ``(topic, "B-P")`` -> why."""
        return dict(self._halted)

    def start(self) -> None:
        """Start following the master (the first ZooKeeper read happens now)."""
        assert self._loop is None, "start() may be called once"
        if self._stopped:
            return  # stopped before the broker finished starting
        log.info(
            "async slave %d of broker %d: copying its master as group %s (slaveMaxDelayInMills "
            "%d, autoSyncMasterConfig %s)",
            self._slave.slave_id,
            self._broker.config.broker_id,
            self._slave.slave_group,
            self._slave.slave_max_delay_ms,
            self._slave.auto_sync_master_config,
        )
        self._loop = task.LoopingCall(self._poll)
        self._loop.clock = self._reactor
        self._loop.start(self._poll_interval_s, now=True)

    def stop(self) -> defer.Deferred:
        """Stop fetching (batches in progress are appended first) and close connections."""
        self._stopped = True
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        stopped = self._lock.run(lambda: defer.ensureDeferred(self._shutdown()))
        stopped.addBoth(lambda result: self._pool.close() or self._link.close() or result)
        return stopped

    async def _shutdown(self) -> None:
        await self._stop_fetcher()
        await threads.deferToThread(self._node.close)

    def lag_body(self) -> bytes:
        """The ``stats slave`` reply body (``meta.slave.lag``). Reactor thread."""
        return stats_body(self.lag_rows())

    def lag_rows(self) -> list[PartitionLag]:
        """One ``PartitionLag`` per partition, as ``stats slave`` lists them. Reactor thread."""
        halted = {(topic, int(text.rsplit("-", 1)[1])) for topic, text in self._halted}
        return self._lag.rows(
            self._local_ends(),
            self._view.partitions,
            halted,
            self._view.address is not None,
            self._reactor.seconds(),
        )

    def _local_ends(self) -> dict[tuple[str, int], int]:
        return {(p.topic, p.partition): p.max_offset for p in self._broker.store.partitions()}

    # --- following the master -----------------------------------------------------------------

    def _poll(self) -> defer.Deferred | None:
        if self._lock.locked or self._stopped:
            return None  # the previous refresh is still running: skip this tick
        refreshed = self._lock.run(lambda: defer.ensureDeferred(self._refresh()))
        refreshed.addErrback(self._refresh_failed)
        return refreshed

    def _refresh_failed(self, failure: Any) -> None:
        # Keep copying with what we know; the next tick reads again.
        log.warning("cannot read the master from ZooKeeper: %s", failure.getErrorMessage())

    async def _refresh(self) -> None:
        master, topics = await self._broker.registry.read_master()
        view = master_view(master, topics)
        if view.problems != self._problems:
            self._problems = view.problems
            for problem in view.problems:
                log.warning("master of broker %d: %s", self._broker.config.broker_id, problem)
        if view.address is not None and self._slave.auto_sync_master_config:
            await self._sync_config(view.address)
            view = self._accepted_only(view)
        if self._stopped:
            return
        if (view.address, view.partitions) != (self._view.address, self._view.partitions):
            await self._follow(view)
        if view.address is not None and view.partitions and not self._stopped:
            await self._register_consumer(view)
        if view.address is not None and not self._stopped:
            await self._observe(view)

    async def _register_consumer(self, view: MasterView) -> None:
        """Write the consumer-id node with the copied topics (when they or the session changed)."""
        topics = sorted({topic for topic, _partition in view.partitions})
        try:
            written = await threads.deferToThread(self._node.write, topics)
        except ConsumerNodeError as error:
            if not self._node_failing:
                log.warning("consumer group %s: %s", self._slave.slave_group, error)
            self._node_failing = True
            return
        self._node_failing = False
        if written:
            log.info(
                "registered %s (topics %s; no owner or offset nodes: the copy resumes from "
                "the local end)",
                self._node.path,
                ",".join(topics),
            )

    async def _follow(self, view: MasterView) -> None:
        await self._stop_fetcher()
        self._view = view
        if view.address is None:
            log.warning(
                "broker %d has no master in ZooKeeper: replication waits for one",
                self._broker.config.broker_id,
            )
            return
        if not self._stopped:
            self._start_fetcher(view)

    def _accepted_only(self, view: MasterView) -> MasterView:
        """``view`` without the topics this slave's config does not accept (yet)."""
        config = self._broker.config
        waiting = frozenset(t for t, _p in view.partitions if not config.is_legal_topic(t))
        if waiting - self._waiting_topics:
            log.info(
                "not copying %s yet: not in %s; waiting for the master's config "
                "(autoSyncMasterConfig)",
                ", ".join(sorted(waiting - self._waiting_topics)),
                config.path,
            )
        self._waiting_topics = waiting
        kept = tuple(key for key in view.partitions if key[0] not in waiting)
        return MasterView(view.address, kept, view.problems)

    async def _observe(self, view: MasterView) -> None:
        """Read the master's partition ends for the lag (``stats offsets``)."""
        try:
            code, body = await threads.deferToThread(self._link.stats, view.address, "offsets")
            ends = parse_offsets(body) if code == 200 else None
        except (MasterLinkError, ValueError) as error:
            self._link_failed(str(error))
            return
        if ends is None:
            self._link_failed(f"master {view.address.uri} answered stats offsets with {code}")
            return
        self._link_failing = False
        copied = set(view.partitions)
        observed = {key: end for key, end in ends.items() if key in copied}
        self._lag.observe(observed, self._local_ends(), self._reactor.seconds())

    def _link_failed(self, reason: str) -> None:
        if not self._link_failing:
            log.warning("cannot ask the master for its offsets or config: %s", reason)
        self._link_failing = True

    async def _sync_config(self, address: Any) -> None:
        """autoSyncMasterConfig: take the master's server.ini when its checksum changed."""
        checksum = await self._broker.registry.read_master_checksum()
        if checksum is None or checksum == self._synced_checksum or self._stopped:
            return
        body = None
        for attempt in range(1, CONFIG_ATTEMPTS + 1):
            try:
                code, body = await threads.deferToThread(self._link.stats, address, "config")
            except MasterLinkError as error:
                code, body = 0, str(error).encode()
            if code == 200:
                break
            log.warning("stats config to master %s, attempt %d: %r", address.uri, attempt, body)
            body = None
        if body is None:
            return  # the next poll tries again
        self._synced_checksum = checksum
        await self._apply_master_config(address, checksum.decode("ascii", "replace"), body)

    async def _apply_master_config(self, address: Any, checksum: str, body: bytes) -> None:
        running = self._broker.config
        try:
            result = await threads.deferToThread(write_merged_config, body, running)
        except (ConfigError, OSError) as error:
            log.error(
                "autoSyncMasterConfig: the config of master %s (checksum %s) is not applied, "
                "%s is unchanged: %s",
                address.uri,
                checksum,
                running.path,
                error,
            )
            return
        if result.reread is None:
            log.info(
                "autoSyncMasterConfig: %s matches master %s (checksum %s)",
                running.path,
                address.uri,
                checksum,
            )
            return
        log.info(
            "autoSyncMasterConfig: wrote the config of master %s (checksum %s) to %s, keeping "
            "this slave's own settings; %s",
            address.uri,
            checksum,
            running.path,
            result.outcome.summary(running.path),
        )
        try:
            await self._broker.reload(result.reread)
        except ReloadRefused as error:
            log.warning("autoSyncMasterConfig: reload refused: %s", error)

    def _start_fetcher(self, view: MasterView) -> None:
        broker_id = self._broker.config.broker_id
        requests = []
        layouts: dict[tuple[str, str], Layout] = {}
        for topic, partition in view.partitions:
            key = (topic, f"{broker_id}-{partition}")
            if key in self._halted:
                continue
            partition_log = self._broker.store.get(topic, partition)
            if partition_log is not None:
                offset = partition_log.next_offset
                layouts[key] = _layout(partition_log)
            else:  # created at the first append (or at the master's first offset)
                offset = 0
                layouts[key] = (0, self._broker.config.segment_bytes_max)
            source = Partition(broker_id, partition)
            requests.append(FetchRequest(topic, source, view.address, offset, max_size=FETCH_BYTES))
        delay_ms = self._slave.slave_max_delay_ms
        settings = FetchSettings(
            group=self._slave.slave_group,
            fetch_timeout_s=FETCH_TIMEOUT_S,
            max_delay_fetch_ms=delay_ms,
            long_poll_ms=min(delay_ms, LONG_POLL_MAX_MS),
            offset_reset="error",
            fetch_threads=max(1, min(len(requests), FETCH_THREADS_MAX)),
            max_fetch_retries=LONG_MAX,
        )
        fetcher = SlaveFetchManager(
            self._pool, settings, self._reactor, self._append, self._halt, self._start_at, layouts
        )
        fetcher.start(requests)
        self._fetcher = fetcher
        topics = sorted({request.topic for request in requests})
        log.info(
            "copying %d partitions of %d topics from master %s: %s",
            len(requests),
            len(topics),
            view.address.uri,
            ", ".join(topics) or "none",
        )

    async def _stop_fetcher(self) -> None:
        fetcher, self._fetcher = self._fetcher, None
        if fetcher is not None:
            # Off the reactor: the fetch threads wait for their appends, which run here.
            await threads.deferToThread(fetcher.stop)

    # --- called by the fetch threads through callFromThread ------------------------------------

    def _halt(self, key: tuple[str, str], reason: str) -> None:
        if key in self._halted:
            return  # already stopped and logged (a failed ack, then the refused append)
        self._halted[key] = reason
        log.error(
            "replication of %s partition %s stopped: %s; the other partitions go on; restart "
            "the slave once the cause is fixed",
            key[0],
            key[1],
            reason,
        )

    def _start_at(self, topic: str, partition: int, offset: int) -> Layout | None:
        """Create the local partition with its first segment at ``offset``.

        Returns:
            The new partition's layout; None when the partition exists already (then the
            master's 301 means a gap, and the caller stops the partition).

        Raises:
            ReplicationHalted: the topic is not accepted here, or the store failed.
        """
        broker = self._broker
        if broker.store.get(topic, partition) is not None:
            return None
        try:
            partition_log = broker.store.get_or_create(topic, partition, first_offset=offset)
        except MetaError as error:
            raise ReplicationHalted(
                f"cannot create the local partition: {error} (see the [topic=...] sections of "
                f"{broker.config.path})"
            ) from None
        if broker.registry is not None:  # as a first put does
            registered = broker.registry.register_topic(topic)
            registered.addErrback(
                lambda failure: log.error(
                    "could not register topic %s: %s; retrying", topic, describe_error(failure)
                )
            )
        return _layout(partition_log)

    def _append(
        self,
        topic: str,
        partition: int,
        base: int,
        records: bytes | memoryview,
        entries: list[int],
        counts: list[int] | None = None,
    ) -> defer.Deferred:
        """Append ``records`` verbatim at ``base``, one stage per entry of ``entries`` sizes,
        each holding ``counts`` records (default: one each).

        ``records`` may be a ``memoryview`` of a fetched reply: it and the entries staged
        from it (views, not copies) are only read, by the store's write.

        The fetch thread may go on as soon as the records are **written** (the local end
        moved past them): their acknowledgement (the fsync, under group commit) comes later
        and several fetches share one fsync. Nobody waits for a slave's acknowledgement, and
        a failed one stops the partition (``_ack_failed``; the store refuses later appends).

        Returns:
            A Deferred firing with the partition's ``Layout`` once every entry is written
            (at once, normally), or failing with the store's error.

        Raises:
            ReplicationHalted: the local partition cannot be created, takes no appends, or
                its end is not ``base``.
        """
        broker = self._broker
        try:
            partition_log = broker.partition_for_put(topic, partition)
        except MetaError as error:
            raise ReplicationHalted(
                f"cannot create the local partition: {error} (see the [topic=...] sections of "
                f"{broker.config.path})"
            ) from None
        if partition_log.next_offset != base:
            raise ReplicationHalted(
                f"the local end {partition_log.next_offset} differs from the master's offset "
                f"{base}: this slave's data is not a copy of the master's"
            )
        if not partition_log.accepts_appends:
            raise ReplicationHalted(f"the local partition takes no appends ({partition_log})")
        acknowledged = _BatchAck(base, entries)
        if len(entries) > 1 and type(records) is not memoryview:
            records = memoryview(records)  # slices of the view are not copies
        position = 0
        for size, count in zip(entries, counts or [1] * len(entries), strict=True):
            partition_log.stage(records[position : position + size], acknowledged.ack, count)
            position += size
        broker.store.commit_staged()
        broker.flush_output()  # replies to long-polling gets woken by these appends
        if acknowledged.done.called or partition_log.written_end < base + len(records):
            # Failed already, or not written yet: the fetch thread waits for the outcome.
            return acknowledged.done.addCallback(lambda _end: _layout(partition_log))
        key = (topic, f"{broker.config.broker_id}-{partition}")
        acknowledged.done.addErrback(self._ack_failed, key, base)
        return defer.succeed(_layout(partition_log))

    def _ack_failed(self, failure: Any, key: tuple[str, str], base: int) -> None:
        self._halt(key, f"the append at offset {base} failed: {failure.value!r}")


def _layout(partition_log: PartitionLog) -> Layout:
    """``(start of the last segment, roll size)`` of a local partition."""
    return partition_log.segments[-1].start, partition_log.segment_bytes_max


class _BatchAck:
    """Collects the acknowledgements of one batch's records; they come in append order."""

    def __init__(self, base: int, sizes: list[int]) -> None:
        self.done: defer.Deferred = defer.Deferred()
        self._base = base
        self._sizes = sizes
        self._expected = base
        self._index = 0

    def ack(self, offset: int | None, error: BaseException | None) -> None:
        if self.done.called:
            return
        if error is not None:
            self.done.errback(error)
            return
        if offset != self._expected:
            self.done.errback(
                ReplicationHalted(f"a record was stored at {offset}, expected {self._expected}")
            )
            return
        self._expected += self._sizes[self._index]
        self._index += 1
        if self._index == len(self._sizes):
            self.done.callback(self._expected - self._base)
