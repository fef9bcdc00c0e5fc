"""``meta-admin recover-offsets -f SERVER_INI``: remap consumer offsets to a broker's own data.

After a failover the broker that took over broker B's partitions (a promoted gregor slave, or
any copy that is not byte-identical) may store the same messages at other offsets. This
command runs ``meta.sync.recover_offsets`` (the same function a samsa master runs at start-up
with ``recoverOffset=true``): every ``R/consumers/G/offsets/T/B-P`` of the broker named by
``SERVER_INI`` (its ``brokerId``) is placed on the partition files under its data paths, by
message id. Run it on the broker's host, with the broker stopped (its files are read).

Nothing is written unless ``--execute`` is given; the table (or ``--json``) shows each entry
before and after, the rule that placed it (``exact``, ``last-before``, ``unmatched``,
``kept``) and the warning of a kept entry. ZooKeeper is ``--zk-connect``/``--zk-root`` as for
every command, or with ``--zk-from-config`` the ``[zookeeper]`` section of ``SERVER_INI``.

Single-threaded; blocking.
"""

from __future__ import annotations

import argparse
import sys

from meta.admin.client import EXIT_OK, NotFoundError, UsageError
from meta.admin.options import add_execute_options, cluster_options
from meta.admin.output import table, to_json
from meta.admin.session import ClusterSession
from meta.admin.zk import connect
from meta.client.zk.cluster_view import close_zookeeper
from meta.client.zk.offset_book import ZkOffsetBook
from meta.errors import ConfigError
from meta.sync.recover_offsets import RecoveryReport, recover_offsets

DRY_RUN_TEXT = "dry run: nothing written; add --execute to write these offsets"
HEADERS = ["GROUP", "TOPIC", "PARTITION", "COMMITTED", "RECOVERED", "RULE", "NOTE"]


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``recover-offsets``."""
    del connection  # ZooKeeper and the broker's files, no broker connection.
    recover = commands.add_parser(
        "recover-offsets",
        parents=[cluster_options()],
        help="remap a broker's consumer offsets to its own data after a failover",
        description="Place every consumer group's committed offset of the broker's "
        "partitions (R/consumers/G/offsets/T/B-P, B = brokerId of SERVER_INI) on the "
        "broker's own partition files, by message id: the exact id first, for positive "
        "(wall-clock) ids the last record with an id at or below it, ids older than every "
        "record to the first offset; other entries are kept and warned about. Run it on "
        "the broker's host with the broker stopped. Nothing is written without --execute.",
    )
    recover.add_argument(
        "-f",
        "--config",
        required=True,
        metavar="SERVER_INI",
        help="the server.ini of the broker that took over (its brokerId and data paths)",
    )
    recover.add_argument(
        "--zk-from-config",
        action="store_true",
        help="use zk.zkConnect and zk.zkRoot of SERVER_INI instead of --zk-connect/--zk-root",
    )
    add_execute_options(
        recover,
        "write the recovered offsets",
        "print the recovered offsets and write nothing",
    )
    recover.set_defaults(run=run_recover_offsets, open_session=ClusterSession.from_arguments)


def run_recover_offsets(arguments: argparse.Namespace, session: ClusterSession) -> int:
    from meta.config import load_config

    try:
        config = load_config(arguments.config)
    except ConfigError as error:
        raise UsageError(f"cannot read {arguments.config}: {error}") from None
    zk_connect, zk_root = session.zk_connect, session.zk_root
    if arguments.zk_from_config:
        zk_connect, zk_root = config.zookeeper.connect, config.zookeeper.root
    client = connect(zk_connect, session.timeout_s)
    try:
        if zk_root and client.exists(zk_root) is None:
            raise NotFoundError(f"ZooKeeper root {zk_root} does not exist at {zk_connect}")
        report = recover_offsets(config, ZkOffsetBook(client, zk_root), arguments.execute)
    finally:
        close_zookeeper(client)
    for problem in report.problems:
        print(f"meta-admin: {problem}", file=sys.stderr)
    if arguments.json:
        print(to_json(report_document(report, zk_root)))
        return EXIT_OK
    _print_table(report)
    return EXIT_OK


def report_document(report: RecoveryReport, zk_root: str) -> dict:
    """The ``--json`` document of a recovery."""
    return {
        "broker_id": report.broker_id,
        "zk_root": zk_root,
        "dry_run": not report.executed,
        "entries": [
            {
                "group": item.entry.group,
                "topic": item.entry.topic,
                "partition": f"{report.broker_id}-{item.entry.partition}",
                "committed": item.entry.text.strip(),
                "recovered": item.text,
                "rule": item.rule,
                "changed": item.changed,
                "warning": item.warning,
            }
            for item in report.recovered
        ],
        "problems": list(report.problems),
    }


def _print_table(report: RecoveryReport) -> None:
    if not report.recovered:
        print(f"no committed offsets of broker {report.broker_id}")
        return
    rows = [
        [
            item.entry.group,
            item.entry.topic,
            f"{report.broker_id}-{item.entry.partition}",
            item.entry.text.strip(),
            item.text,
            item.rule,
            item.warning or ("" if item.changed else "unchanged"),
        ]
        for item in report.recovered
    ]
    print(table(HEADERS, rows))
    changed = len(report.changes)
    if report.executed:
        print(f"{changed} offsets written")
    else:
        print(f"{changed} offsets to write; {DRY_RUN_TEXT}")
