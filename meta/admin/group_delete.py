"""``meta-admin groups delete GROUP``: remove a stopped consumer group from ZooKeeper.

The group's whole tree ``R/consumers/G`` goes: its committed offsets
(``offsets/T/B-P``), its partition owners (``owners/T/B-P``) and the empty ``ids``. As
``reset-offsets``, it is refused while the group has live members (children of ``ids``):
they would recreate the nodes and commit again. It is a dry run that lists the nodes unless
``--execute`` is given. A consumer of the group started afterwards begins as a new group
does (from offset 0, or where its own configuration says).

Single-threaded (one CLI invocation).
"""

from __future__ import annotations

import argparse
import sys

from meta.admin.client import EXIT_OK, EXIT_REFUSED
from meta.admin.options import add_execute_options, cluster_options
from meta.admin.output import table, to_json
from meta.admin.session import ClusterSession
from meta.admin.zk import ZkAdmin

DRY_RUN_TEXT = "dry run: nothing deleted; add --execute to delete the group"


def add_delete_parser(group_commands: argparse._SubParsersAction) -> None:
    """Register ``groups delete`` under the ``groups`` command."""
    delete = group_commands.add_parser(
        "delete",
        # Without a default of its own, "groups --json delete G" keeps the --json given
        # before the subcommand (argparse copies every value the subcommand parsed over).
        parents=[cluster_options(json_default=argparse.SUPPRESS)],
        help="delete a stopped consumer group's offsets and owners",
        description="Delete R/consumers/GROUP with its committed offsets and partition "
        "owners. Refused while the group has live members. A dry run unless --execute "
        "is given.",
    )
    delete.add_argument("group", metavar="GROUP", help="the consumer group (must be stopped)")
    add_execute_options(delete, "delete the group", "list what would be deleted")
    delete.set_defaults(run=run_delete, open_session=ClusterSession.from_arguments)


def run_delete(arguments: argparse.Namespace, session: ClusterSession) -> int:
    zk, group = session.zk, arguments.group
    zk.check_group(group)
    zk.check_stopped(group, "they would commit their offsets again and recreate the group")
    rows = _group_nodes(zk, group)
    if arguments.execute:
        zk.delete_group(group)
    _print_delete(arguments, zk, rows)
    if arguments.execute and zk.exists(zk.group_path(group)):
        # A member that joined during the deletion recreates the group's nodes.
        print(
            f"meta-admin: group {group} was created again during the deletion "
            f"(members: {', '.join(zk.members(group)) or 'none'}); check it again",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    return EXIT_OK


def _group_nodes(zk: ZkAdmin, group: str) -> list[dict]:
    """One row per partition the group has an offset or an owner for."""
    rows: dict[tuple[str, str], dict] = {}
    for topic in zk.group_topics(group):
        for partition, committed in zk.offsets(group, topic).items():
            row = rows.setdefault((topic, partition), _row(topic, partition))
            row["offset_value"] = committed.text
        for partition, owner in zk.owners(group, topic).items():
            rows.setdefault((topic, partition), _row(topic, partition))["owner"] = owner
    return [rows[key] for key in sorted(rows)]


def _row(topic: str, partition: str) -> dict:
    return {"topic": topic, "partition": partition, "offset_value": None, "owner": None}


def _print_delete(arguments: argparse.Namespace, zk: ZkAdmin, rows: list[dict]) -> None:
    path = zk.group_path(arguments.group)
    if arguments.json:
        document = {
            "group": arguments.group,
            "path": path,
            "dry_run": not arguments.execute,
            "partitions": rows,
        }
        print(to_json(document))
        return
    if rows:
        lines = [[r["topic"], r["partition"], r["offset_value"], r["owner"]] for r in rows]
        print(table(["TOPIC", "PARTITION", "OFFSET", "OWNER"], lines))
    else:
        print(f"group {arguments.group} has no offsets or owners")
    print(f"deleted {path}" if arguments.execute else DRY_RUN_TEXT)
