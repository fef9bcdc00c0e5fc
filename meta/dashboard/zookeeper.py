"""The dashboard's views that read ZooKeeper: consumer groups, the cluster, and the skip.

Every ZooKeeper call of the dashboard runs on its own worker (``meta.dashboard.zk_reads``:
bounded, shared runs of identical reads, a short cache, 503/504 naming ZooKeeper), through
``meta.admin.zk.ZkAdmin`` on the registry's kazoo session
(``BrokerRegistry.read_on_this_thread``), never on the registry's worker: however many pages
are asked for, the broker's registration does not wait behind them. Results come back to the
reactor, where the pages are built.
``/cluster`` asks each registered broker for its ``stats config`` over TCP on the reactor's
thread pool, with a short timeout; a broker that does not answer is shown as unreachable, and
answers are cached for ``PEER_CACHE_S``.

Reactor thread only (the functions passed to ``ZooKeeperReads`` and ``deferToThread`` run
elsewhere and touch no shared state).
"""

from __future__ import annotations

import configparser
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer, threads

from meta.admin.client import NotFoundError
from meta.admin.zk import ZkAdmin
from meta.client.cluster import BrokerAddress
from meta.client.net.connection import BrokerConnection
from meta.dashboard.html import bar_chart, error_fragment, escape, facts_table, heading, link, table
from meta.dashboard.routes import Reply, html_reply, json_reply
from meta.dashboard.zk_reads import ZooKeeperReads, ZooKeeperSlow
from meta.errors import MetaError
from meta.protocol.commands import Stats

PEER_CACHE_S = 30.0
LAG_GROUPS_MAX = 50
"""Groups one ``/metrics?groups=`` scrape may name (each costs ZooKeeper reads per topic)."""
PEER_TIMEOUT_S = 2.0
SKIP_OWNED = (
    "Could not skip pending messages,because the parition was owned by {owner},"
    "maybe you have to stop the consumers at first."
)
"""The Java dashboard's refusal text, spelling included."""
SKIP_DONE = "success"


@dataclass(frozen=True)
class GroupPartition:
    """One partition of this broker as a group sees it."""

    partition: int
    owner: str | None
    committed: int | None
    committed_msg_id: int | None
    min_offset: int | None
    max_offset: int | None

    @property
    def pending_bytes(self) -> int | None:
        if self.max_offset is None:
            return None
        return max(0, self.max_offset - (self.committed or 0))

    @property
    def consumed_bytes(self) -> int | None:
        if self.min_offset is None or self.committed is None:
            return None
        return max(0, self.committed - self.min_offset)


class ZooKeeperViews:
    """Pages and actions that need ZooKeeper; answers Deferreds of ``Reply``.

    Args:
        broker: the ``Broker``; ZooKeeper is read through ``broker.registry``.
        clock: seconds (the reactor's), for the cache of peers' dashboard ports.
        own_port: returns this dashboard's port (None when not listening).
        reactor: the reactor, for the ZooKeeper worker (``ZooKeeperReads``).
    """

    def __init__(self, broker: Any, clock: Any, own_port: Any, reactor: Any) -> None:
        self._broker = broker
        self._clock = clock
        self._own_port = own_port
        self._peers: dict[str, tuple[float, int | None]] = {}
        self.reads = ZooKeeperReads(reactor)

    # --- consumer groups ------------------------------------------------------------------

    def page(self, topic: str, group: str, wants_json: bool) -> Any:
        """``/topics/<t>?group=G``: per partition of this broker, owner, offsets and lag."""
        read = self._read(("group", group, topic), lambda admin: _read_group(admin, group, topic))
        read.addCallback(self._group_reply, topic, group, wants_json)
        read.addErrback(_error_reply, wants_json)
        return read

    def _group_reply(self, found: tuple, topic: str, group: str, wants_json: bool) -> Reply:
        owners, offsets = found
        config = self._broker.config
        section = config.topic_config(topic)
        rows = []
        for number in range(section.num_partitions):
            name = f"{config.broker_id}-{number}"
            committed = offsets.get(name)
            partition_log = self._broker.store.get(topic, number)
            rows.append(
                GroupPartition(
                    number,
                    owners.get(name),
                    None if committed is None else committed.offset,
                    None if committed is None else committed.msg_id,
                    None if partition_log is None else partition_log.min_offset,
                    None if partition_log is None else partition_log.max_offset,
                )
            )
        filters = dict(section.filters)
        if wants_json:
            return json_reply(_group_json(topic, group, filters.get(group), rows))
        return html_reply(_group_html(topic, group, filters.get(group), rows))

    def groups_of(self, topic: str) -> Any:
        """Deferred: the groups with offsets or owners for ``topic`` (empty without ZK)."""
        if self._broker.registry is None:
            return defer.succeed([])
        return self._read(("groups of", topic), lambda admin: _groups_of(admin, topic))

    def consumer_lag(self, groups: list[str]) -> Any:
        """Deferred: ``(group, topic, partition, lag bytes)`` for this broker's partitions
        that ``groups`` (at most ``LAG_GROUPS_MAX``) have committed offsets for."""
        groups = groups[:LAG_GROUPS_MAX]
        logs = {(log.topic, log.partition): log for log in self._broker.store.partitions()}
        topics = sorted({topic for topic, _partition in logs})
        read = self._read(
            ("offsets", tuple(groups), tuple(topics)),
            lambda admin: _read_offsets(admin, groups, topics),
        )
        broker_id = self._broker.config.broker_id

        def lag_rows(offsets: dict) -> list[tuple[str, str, int, int]]:
            rows = []
            for (group, topic), committed in sorted(offsets.items()):
                for name, offset in sorted(committed.items()):
                    owner, _, number = name.partition("-")
                    partition_log = logs.get((topic, int(number))) if number.isdigit() else None
                    if owner != str(broker_id) or partition_log is None or offset.error:
                        continue
                    lag = max(0, partition_log.max_offset - offset.offset)
                    rows.append((group, topic, partition_log.partition, lag))
            return rows

        return read.addCallback(lag_rows)

    # --- the skip action --------------------------------------------------------------------

    def skip(self, topic: str, group: str, partition: int) -> Any:
        """Java's skip: refuse an owned partition, else commit the partition's end."""
        partition_log = self._broker.store.get(topic, partition)
        if partition_log is None:
            return defer.succeed(f"topic {topic} has no partition {partition} on this broker")
        end = partition_log.max_offset
        name = f"{self._broker.config.broker_id}-{partition}"
        done = self._read(None, lambda admin: _skip(admin, group, topic, name, end))
        done.addBoth(lambda result: self.reads.forget() or result)  # pages show the skip
        return done

    # --- the cluster ------------------------------------------------------------------------

    def cluster(self, wants_json: bool) -> Any:
        """``/cluster``: every broker registered in ZooKeeper, with its dashboard link."""
        read = self._read(("brokers",), lambda admin: admin.brokers())
        read.addCallback(self._with_dashboard_ports)
        read.addCallback(self._cluster_reply, wants_json)
        read.addErrback(_error_reply, wants_json)
        return read

    @defer.inlineCallbacks
    def _with_dashboard_ports(self, nodes: list) -> Any:
        rows = []
        for node in nodes:
            uris = [(None, node.master)] + sorted(node.slaves.items())
            for slave_id, uri in uris:
                if not uri:
                    continue
                port = yield self._dashboard_port(uri)
                rows.append((node.broker_id, slave_id, uri, port))
        return rows

    def _dashboard_port(self, uri: str) -> Any:
        if uri == self._broker.uri:
            return defer.succeed(self._own_port())
        now_s = self._clock()
        cached = self._peers.get(uri)
        if cached is not None and now_s - cached[0] < PEER_CACHE_S:
            return defer.succeed(cached[1])
        asked = threads.deferToThread(_peer_dashboard_port, uri)
        asked.addCallback(lambda port: self._peers.__setitem__(uri, (now_s, port)) or port)
        return asked

    def _cluster_reply(self, rows: list, wants_json: bool) -> Reply:
        own = self._broker.uri
        if wants_json:
            return json_reply(
                [
                    {
                        "broker_id": b,
                        "slave_id": s,
                        "uri": u,
                        "dashboard_port": p,
                        "current": u == own,
                    }
                    for b, s, u, p in rows
                ]
            )
        shown = []
        for broker_id, slave_id, uri, port in rows:
            address = BrokerAddress.parse_uri(uri)
            if port is None:
                dashboard = "unreachable"
            elif port < 0:
                dashboard = "off"
            elif port == 0:
                dashboard = "a free port chosen at start"
            else:
                dashboard = link(f"http://{address.host}:{port}/", f"{address.host}:{port}")
            shown.append(
                (
                    escape(broker_id),
                    escape("no" if slave_id is None else f"slave {slave_id}"),
                    escape(uri),
                    dashboard,
                    "<strong>Current</strong>" if uri == own else "",
                )
            )
        headers = ("Broker", "Slave", "URI", "Dashboard", "")
        return html_reply(heading("Cluster") + table(headers, shown, raw_columns=(0, 1, 2, 3, 4)))

    def _read(self, key: Hashable | None, reader: Any) -> Any:
        """``reader(ZkAdmin)`` on the dashboard's worker; ``key`` names the read for
        sharing (None: a write, never shared)."""
        registry = self._broker.registry
        if registry is None:
            return defer.fail(MetaError("ZooKeeper is disabled on this broker (zk.zkEnable)"))
        zookeeper = self._broker.config.zookeeper
        timeout_s = zookeeper.connection_timeout_ms / 1000

        def run(client: Any) -> Any:
            return reader(ZkAdmin(client, zookeeper.connect, zookeeper.root, timeout_s))

        return self.reads.read(key, lambda: registry.read_on_this_thread(run))


def _read_group(admin: ZkAdmin, group: str, topic: str) -> tuple:
    admin.check_group(group)
    return admin.owners(group, topic), admin.offsets(group, topic)


def _read_offsets(admin: ZkAdmin, groups: list[str], topics: list[str]) -> dict:
    return {(group, topic): admin.offsets(group, topic) for group in groups for topic in topics}


def _groups_of(admin: ZkAdmin, topic: str) -> list[str]:
    found = []
    for group in admin.groups():
        path = admin.group_path(group)
        if topic in admin.children(f"{path}/offsets") or topic in admin.children(f"{path}/owners"):
            found.append(group)
    return found


def _skip(admin: ZkAdmin, group: str, topic: str, partition: str, end: int) -> str:
    """Worker thread: refuse an owned partition, else write ``0-<end>`` (as Java does: the
    broker keeps no index from which to learn the last message's id cheaply)."""
    admin.check_group(group)
    owner = admin.owners(group, topic).get(partition)
    if owner:
        return SKIP_OWNED.format(owner=owner)
    admin.write_offset(group, topic, partition, 0, end)
    return SKIP_DONE


def _peer_dashboard_port(uri: str) -> int | None:
    """A thread-pool thread: the peer's ``dashboardHttpPort`` from ``stats config``."""
    try:
        address = BrokerAddress.parse_uri(uri)
        with BrokerConnection(address.host, address.port, timeout_s=PEER_TIMEOUT_S) as peer:
            reply = peer.request(Stats("config"))
    except (OSError, MetaError):
        return None
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(reply.body.decode("utf-8", "replace"))
        return parser.getint("system", "dashboardHttpPort", fallback=8120)
    except (configparser.Error, ValueError):
        return None


def _error_reply(failure: Any, wants_json: bool) -> Reply:
    """An unknown group (404), or ZooKeeper off or unreachable (503): the page's error box
    naming it, or ``{"error": text}`` as JSON."""
    failure.trap(MetaError)
    text = failure.getErrorMessage()
    code = 404 if failure.check(NotFoundError) else 504 if failure.check(ZooKeeperSlow) else 503
    if wants_json:
        return json_reply({"error": text}, code)
    return html_reply(error_fragment(text), code)


def _group_json(topic: str, group: str, filter_name: str | None, rows: list) -> dict:
    return {
        "topic": topic,
        "group": group,
        "filter": filter_name,
        "partitions": [
            {
                "partition": row.partition,
                "owner": row.owner,
                "committed_offset": row.committed,
                "committed_msg_id": row.committed_msg_id,
                "min_offset": row.min_offset,
                "max_offset": row.max_offset,
                "pending_bytes": row.pending_bytes,
                "consumed_bytes": row.consumed_bytes,
            }
            for row in rows
        ],
    }


def _group_html(topic: str, group: str, filter_name: str | None, rows: list) -> str:
    shown = []
    for row in rows:
        action = f"/topics/{_quote(topic)}/groups/{_quote(group)}/partitions/{row.partition}/skip"
        button = f'<button type="button" data-action="{escape(action)}">Skip</button>'
        shown.append(
            (
                escape(row.partition),
                escape(row.owner),
                escape(row.committed),
                escape(row.max_offset),
                escape(row.pending_bytes),
                escape(row.consumed_bytes),
                button,
            )
        )
    headers = ("Partition", "Owner", "Committed", "Max offset", "Pending bytes", "Consumed", "")
    return (
        heading(f"Group {group} on topic {topic}")
        + facts_table([("Filter", filter_name or "none")])
        + '<p id="action-result" role="status"></p>\n'
        + table(headers, shown, raw_columns=tuple(range(7)))
        + bar_chart(
            f"Pending bytes of group {group}",
            [(f"{topic}-{row.partition}", row.pending_bytes or 0) for row in rows],
            "B",
        )
    )


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")
