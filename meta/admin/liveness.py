"""Whether a consumer group's owners still work: when each last committed, which look dead.

A consumer that crashed (``kill -9``, a lost host) keeps its owner nodes
``consumers/G/owners/T/B-P`` until its ZooKeeper session expires (the consumer's
``zk_session_timeout_ms``, 30 s by default), and until then it looks like a live owner. What
gives it away is its commits: a working consumer writes the offsets node of every partition
it read from at each commit interval (``commit_offset_period_ms``, 5 s by default), so an
owner whose partitions have messages waiting (lag) but whose newest commit is older than
``STALE_COMMIT_INTERVALS`` intervals is flagged "stale (possibly dead)".

An owner's activity is the newest of its offsets-node writes and of its owner-node
creations (a consumer that took a partition a moment ago has not committed it yet). An owner
whose partitions have no lag is never stale: an idle consumer has nothing to commit. Times
are ZooKeeper's (node ``mtime``/``ctime``), compared with this host's clock, so a large
clock skew between the two shows in the ages.

Functions over what ``ZkAdmin`` and the brokers' ``stats offsets`` report; only
``group_activities`` reads (through the command's ``ClusterSession``). Single-threaded.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from meta.admin.client import AdminError
from meta.admin.options import positive_int
from meta.client.cluster import Partition
from meta.errors import ClientError

if TYPE_CHECKING:
    from meta.admin.session import ClusterSession
    from meta.admin.zk import CommittedOffset

__all__ = [
    "COMMIT_INTERVAL_MS",
    "STALE_COMMIT_INTERVALS",
    "STALE_TEXT",
    "OwnerActivity",
    "PartitionActivity",
    "add_commit_interval_option",
    "age_text",
    "group_activities",
    "member_liveness",
    "mark_owners",
    "owner_activities",
]

COMMIT_INTERVAL_MS = 5000
"""The consumers' commit interval assumed by default (``commit_offset_period_ms``)."""

STALE_COMMIT_INTERVALS = 2
"""An owner with lag and no commit for more than this many intervals is flagged stale, so a
crashed owner is flagged at most three intervals after its last commit."""

STALE_TEXT = "stale (possibly dead)"


@dataclass(frozen=True)
class PartitionActivity:
    """One owned partition as ZooKeeper and its broker report it.

    Attributes:
        owner: the owning consumer id string.
        owned_since_ms: the owner node's creation time (epoch ms).
        committed_ms: the offsets node's last write (epoch ms); None if never committed.
        lag_bytes: bytes between the committed offset and the broker's end; None unknown.
    """

    owner: str
    owned_since_ms: int
    committed_ms: int | None
    lag_bytes: int | None


@dataclass(frozen=True)
class OwnerActivity:
    """What one owner's partitions say about it.

    Attributes:
        owner: the consumer id string.
        last_commit_ms: its newest offsets-node write (epoch ms); None if it never committed
            any of its partitions.
        last_active_ms: the newest of ``last_commit_ms`` and its owner nodes' creation.
        lagging: some partition of it has messages waiting.
    """

    owner: str
    last_commit_ms: int | None
    last_active_ms: int
    lagging: bool

    def is_stale(self, now_ms: int, commit_interval_ms: int) -> bool:
        """Lag waits and nothing was committed for more than ``STALE_COMMIT_INTERVALS``
        commit intervals."""
        silent_ms = now_ms - self.last_active_ms
        return self.lagging and silent_ms > STALE_COMMIT_INTERVALS * commit_interval_ms


def owner_activities(partitions: Iterable[PartitionActivity]) -> dict[str, OwnerActivity]:
    """Owner id string -> its ``OwnerActivity``, over every partition it owns."""
    grouped: dict[str, list[PartitionActivity]] = {}
    for partition in partitions:
        grouped.setdefault(partition.owner, []).append(partition)
    activities = {}
    for owner, owned in grouped.items():
        commits = [p.committed_ms for p in owned if p.committed_ms is not None]
        last_commit_ms = max(commits) if commits else None
        taken_ms = max(p.owned_since_ms for p in owned)
        activities[owner] = OwnerActivity(
            owner,
            last_commit_ms,
            max(taken_ms, last_commit_ms or 0),
            any(p.lag_bytes for p in owned),
        )
    return activities


def age_text(then_ms: int | None, now_ms: int) -> str | None:
    """``"12.3 s ago"``; None when ``then_ms`` is None."""
    if then_ms is None:
        return None
    return f"{max(0, now_ms - then_ms) / 1000:.1f} s ago"


def mark_owners(
    rows: list[dict], activities: dict[str, OwnerActivity], now_ms: int, commit_interval_ms: int
) -> None:
    """Add ``owner_last_commit_ms`` and ``owner_stale`` to each lag row, and a note to the
    rows of a stale owner."""
    for row in rows:
        activity = activities.get(row["owner"]) if row["owner"] is not None else None
        stale = activity is not None and activity.is_stale(now_ms, commit_interval_ms)
        row["owner_last_commit_ms"] = None if activity is None else activity.last_commit_ms
        row["owner_stale"] = stale
        if stale:
            assert activity is not None
            silent = f"nothing committed since {age_text(activity.last_active_ms, now_ms)}"
            note = f"owner {STALE_TEXT}: {silent}"
            row["note"] = note if row["note"] is None else f"{row['note']}; {note}"


def group_activities(session: ClusterSession, group: str) -> dict[str, OwnerActivity]:
    """Owner id string -> ``OwnerActivity`` over every topic of ``group``; a partition whose
    broker cannot be asked counts as without lag (never flags its owner)."""
    zk = session.zk
    partitions = []
    for topic in zk.group_topics(group):
        offsets = zk.offsets(group, topic)
        for name, (owner, since_ms) in zk.owned_since(group, topic).items():
            committed = offsets.get(name)
            written_ms = None if committed is None else committed.written_ms
            lag = _lag_bytes(session, topic, name, committed)
            partitions.append(PartitionActivity(owner, since_ms, written_ms, lag))
    return owner_activities(partitions)


def _lag_bytes(
    session: ClusterSession, topic: str, name: str, committed: CommittedOffset | None
) -> int | None:
    """Bytes from the committed offset (or the first one) to the broker's end; None unknown."""
    try:
        partition = Partition.parse(name)
        stores = session.partition_stats(partition.broker_id)
    except (ClientError, AdminError):
        return None
    store = stores.get((topic, partition.partition))
    if store is None:
        return 0
    start = store.min_offset
    if committed is not None and committed.error is None:
        start = max(committed.offset, store.min_offset)
    return max(0, store.max_offset - start)


def member_liveness(
    activity: OwnerActivity | None, now_ms: int, commit_interval_ms: int
) -> dict[str, object]:
    """A ``groups`` member's ``last_commit_ms`` and ``stale`` (None and False for a member
    that owns nothing)."""
    return {
        "last_commit_ms": None if activity is None else activity.last_commit_ms,
        "stale": activity is not None and activity.is_stale(now_ms, commit_interval_ms),
    }


def add_commit_interval_option(parser: argparse.ArgumentParser) -> None:
    """``--commit-interval-ms`` of ``groups`` and ``lag``."""
    parser.add_argument(
        "--commit-interval-ms",
        type=positive_int,
        default=COMMIT_INTERVAL_MS,
        metavar="MS",
        help="the consumers' offset commit interval (commit_offset_period_ms, default "
        f"{COMMIT_INTERVAL_MS}): an owner with lag and no commit for more than "
        f"{STALE_COMMIT_INTERVALS} of them is flagged '{STALE_TEXT}'",
    )
