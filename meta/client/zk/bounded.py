"""ZooKeeper reads with a bound: each call waits at most ``timeout_s`` for its answer.

What lives here: ``BoundedCalls``, the one place a client-side reader (the producers' cluster
view, the Spark reader) turns kazoo's asynchronous calls into bounded waits: a timeout or
another kazoo failure becomes a ``ClientError`` naming the path and the ensemble, and a node
that is absent (or vanishes between two reads) reads as absent.

Thread-safety: no state but its settings; the kazoo client is thread-safe.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from meta.errors import ClientError


class BoundedCalls:
    """Bounded waits on one kazoo client's asynchronous calls."""

    def __init__(self, client: KazooClient, timeout_s: float, connect: str = "") -> None:
        self.client = client
        self.timeout_s = timeout_s
        self._where = f" at {connect}" if connect else ""

    def wait(self, async_result: Any, what: str) -> Any:
        """The result of a kazoo async call about ``what``.

        Raises:
            NoNodeError: the node is absent (callers decide what that means).
            ClientError: no answer within ``timeout_s``, or another ZooKeeper failure.
        """
        try:
            return async_result.get(timeout=self.timeout_s)
        except KazooTimeoutError:
            raise ClientError(
                f"ZooKeeper{self._where} did not answer about {what} within "
                f"{self.timeout_s:g} s (is it down or unreachable?)"
            ) from None
        except NoNodeError:
            raise
        except KazooException as error:
            raise ClientError(f"ZooKeeper{self._where} failed on {what}: {error!r}") from error

    def children(self, path: str) -> list[str]:
        """The names of ``path``'s children; none when ``path`` is absent."""
        try:
            return self.wait(self.client.get_children_async(path), path)
        except NoNodeError:
            return []

    def data(self, path: str) -> bytes | None:
        """The bytes of ``path``, or None when it is absent."""
        try:
            data, _stat = self.wait(self.client.get_async(path), path)
        except NoNodeError:
            return None
        return data
