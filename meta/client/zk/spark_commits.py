"""The commit record of an exactly-once Spark write, in ZooKeeper.

``<root>/spark/transactions/<writeId>`` holds ``{"committedBatch": N}``: the last batch
whose branches were all committed (``NO_BATCH`` before the first). A child
``batch-<N>`` (N zero-padded to 20 digits) holds the decision for batch N while it is being
committed: ``{"branches": [[brokerUri, globalIdHex, branchIdHex], ...]}``. The transaction
manager that reads and writes them is ``meta.spark.transaction_log``; branches here are
plain ``(broker URI, global id, branch id)`` tuples.

Invariants: a decision is created once (a second create finds the first and returns it);
every call is bounded by the connection's timeouts. Not thread-safe: one record per thread.
"""

from __future__ import annotations

import json

from kazoo.exceptions import NodeExistsError, NoNodeError

from meta.client.zk.cluster_view import close_zookeeper, connect_zookeeper, normalize_root

NO_BATCH = -1
Branch = tuple[str, bytes, bytes]
"""(broker URI, XA global transaction id, XA branch qualifier)."""


def commit_record_path(root: str, write_id: str) -> str:
    """The ZooKeeper node of one write's commit record."""
    return f"{normalize_root(root)}/spark/transactions/{write_id}"


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
            try:
                data, _stat = self._zk.get(f"{self.path}/{child}")
            except NoNodeError:
                continue
            branches += _parse_decision(data)
        return branches

    def delete(self) -> None:
        """Delete the whole record (a write whose id nobody reuses)."""
        try:
            self._zk.delete(self.path, recursive=True)
        except NoNodeError:
            pass

    def _batch_path(self, batch_id: int) -> str:
        return f"{self.path}/batch-{batch_id:020d}"


def _parse_decision(data: bytes) -> list[Branch]:
    return [
        (uri, bytes.fromhex(gid), bytes.fromhex(bid))
        for uri, gid, bid in json.loads(data)["branches"]
    ]
