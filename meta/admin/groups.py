"""``meta-admin groups|lag|reset-offsets``: consumer groups and their offsets.

``groups delete`` lives in ``meta.admin.group_delete``.

* ``groups``: each ``R/consumers/G`` with its live members (``ids``, data = their topics) and
  the topics it has offsets or owners for; for each member that owns partitions, when it
  last committed an offset, flagged "stale (possibly dead)" when it has lag and stopped
  committing (``meta.admin.liveness``).
* ``lag GROUP [--topic T]``: per partition the committed offset (``offsets/T/B-P``), the
  broker's max offset (``stats offsets``), the lag in bytes, and the lag in messages when the
  lag is at most ``--count-bytes-max`` (the records are counted by reading them), else ``-``.
  A partition without an offsets node was never committed: its lag counts from the first
  offset, where a consumer starting at offset 0 begins (the broker answers 301 to 0 after
  retention). A committed offset below the first segment counts from there too. Each row
  also gives when its owner last committed, and notes an owner that looks dead
  (``meta.admin.liveness``).
* ``reset-offsets GROUP --topic T --to earliest|latest|OFFSET|TIME``: computes every new
  offset first, then writes the offsets nodes as ``<msgId>-<offset>``: ``msgId`` is the id of
  the record just before the new offset when the search read it (TIME), else -1, as Java's
  ``ZkOffsetStorage`` writes -1 for "unknown". OFFSET must be inside the partition and on a
  record boundary. The group must be stopped: live members (children of ``ids``) make the
  tool refuse, naming them, because their next commit would overwrite the reset. A group
  without ``R/consumers/G`` is refused unless ``--allow-new-group`` is given: then its offsets
  are written (with their parents) before it first runs, as Kafka's tool allows. Nothing is
  written unless ``--execute`` is given (``--dry-run``, the default, prints the plan).

Single-threaded.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from meta.admin.client import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    BrokerUnreachableError,
    NotFoundError,
    RefusedError,
)
from meta.admin.group_delete import add_delete_parser
from meta.admin.liveness import (
    STALE_TEXT,
    PartitionActivity,
    add_commit_interval_option,
    age_text,
    group_activities,
    mark_owners,
    member_liveness,
    owner_activities,
)
from meta.admin.options import add_execute_options, cluster_options, positive_int
from meta.admin.output import Progress, cell, format_time_ms, parse_time, table, to_json
from meta.admin.reads import PartitionReader, PartitionStats, locate_time
from meta.admin.session import ClusterSession
from meta.client.cluster import Partition, format_offset
from meta.errors import ClientError

DRY_RUN_TEXT = "dry run: nothing written; add --execute to write these offsets"
# The columns of ``lag``, one per key of its rows (docs/meta-admin.md shows them).
LAG_HEADERS = ["TOPIC", "PARTITION", "OWNER", "OWNER_LAST_COMMIT", "COMMITTED", "MAX_OFFSET"]
LAG_HEADERS += ["LAG_BYTES", "LAG_MESSAGES", "NOTE"]

COUNT_BYTES_MAX = 1024 * 1024
"""Default bound on the lag read to count its messages."""


@dataclass(frozen=True)
class ResetTarget:
    """A parsed ``--to``: ``kind`` is earliest, latest, offset or time."""

    kind: str
    value: int = 0
    text: str = ""


def reset_target(text: str) -> ResetTarget:
    """argparse type of ``--to``."""
    if text in ("earliest", "latest"):
        return ResetTarget(text, text=text)
    if text.isdigit():
        return ResetTarget("offset", int(text), text)
    millis = text[:-2] if text.endswith("ms") else None
    time_ms = int(millis) if millis and millis.isdigit() else parse_time(text)
    if time_ms is None:
        raise argparse.ArgumentTypeError(
            f"invalid --to {text!r}: expected earliest, latest, a byte offset (e.g. 1048576), "
            "an ISO-8601 time (e.g. 2024-05-01T12:00:00+00:00) or epoch milliseconds "
            "(e.g. @1714564800000 or 1714564800000ms)"
        )
    return ResetTarget("time", time_ms, text)


def partition_argument(text: str) -> str:
    """argparse type of ``--partition``: ``B-P``."""
    try:
        return str(Partition.parse(text))
    except ClientError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``groups``, ``lag`` and ``reset-offsets``."""
    del connection  # These commands find brokers through ZooKeeper, not --broker.
    options = cluster_options()
    groups = commands.add_parser(
        "groups",
        parents=[options],
        help="list consumer groups, their members and topics",
        description="List each consumer group under R/consumers with its live members "
        "(and the topics each subscribes) and the topics it has offsets for; "
        "'groups delete GROUP' deletes a stopped group.",
    )
    add_commit_interval_option(groups)
    groups.set_defaults(run=run_groups, open_session=ClusterSession.from_arguments)
    group_commands = groups.add_subparsers(dest="group_command", metavar="SUBCOMMAND")
    add_delete_parser(group_commands)
    lag = commands.add_parser(
        "lag",
        parents=[options],
        help="show how far behind a consumer group is, per partition",
        description="Per partition: the committed offset, the broker's max offset, the lag "
        "in bytes, and the lag in messages when it is small enough to count by reading.",
    )
    lag.add_argument("group", metavar="GROUP", help="the consumer group")
    lag.add_argument("--topic", help="only this topic (default: every topic of the group)")
    lag.add_argument(
        "--count-bytes-max",
        type=positive_int,
        default=COUNT_BYTES_MAX,
        metavar="BYTES",
        help=f"count lag messages only up to this many bytes of lag (default {COUNT_BYTES_MAX})",
    )
    add_commit_interval_option(lag)
    lag.set_defaults(run=run_lag, open_session=ClusterSession.from_arguments)
    _add_reset_parser(commands, options)


def _add_reset_parser(commands: argparse._SubParsersAction, options) -> None:
    reset = commands.add_parser(
        "reset-offsets",
        parents=[options],
        help="move a stopped consumer group's offsets",
        description="Write the offsets nodes of a stopped group for one topic: to the "
        "first offset (earliest), the end (latest), a byte OFFSET, or the first message "
        "whose id time is at or after TIME. Refused while the group has live members, and "
        "for a group that does not exist yet unless --allow-new-group is given. A dry run "
        "unless --execute is given.",
        epilog="TIME is ISO-8601 (2024-05-01T12:00:00+00:00; local time without a zone) or "
        "epoch milliseconds written @1714564800000 or 1714564800000ms (a bare number is a "
        "byte offset).",
    )
    reset.add_argument("group", metavar="GROUP", help="the consumer group (must be stopped)")
    reset.add_argument("--topic", required=True, help="the topic whose offsets move")
    reset.add_argument(
        "--to",
        required=True,
        type=reset_target,
        metavar="earliest|latest|OFFSET|TIME",
        help="where the group resumes",
    )
    reset.add_argument(
        "--partition",
        action="append",
        type=partition_argument,
        metavar="B-P",
        help="only this partition (repeatable; default: every partition of the topic)",
    )
    reset.add_argument(
        "--allow-new-group",
        action="store_true",
        help="also write the offsets of a group that does not exist yet (no consumers/GROUP "
        "node: it has never run), so that it starts there; without it such a group is refused "
        "as a likely misspelling",
    )
    add_execute_options(reset, "write the offsets", "show the new offsets and write nothing")
    reset.set_defaults(run=run_reset, open_session=ClusterSession.from_arguments)


# --- groups ----------------------------------------------------------------------------------


def run_groups(arguments: argparse.Namespace, session: ClusterSession) -> int:
    zk = session.zk
    documents = []
    now_ms = int(time.time() * 1000)
    for group in zk.groups():
        members = zk.members(group)
        activities = group_activities(session, group)
        documents.append(
            {
                "group": group,
                "members": [
                    {
                        "id": name,
                        "topics": topics,
                        **member_liveness(
                            activities.get(name), now_ms, arguments.commit_interval_ms
                        ),
                    }
                    for name, topics in members.items()
                ],
                "topics": zk.group_topics(group),
            }
        )
    if arguments.json:
        print(to_json({"zk_root": zk.root, "groups": documents}))
        return EXIT_OK
    if not documents:
        print(f"no consumer groups under {zk.root}/consumers")
        return EXIT_OK
    rows = []
    for document in documents:
        topics = ",".join(document["topics"]) or None
        rows.append([document["group"], len(document["members"]), topics])
    print(table(["GROUP", "MEMBERS", "TOPICS"], rows))
    members = [
        [
            document["group"],
            member["id"],
            ",".join(member["topics"]) or None,
            age_text(member["last_commit_ms"], now_ms),
            STALE_TEXT if member["stale"] else None,
        ]
        for document in documents
        for member in document["members"]
    ]
    if members:
        print()
        print(table(["GROUP", "MEMBER", "SUBSCRIBED", "LAST_COMMIT", "STATUS"], members))
    return EXIT_OK


# --- lag -------------------------------------------------------------------------------------


def _partitions_of(session: ClusterSession, group: str, topic: str) -> list[str]:
    """The consumer partitions of ``topic`` and those the group has offsets for, numerically."""
    names = set(session.zk.subscribe_partitions(topic)) | set(session.zk.offsets(group, topic))
    return [str(p) for p in sorted(Partition.parse(name) for name in names if _valid(name))]


def _valid(name: str) -> bool:
    try:
        Partition.parse(name)
    except ClientError:
        return False
    return True


def _store(session: ClusterSession, topic: str, partition: Partition) -> PartitionStats:
    """The partition's offsets from its broker; an empty store when the broker has none."""
    stores = session.partition_stats(partition.broker_id)
    empty = PartitionStats(topic, partition.partition, 0, 0)
    return stores.get((topic, partition.partition), empty)


def run_lag(arguments: argparse.Namespace, session: ClusterSession) -> int:
    zk = session.zk
    zk.check_group(arguments.group)
    topics = zk.group_topics(arguments.group)
    if arguments.topic is not None:
        if arguments.topic not in topics:
            zk.check_topic(arguments.topic)
        topics = [arguments.topic]
    status, rows, unreachable, activity = EXIT_OK, [], set(), []
    for topic in topics:
        offsets = zk.offsets(arguments.group, topic)
        owners = zk.owned_since(arguments.group, topic)
        for name in _partitions_of(session, arguments.group, topic):
            partition = Partition.parse(name)
            owner, since_ms = owners.get(name, (None, 0))
            row = _lag_row(topic, partition, offsets.get(name), owner)
            try:
                _fill_lag(session, row, partition, arguments.count_bytes_max)
            except (BrokerUnreachableError, NotFoundError) as error:
                if partition.broker_id not in unreachable:
                    print(f"meta-admin: broker {partition.broker_id}: {error}", file=sys.stderr)
                unreachable.add(partition.broker_id)
                row["note"] = f"broker {partition.broker_id} unavailable"
                status = EXIT_USAGE
            rows.append(row)
            if owner is not None:
                written_ms = getattr(offsets.get(name), "written_ms", None)
                activity.append(PartitionActivity(owner, since_ms, written_ms, row["lag_bytes"]))
    now_ms = int(time.time() * 1000)
    mark_owners(rows, owner_activities(activity), now_ms, arguments.commit_interval_ms)
    return _print_lag(arguments, session, rows, status)


def _lag_row(topic: str, partition: Partition, committed, owner: str | None) -> dict:
    """A lag row with what ZooKeeper says; ``_fill_lag`` adds the broker's side."""
    row = {
        "topic": topic,
        "partition": str(partition),
        "owner": owner,
        "committed_offset": None if committed is None else committed.offset,
        "committed_msg_id": None if committed is None else committed.msg_id,
        "min_offset": None,
        "max_offset": None,
        "lag_bytes": None,
        "lag_messages": None,
        "note": None,
    }
    if committed is None:
        row["note"] = "no committed offset"
    elif committed.error is not None:
        row["committed_offset"] = row["committed_msg_id"] = None
        row["note"] = f"unreadable offsets node {committed.text!r}"
    return row


def _fill_lag(session: ClusterSession, row: dict, partition: Partition, count_max: int) -> None:
    """Fill offsets and lags of one row from the partition's broker."""
    store = _store(session, row["topic"], partition)
    row["min_offset"], row["max_offset"] = store.min_offset, store.max_offset
    committed = row["committed_offset"]
    start = store.min_offset if committed is None else max(committed, store.min_offset)
    if committed is not None and committed < store.min_offset:
        row["note"] = f"committed offset is below the first segment: reads restart at {start}"
    if start > store.max_offset:
        row["lag_bytes"], row["lag_messages"] = 0, 0
        row["note"] = "committed offset is past the broker's end"
        return
    row["lag_bytes"] = store.max_offset - start
    if row["lag_bytes"] == 0:
        row["lag_messages"] = 0
    elif row["lag_bytes"] <= count_max:
        client = session.broker_client(partition.broker_id)
        label = f"{row['topic']} {partition}"
        reader = PartitionReader(client, row["topic"], partition.partition, label)
        with Progress(f"counting {label}", row["lag_bytes"]) as progress:
            try:
                records = reader.records(start, store.max_offset, progress)
                row["lag_messages"] = sum(1 for _record in records)
            except NotFoundError as error:
                row["note"] = f"cannot count: {error}"


def _print_lag(arguments: argparse.Namespace, session: ClusterSession, rows, status: int) -> int:
    lags = [row["lag_bytes"] for row in rows]
    counts = [row["lag_messages"] for row in rows]
    total_bytes = None if None in lags else sum(lags)
    total_messages = None if None in counts else sum(counts)
    if arguments.json:
        document = {
            "group": arguments.group,
            "members": list(session.zk.members(arguments.group)),
            "partitions": rows,
            "total_lag_bytes": total_bytes,
            "total_lag_messages": total_messages,
        }
        print(to_json(document))
        return status
    if not rows:
        print(f"group {arguments.group} has no partitions to show")
        return status
    now_ms = int(time.time() * 1000)
    lines = [
        [
            row["topic"],
            row["partition"],
            row["owner"],
            age_text(row["owner_last_commit_ms"], now_ms),
            row["committed_offset"],
            row["max_offset"],
            row["lag_bytes"],
            row["lag_messages"],
            row["note"],
        ]
        for row in rows
    ]
    print(table(LAG_HEADERS, lines))
    print(f"total lag: {cell(total_bytes)} bytes, {cell(total_messages)} messages")
    return status


# --- reset-offsets ---------------------------------------------------------------------------


def run_reset(arguments: argparse.Namespace, session: ClusterSession) -> int:
    zk, group, topic = session.zk, arguments.group, arguments.topic
    try:
        zk.check_group(group)
    except NotFoundError as error:
        if not arguments.allow_new_group:
            hint = "--allow-new-group writes the offsets of a group that has not run yet"
            raise NotFoundError(f"{error}; {hint}") from None
    zk.check_topic(topic)
    zk.check_stopped(group, "their next commit would overwrite the reset offsets")
    names = _partitions_of(session, group, topic)
    if arguments.partition:
        missing = sorted(set(arguments.partition) - set(names))
        if missing:
            raise NotFoundError(
                f"topic {topic} has no partition {', '.join(missing)} "
                f"(partitions: {', '.join(names) or 'none'})"
            )
        names = [name for name in names if name in arguments.partition]
    offsets = zk.offsets(group, topic)
    plan = []
    with Progress(f"locating {topic} partitions", len(names)) as progress:
        for name in names:
            msg_id, offset = _new_offset(session, topic, Partition.parse(name), arguments.to)
            old = offsets.get(name)
            plan.append(
                {
                    "partition": name,
                    "old_value": None if old is None else old.text,
                    "new_offset": offset,
                    "new_msg_id": msg_id,
                    "new_value": format_offset(msg_id, offset),
                }
            )
            progress.advance()
    if arguments.execute:
        for entry in plan:
            zk.write_offset(
                group, topic, entry["partition"], entry["new_msg_id"], entry["new_offset"]
            )
    _print_reset(arguments, session, plan)
    late = zk.members(group) if arguments.execute else {}
    if late:
        # Checked before computing the plan too; a member that joined meanwhile may have
        # loaded the old offsets, and its next commit overwrites the new ones.
        print(
            f"meta-admin: members joined group {group} during the reset: "
            f"{', '.join(late)}; check the offsets again",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    return EXIT_OK


def _new_offset(
    session: ClusterSession, topic: str, partition: Partition, target: ResetTarget
) -> tuple[int, int]:
    """``(msg_id, offset)`` to write for one partition."""
    store = _store(session, topic, partition)
    low, high = store.min_offset, store.max_offset
    if target.kind == "earliest":
        return -1, low
    if target.kind == "latest":
        return -1, high
    client = session.broker_client(partition.broker_id)
    label = f"{topic} {partition}"
    reader = PartitionReader(client, topic, partition.partition, label)
    if target.kind == "time":
        position = locate_time(reader, target.value, (low, high), f"searching {label}")
        return position.previous_msg_id, position.offset
    offset = target.value
    if not low <= offset <= high:
        raise RefusedError(f"offset {offset} is outside {label}: it holds {low} to {high}")
    if offset < high:
        reader.first_record(offset)  # raises NotFoundError when not on a record boundary
    return -1, offset


def _print_reset(arguments: argparse.Namespace, session: ClusterSession, plan) -> None:
    written = arguments.execute
    if arguments.json:
        document = {
            "group": arguments.group,
            "topic": arguments.topic,
            "to": arguments.to.text,
            "dry_run": not arguments.execute,
            "partitions": plan,
        }
        print(to_json(document))
    else:
        headers = ["TOPIC", "PARTITION", "OLD", "NEW", "NEW_OFFSET"]
        rows = [
            [arguments.topic, e["partition"], e["old_value"], e["new_value"], e["new_offset"]]
            for e in plan
        ]
        print(table(headers, rows) if rows else f"topic {arguments.topic} has no partitions")
        if arguments.to.kind == "time":
            print(f"first messages at or after {format_time_ms(arguments.to.value)}")
        path = f"{session.zk.group_path(arguments.group)}/offsets/{arguments.topic}"
        print(f"wrote {len(plan)} offsets under {path}" if written else DRY_RUN_TEXT)
