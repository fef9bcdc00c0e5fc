"""``meta-admin slaves [BROKER]``: each async slave's replication lag, per partition.

The slaves are found in ZooKeeper (``R/brokers/ids/B/slave<N>``); each is asked ``stats
json:slave`` (one row per partition with the slave's end, the master's end at the last check,
the lag in bytes and seconds, and the state), or, from a broker that answers text, ``stats
slave`` (metaq-py's own text item, ``meta.slave.lag``, one line per partition). A slave that
cannot be reached, or that answers neither (a Java slave reads both as topic names), is
reported on stderr, the other rows are printed, and the exit status is 2.

Single-threaded.
"""

from __future__ import annotations

import argparse
import sys

from meta.admin.client import (
    EXIT_OK,
    EXIT_USAGE,
    AdminClient,
    AdminError,
    BrokerRefusedError,
)
from meta.admin.options import cluster_options
from meta.admin.output import table, to_json
from meta.admin.reads import stats_document, stats_lines
from meta.admin.session import ClusterSession
from meta.client.cluster import BrokerAddress
from meta.errors import ClientError

FIELDS = ("slave_end", "master_end", "lag_bytes", "lag_seconds", "state")
HEADERS = ["BROKER", "SLAVE", "TOPIC", "PARTITION", "SLAVE_END", "MASTER_END"]
HEADERS += ["LAG_BYTES", "LAG_SECONDS", "STATE"]


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``slaves``."""
    del connection  # Slaves are found through ZooKeeper.
    slaves = commands.add_parser(
        "slaves",
        parents=[cluster_options()],
        help="show each async slave's replication lag per partition",
        description="For each async slave registered in ZooKeeper (ids/B/slaveN), print "
        "per partition the slave's end, the master's end at the slave's last check (once a "
        "second), the lag in bytes (master end - slave end) and in seconds (how long ago "
        "the master already had data the slave still lacks; 0 when caught up), and the "
        "state (copying, halted, no-master, local-only). '-': not known yet.",
    )
    slaves.add_argument("broker_id", nargs="?", type=int, metavar="BROKER", help="only this id")
    slaves.set_defaults(run=run_slaves, open_session=ClusterSession.from_arguments)


def parse_lag_line(line: str) -> dict:
    """One ``stats slave`` line into ``{"topic", "partition", "slave_end", ...}``.

    Raises:
        BrokerRefusedError: not such a line.
    """
    tokens = line.split(" ")
    if len(tokens) != 13 or tokens[1] != "part" or tuple(tokens[3::2]) != FIELDS:
        raise BrokerRefusedError(f"unexpected 'stats slave' line {line!r}")
    row: dict = {"topic": tokens[0], "partition": int(tokens[2])}
    for name, value in zip(FIELDS, tokens[4::2], strict=True):
        row[name] = value if name == "state" else None if value == "-" else int(value)
    return row


def lag_rows(client: AdminClient) -> list[dict]:
    """A slave's lag rows: from ``stats json:slave``, or the text ``stats slave`` lines.

    Raises:
        BrokerRefusedError: the broker is not an async slave (a master's JSON document has
            no rows and says its role; a Java slave answers neither item).
    """
    document = stats_document(client, "slave")
    if document is None:
        return [parse_lag_line(line) for line in stats_lines(client, "slave")]
    if document["role"] != "async_slave":
        raise BrokerRefusedError(f"broker {client.name} is a {document['role']}, not a slave")
    return [
        {name: row[name] for name in ("topic", "partition", *FIELDS)}
        for row in document["async_slave"]
    ]


def run_slaves(arguments: argparse.Namespace, session: ClusterSession) -> int:
    zk = session.zk
    nodes = zk.brokers()
    if arguments.broker_id is not None:
        nodes = [zk.broker(arguments.broker_id)]
    status, rows = EXIT_OK, []
    for node in nodes:
        for slave_id in sorted(node.slaves):
            where = f"slave {slave_id} of broker {node.broker_id}"
            try:
                address = BrokerAddress.parse_uri(node.slaves[slave_id])
                client = session.client_at(address.host, address.port)
                found = lag_rows(client)
            except (AdminError, ClientError) as error:
                print(f"meta-admin: {where} left out: {error}", file=sys.stderr)
                status = EXIT_USAGE
                continue
            rows += [{"broker_id": node.broker_id, "slave_id": slave_id, **r} for r in found]
    if arguments.json:
        print(to_json({"zk_root": zk.root, "slaves": rows}))
        return status
    if not rows:
        print("no slave partitions" if status == EXIT_OK else "no slave answered")
        return status
    print(table(HEADERS, [_cells(row) for row in rows]))
    return status


def _cells(row: dict) -> list[object]:
    return [
        row["broker_id"],
        row["slave_id"],
        row["topic"],
        f"{row['broker_id']}-{row['partition']}",
        *(row[name] for name in FIELDS),
    ]
