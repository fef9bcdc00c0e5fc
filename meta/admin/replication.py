"""``meta-admin replication [BROKER]``: the replication state of every broker, in both HA modes.

For each broker registered in ZooKeeper (``R/brokers/ids/B``) its master is asked
``stats sync``:

* **sync** (a samsa master answers ``role samsa``): its gregor slave (``slave``), whether
  the link is ``connected``, the ``consecutive_failures``, whether it is ``probing`` the
  slave, and whether it is ``advertised`` to producers; then per partition the state
  (``ok``, ``catching-up``, ``diverged``), the master's end and the slave's end as the
  master last saw it. The gregor slave itself is asked ``stats sync`` too (``role gregor``):
  its own end of each partition and the time of its last sync.
* **async**: a master that is not samsa (a plain master answers ``stats sync`` as a topic
  name, as Java does); its async slaves (``ids/B/slave<N>``) are shown as ``meta-admin
  slaves`` shows them (``meta.admin.slaves.lag_rows``).

``parse_sync_stats`` reads both shapes of ``stats sync``::

    role samsa                         role gregor
    slave <host:port>                  master <host:port or ->
    connected true|false               partition <topic>-<p> <end> <last sync ms or 0>
    consecutive_failures <n>
    probing true|false
    advertised true|false
    partition <topic>-<p> ok|catching-up|diverged <master_end> <slave_end or -1>

A broker or slave that cannot be reached is reported on stderr, the other rows are printed,
and the exit status is 2. Single-threaded.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from meta.admin.client import (
    EXIT_OK,
    EXIT_USAGE,
    AdminError,
    BrokerRefusedError,
    parse_broker_address,
)
from meta.admin.options import cluster_options
from meta.admin.output import cell, format_time_ms, table, to_json
from meta.admin.session import ClusterSession
from meta.admin.slaves import lag_rows
from meta.client.cluster import BrokerAddress
from meta.errors import ClientError

HEADERS = ["BROKER", "MODE", "SLAVE", "TOPIC", "PARTITION", "MASTER_END", "SLAVE_END"]
HEADERS += ["STATE", "NOTE"]
SAMSA_KEYS = ("slave", "connected", "consecutive_failures", "probing", "advertised")


@dataclass
class SyncStats:
    """A parsed ``stats sync`` body: ``role`` (``samsa`` or ``gregor``), the key lines in
    ``fields`` and one dict per ``partition`` line in ``partitions``."""

    role: str
    fields: dict[str, str] = field(default_factory=dict)
    partitions: list[dict] = field(default_factory=list)


def parse_sync_stats(body: bytes) -> SyncStats | None:
    """The ``stats sync`` reply body of a samsa master or a gregor slave; None for any other
    answer (a plain broker, an async slave or a Java broker read ``sync`` as a topic name).

    Raises:
        BrokerRefusedError: a ``role`` line is followed by lines of the wrong shape.
    """
    lines = body.decode("utf-8", "replace").splitlines()
    if not lines or lines[0] not in ("role samsa", "role gregor"):
        return None
    stats = SyncStats(lines[0].split(" ", 1)[1])
    for line in lines[1:]:
        tokens = line.split(" ")
        if tokens[0] == "partition":
            stats.partitions.append(_partition(stats.role, tokens, line))
        elif len(tokens) == 2:
            stats.fields[tokens[0]] = tokens[1]
        else:
            raise BrokerRefusedError(f"unexpected 'stats sync' line {line!r}")
    return stats


def _partition(role: str, tokens: list[str], line: str) -> dict:
    try:
        topic, _, number = tokens[1].rpartition("-")
        if role == "samsa" and len(tokens) == 5:
            return {
                "topic": topic,
                "partition": int(number),
                "state": tokens[2],
                "master_end": int(tokens[3]),
                "slave_end": int(tokens[4]),
            }
        if role == "gregor" and len(tokens) == 4:
            return {
                "topic": topic,
                "partition": int(number),
                "end": int(tokens[2]),
                "last_sync_ms": int(tokens[3]),
            }
    except (IndexError, ValueError):
        pass
    raise BrokerRefusedError(f"unexpected 'stats sync' line {line!r}")


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``replication``."""
    del connection  # Brokers are found through ZooKeeper.
    replication = commands.add_parser(
        "replication",
        parents=[cluster_options()],
        help="show the replication state of every broker: sync (samsa/gregor) or async slaves",
        description="For each broker registered in ZooKeeper, ask its master 'stats sync'. A "
        "samsa master shows its gregor slave, the link (connected, consecutive failures, "
        "probing, advertised to producers) and per partition ok, catching-up or diverged "
        "with the master's and the slave's end; the gregor slave is asked too (its end and "
        "last sync time). Any other master shows its async slaves' lag, as 'meta-admin "
        "slaves' does.",
    )
    replication.add_argument(
        "broker_id", nargs="?", type=int, metavar="BROKER", help="only this broker id"
    )
    replication.set_defaults(run=run_replication, open_session=ClusterSession.from_arguments)


def run_replication(arguments: argparse.Namespace, session: ClusterSession) -> int:
    zk = session.zk
    nodes = zk.brokers()
    if arguments.broker_id is not None:
        nodes = [zk.broker(arguments.broker_id)]
    status, brokers = EXIT_OK, []
    for node in nodes:
        try:
            brokers.append(broker_replication(session, node))
        except (AdminError, ClientError) as error:
            print(f"meta-admin: broker {node.broker_id} left out: {error}", file=sys.stderr)
            status = EXIT_USAGE
    if arguments.json:
        print(to_json({"zk_root": zk.root, "brokers": brokers}))
        return status
    rows = [row for broker in brokers for row in replication_rows(broker)]
    if not rows:
        print("no replicated partitions" if status == EXIT_OK else "no broker answered")
        return status
    print(table(HEADERS, rows))
    return status


def broker_replication(session: ClusterSession, node) -> dict:
    """One broker's replication document: ``mode`` ``sync`` (with ``samsa`` and ``gregor``)
    or ``async`` (with ``slaves``: each slave's ``meta-admin slaves`` rows, or its error).

    Raises:
        AdminError: the broker has no master or cannot be asked.
    """
    if node.master is None:
        raise BrokerRefusedError("no master is registered")
    address = BrokerAddress.parse_uri(node.master)
    master = session.client_at(address.host, address.port)
    samsa = parse_sync_stats(master.stats("sync").body)
    if samsa is not None and samsa.role == "samsa":
        return {"broker_id": node.broker_id, "mode": "sync", **_sync_view(session, samsa)}
    slaves = []
    for slave_id in sorted(node.slaves):
        try:
            slave_address = BrokerAddress.parse_uri(node.slaves[slave_id])
            rows = lag_rows(session.client_at(slave_address.host, slave_address.port))
            slaves.append({"slave_id": slave_id, "partitions": rows, "error": None})
        except (AdminError, ClientError) as error:
            slaves.append({"slave_id": slave_id, "partitions": [], "error": str(error)})
    return {"broker_id": node.broker_id, "mode": "async", "slaves": slaves}


def _sync_view(session: ClusterSession, samsa: SyncStats) -> dict:
    view: dict = {"samsa": {**samsa.fields, "partitions": samsa.partitions}, "gregor": None}
    try:
        host, port = parse_broker_address(samsa.fields.get("slave", ""))
        gregor = parse_sync_stats(session.client_at(host, port).stats("sync").body)
        if gregor is None or gregor.role != "gregor":
            raise BrokerRefusedError("it does not answer 'stats sync' as a gregor slave")
        view["gregor"] = {**gregor.fields, "partitions": gregor.partitions}
    except (AdminError, ClientError) as error:
        view["gregor_error"] = str(error)
    return view


def replication_rows(broker: dict) -> list[list[object]]:
    """The table rows of one broker's replication document (``broker_replication``); a
    value not known yet prints as ``-`` (``output.cell``)."""
    return _async_rows(broker) if broker["mode"] == "async" else _sync_rows(broker)


def _async_rows(broker: dict) -> list[list[object]]:
    broker_id = broker["broker_id"]
    rows: list[list[object]] = []
    for slave in broker["slaves"]:
        if slave["error"] is not None:
            rows.append([broker_id, "async", slave["slave_id"], *["-"] * 4, "-", slave["error"]])
        for row in slave["partitions"]:
            rows.append(
                [broker_id, "async", slave["slave_id"], row["topic"],
                 f"{broker_id}-{row['partition']}", row["master_end"], row["slave_end"],
                 row["state"], f"lag {cell(row['lag_bytes'])} bytes, {cell(row['lag_seconds'])} s"]
            )  # fmt: skip
    return rows


def _sync_rows(broker: dict) -> list[list[object]]:
    broker_id = broker["broker_id"]
    samsa = broker["samsa"]
    link = ", ".join(f"{key} {samsa.get(key, '-')}" for key in SAMSA_KEYS[1:])
    gregor = {
        (row["topic"], row["partition"]): row
        for row in (broker["gregor"] or {}).get("partitions", [])
    }
    rows: list[list[object]] = []
    for row in samsa["partitions"]:
        seen = gregor.get((row["topic"], row["partition"]))
        note = link if seen is None else f"{link}; slave end {cell(seen['end'])}, last sync "
        if seen is not None:
            note += format_time_ms(seen["last_sync_ms"]) if seen["last_sync_ms"] else "never"
        rows.append(
            [broker_id, "sync", samsa.get("slave", "-"), row["topic"],
             f"{broker_id}-{row['partition']}", row["master_end"], row["slave_end"],
             row["state"], note]
        )  # fmt: skip
    if "gregor_error" in broker:
        rows.append(
            [broker_id, "sync", samsa.get("slave", "-"), *["-"] * 5, broker["gregor_error"]]
        )
    return rows
