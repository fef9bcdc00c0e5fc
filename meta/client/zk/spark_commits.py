"""The commit record of an exactly-once Spark write, in ZooKeeper.

``<root>/spark/transactions/<writeId>`` holds ``{"committedBatch": N}``: the last batch
whose branches were all committed (``NO_BATCH`` before the first). A child
``batch-<N>`` (N zero-padded to 20 digits) holds the decision for batch N while it is being
committed: ``{"branches": [[brokerUri, globalIdHex, branchIdHex], ...]}``. A child
``job-<token>`` (empty) is the fence token of a batch write job that is live: created by the
driver before any task of the job runs, deleted when the driver commits or aborts the job;
a task checks it before it hands its prepared branches over (``meta.spark.transaction_log``
says why). The transaction manager that reads and writes them is
``meta.spark.transaction_log``; branches here are plain ``(broker URI, global id, branch id)``
tuples.

Invariants: a decision is created once (a second create finds the first and returns it); a
job token is created once and, once deleted, never comes back (a token whose record was
deleted reads as not live); every call is bounded by the connection's timeouts, and
``job_is_live`` by ``connection_timeout_ms`` on top. Not thread-safe: one record per thread.
"""

from __future__ import annotations

import json

from kazoo.exceptions import NodeExistsError, NoNodeError

from meta.client.zk.bounded import BoundedCalls
from meta.client.zk.cluster_view import close_zookeeper, connect_zookeeper, normalize_root

NO_BATCH = -1
DECISION_PREFIX = "batch-"
JOB_PREFIX = "job-"
Branch = tuple[str, bytes, bytes]
"""(broker URI, XA global transaction id, XA branch qualifier)."""


def commit_record_path(root: str, write_id: str) -> str:
    """The ZooKeeper node of one write's commit record."""
    return f"{normalize_root(root)}/spark/transactions/{write_id}"


def decision_batch(child: str) -> int | None:
    """The batch of a commit record's child that is a decision (``batch-<N>``), else None."""
    if not child.startswith(DECISION_PREFIX):
        return None
    return int(child.removeprefix(DECISION_PREFIX))


class SparkCommitRecord:
    """One write's commit record; use as a context manager (it holds a ZooKeeper session).

    Args:
        connect: the ZooKeeper connect string.
        root: the MetaQ root (``zk.zkRoot``).
        write_id: the write's id.
        session_timeout_ms: the session timeout.
        connection_timeout_ms: bound on connecting.

    Raises:
        ClientError: ZooKeeper is unreachable within ``connection_timeout_ms``.
    """

    def __init__(
        self,
        connect: str,
        root: str,
        write_id: str,
        session_timeout_ms: int,
        connection_timeout_ms: int,
    ) -> None:
        self.path = commit_record_path(root, write_id)
        self._zk = connect_zookeeper(connect, session_timeout_ms, connection_timeout_ms)
        self._calls = BoundedCalls(self._zk, connection_timeout_ms / 1000, connect)

    def __enter__(self) -> SparkCommitRecord:
        return self

    def __exit__(self, *exc: object) -> None:
        close_zookeeper(self._zk)

    def committed_batch(self) -> int:
        """The last batch committed in full, or ``NO_BATCH``."""
        try:
            data, _stat = self._zk.get(self.path)
        except NoNodeError:
            return NO_BATCH
        return int(json.loads(data or b"{}").get("committedBatch", NO_BATCH))

    def set_committed_batch(self, batch_id: int) -> None:
        self._zk.ensure_path(self.path)
        self._zk.set(self.path, json.dumps({"committedBatch": batch_id}).encode())

    def decide(self, batch_id: int, branches: list[Branch]) -> tuple[list[Branch], bool]:
        """Record ``branches`` as batch ``batch_id``'s decision, unless one is recorded.

        Returns:
            The recorded decision, and whether it was recorded by this call.
        """
        rows = [[uri, gid.hex(), bid.hex()] for uri, gid, bid in branches]
        self._zk.ensure_path(self.path)
        try:
            self._zk.create(self._batch_path(batch_id), json.dumps({"branches": rows}).encode())
            return list(branches), True
        except NodeExistsError:
            data, _stat = self._zk.get(self._batch_path(batch_id))
            return _parse_decision(data), False

    def has_decision(self, batch_id: int) -> bool:
        return self._zk.exists(self._batch_path(batch_id)) is not None

    def delete_decision(self, batch_id: int) -> None:
        try:
            self._zk.delete(self._batch_path(batch_id))
        except NoNodeError:
            pass

    def decided_branches(self) -> list[Branch]:
        """The branches of every decision still recorded (commits not finished)."""
        try:
            children = self._zk.get_children(self.path)
        except NoNodeError:
            return []
        branches: list[Branch] = []
        for child in children:
            if decision_batch(child) is None:
                continue  # a job token
            try:
                data, _stat = self._zk.get(f"{self.path}/{child}")
            except NoNodeError:
                continue
            branches += _parse_decision(data)
        return branches

    def start_job(self, token: str) -> None:
        """Record the fence token of a batch write job as live (before any task runs)."""
        self._zk.ensure_path(self.path)
        self._zk.create(self._job_path(token))

    def end_job(self, token: str) -> None:
        """Delete a job's token: from now on ``job_is_live(token)`` is False everywhere."""
        try:
            self._zk.delete(self._job_path(token))
        except NoNodeError:
            pass

    def job_is_live(self, token: str) -> bool:
        """Whether the job's token is still recorded (False when the record is gone too).

        ``sync`` first, so the answer is at least as new as every change ZooKeeper
        acknowledged before this call (a follower's stale view would let a task see a token
        the driver has ended).

        Raises:
            ClientError: ZooKeeper failed or did not answer within the connection timeout.
        """
        path = self._job_path(token)
        self._calls.wait(self._zk.sync_async(path), path)
        return self._calls.wait(self._zk.exists_async(path), path) is not None

    def delete(self) -> None:
        """Delete the whole record (a write whose id nobody reuses)."""
        try:
            self._zk.delete(self.path, recursive=True)
        except NoNodeError:
            pass

    def _batch_path(self, batch_id: int) -> str:
        return f"{self.path}/{DECISION_PREFIX}{batch_id:020d}"

    def _job_path(self, token: str) -> str:
        return f"{self.path}/{JOB_PREFIX}{token}"


def _parse_decision(data: bytes) -> list[Branch]:
    return [
        (uri, bytes.fromhex(gid), bytes.fromhex(bid))
        for uri, gid, bid in json.loads(data)["branches"]
    ]
