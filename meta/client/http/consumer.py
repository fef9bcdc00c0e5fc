"""``HttpConsumer``: read one partition over a broker's HTTP protocol (Java's SimpleHttpConsumer).

Each ``fetch`` is one ``GET /get/<brokerId>``; the reply's raw message set is decoded with
the shared codec (``MessageIterator``: attributes decoded, every record's CRC checked, a
trailing partial record left for the next fetch). The consumer keeps its offset and moves it
past what it returned. Answers, as the TCP consumer treats them:

* 404 and 403: nothing to read now (an empty list);
* 301 (offset out of range, ``X-Meta-Offset``): the ``offset_reset`` policy of the TCP
  consumer (docs/compatibility.md): ``follow-broker`` adopts the broker's offset, ``earliest`` and
  ``latest`` ask ``/offset`` for the partition's first or end offset, ``error`` raises
  ``MovedError``;
* anything else raises ``ClientError`` with the status and the broker's text.

A message larger than ``max_size`` doubles the size asked for, up to ``MAX_SIZE_LIMIT``.
Offsets are kept where the Python client keeps them: given an ``offset_storage`` (a
``LocalOffsetStorage``, or anything with its ``load`` / ``commit``), the start offset is
loaded from it and ``commit`` writes the current one.

Not thread-safe: one consumer per thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from meta.client.cluster import Partition
from meta.client.consume.pull import MessageIterator
from meta.client.http.session import HttpSession
from meta.client.message import Message
from meta.errors import ClientError, MovedError
from meta.protocol.commands import LONG_MAX

OFFSET_RESETS = ("follow-broker", "earliest", "latest", "error")
MAX_SIZE_LIMIT = 64 * 1024 * 1024
GROUP_DEFAULT = "httpgroup"  # Java's HttpClientConfig group


class HttpConsumer:
    """Reads ``topic``'s ``partition`` on the session's broker, from ``offset`` on.

    Args:
        session: the connection to the broker's HTTP port.
        topic: the topic.
        partition: the partition number.
        offset: where to start when ``offset_storage`` holds nothing.
        group: the consumer group named in requests and offsets.
        max_size: the most bytes one fetch asks for.
        offset_reset: what a 301 does (``OFFSET_RESETS``).
        max_wait_ms: how long the broker may hold a fetch at the end for new data (0: none).
        offset_storage: where offsets are loaded from and committed to, or None.
    """

    def __init__(
        self,
        session: HttpSession,
        topic: str,
        partition: int,
        offset: int = 0,
        group: str = GROUP_DEFAULT,
        max_size: int = 1 << 20,
        offset_reset: str = "follow-broker",
        max_wait_ms: int = 0,
        offset_storage: Any = None,
    ) -> None:
        if offset_reset not in OFFSET_RESETS:
            raise ClientError(f"offset_reset must be one of {OFFSET_RESETS}, got {offset_reset!r}")
        if max_size <= 0:
            raise ClientError(f"max_size must be positive, got {max_size}")
        self.session = session
        self.topic = topic
        self.partition = Partition(session.broker_id, partition)
        self.group = group
        self.max_size = max_size
        self.offset_reset = offset_reset
        self.max_wait_ms = max_wait_ms
        self.offset_storage = offset_storage
        self.msg_id = -1
        stored = None
        if offset_storage is not None:
            stored = offset_storage.load(topic, group, self.partition)
        self.offset = offset if stored is None else stored[1]  # (msg_id, offset)

    def fetch(self) -> list[Message]:
        """The next messages from ``offset`` (possibly none); ``offset`` moves past them.

        Raises:
            InvalidRecordError: a record's checksum is wrong.
            MovedError: a 301 under ``offset_reset="error"``.
            ClientError: another answer, or the connection failed.
            OperationTimeoutError: no answer in time.
        """
        self._retry_now = False
        params = {
            "topic": self.topic,
            "partition": self.partition.partition,
            "offset": self.offset,
            "group": self.group,
            "maxsize": self.max_size,
        }
        if self.max_wait_ms:
            params["maxwait"] = self.max_wait_ms
        reply = self.session.request("GET", "get", params)
        if reply.status == 200:
            iterator = MessageIterator(self.topic, self.partition, self.offset, reply.body)
            messages = list(iterator)
            if not messages and reply.body:
                self._grow()
            self.offset += iterator.offset
            if messages:
                self.msg_id = messages[-1].id
            return messages
        if reply.status == 301:
            self._moved(int(reply.moved_offset or reply.body))
            return []
        if reply.status in (403, 404):
            return []
        raise ClientError(self._describe("get", reply))

    def __iter__(self) -> Iterator[Message]:
        """Every message from ``offset`` up to the end the partition has when reached."""
        while True:
            messages = self.fetch()
            if not messages and not self._retry_now:
                return
            yield from messages

    def offset_of(self, offset: int) -> int:
        """The start of the segment holding ``offset``, clamped to the partition (``/offset``).

        ``offset_of(0)`` is the partition's first offset, ``offset_of(LONG_MAX)`` its end.

        Raises:
            ClientError: the broker did not answer 200, or the connection failed.
        """
        params = {"topic": self.topic, "partition": self.partition.partition, "offset": offset}
        reply = self.session.request("GET", "offset", params)
        if reply.status != 200:
            raise ClientError(self._describe("offset", reply))
        return int(reply.body)

    def commit(self) -> None:
        """Write the current offset to ``offset_storage`` (nothing without one)."""
        if self.offset_storage is not None:
            entry = (self.topic, self.partition, self.offset, self.msg_id)
            self.offset_storage.commit(self.group, [entry])

    def close(self) -> None:
        self.session.close()

    _retry_now = False  # True after a 301 or a size increase: the next fetch may read data

    def _grow(self) -> None:
        if self.max_size >= MAX_SIZE_LIMIT:
            raise ClientError(
                f"a message of {self.topic}/{self.partition} at {self.offset} is larger than "
                f"{MAX_SIZE_LIMIT} bytes"
            )
        self.max_size = min(self.max_size * 2, MAX_SIZE_LIMIT)
        self._retry_now = True

    def _moved(self, offset: int) -> None:
        if self.offset_reset == "error":
            raise MovedError(
                f"offset {self.offset} of {self.topic}/{self.partition} is out of "
                f"range; the broker offers {offset}"
            )
        if self.offset_reset == "earliest":
            offset = self.offset_of(0)
        elif self.offset_reset == "latest":
            offset = self.offset_of(LONG_MAX)
        self._retry_now = offset != self.offset
        self.offset = offset

    def _describe(self, what: str, reply: Any) -> str:
        text = reply.body.decode("utf-8", "replace")
        return f"HTTP {what} of {self.topic}/{self.partition}@{self.offset}: {reply.status} {text}"
