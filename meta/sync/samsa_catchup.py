"""What a samsa master knows of each partition's copy, and the catch-up of a metaq-py slave.

* ``PartitionSync``: one partition's replication state (``ok``, ``catching-up`` or
  ``diverged``), the slave's known end, and the puts waiting while the partition is gated.
* ``detect_slave``: at each connection, ask the slave ``stats sync``; a metaq-py slave
  answers 200 with a first line ``role gregor`` (a Java broker answers the item as a topic
  name), and then its ``stats offsets`` give its end of every partition.
* ``CatchUp``: for one partition of a metaq-py slave, compare ends. Equal:
  ``ok``. The slave's end before the master's, at a record boundary the master still has:
  replay the missing records as ``sync`` (original id, flag, payload and checksum), with at
  most ``REPLAY_WINDOW`` in flight, checking that each lands at the master's offset, while
  new puts to the partition wait (``SamsaMaster.replicate``). Anything else: ``diverged``,
  and puts to the partition are refused. A reply that is not an OK at the master's offset
  marks it diverged too; a timed-out replay drops the connection, so the next one starts
  over.

Reactor thread only.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from meta.protocol.commands import Stats
from meta.protocol.encoding import encode
from meta.protocol.message import HEADER, HEADER_SIZE
from meta.protocol.put_reply import decode_put_reply
from meta.protocol.sync_frame import encode_sync, partition_sync_format
from meta.sync.link_states import CAUGHT_UP, COMPARE, DIFFERS, OK, next_state
from meta.sync.slave_link import DISCONNECTED, TIMED_OUT, SlaveLink

log = logging.getLogger("meta.sync")

REPLAY_WINDOW = 256  # replayed records in flight per partition
READ_BYTES = 256 * 1024  # bytes read from a segment at a time (replay and boundary walk)

Waiting = tuple[Any, bytes, Callable[[int | None, BaseException | None, str | None], None]]
"""A put waiting for its partition: (partition log, record, done)."""


class PartitionSync:
    """One partition's copy on the slave, as the master knows it.

    Attributes:
        state: ``ok``, ``catching-up`` or ``diverged``; changed only by ``move``.
        slave_end: the slave's end of the partition as last learnt, -1 when unknown.
        acked_end: the end of the last record the slave stored at the master's offset (a
            record boundary of both copies), -1 when none.
        refusing: puts are refused (the catch-up found the copies diverged).
        diverged_at: the first offset where the copies are known to differ.
        gated: new puts wait (a catch-up runs).
        sync_format: the format of the partition's syncs (``partition_sync_format``).
    """

    __slots__ = (
        "diverged_at",
        "gated",
        "key",
        "partition",
        "refusing",
        "slave_end",
        "acked_end",
        "state",
        "sync_format",
        "topic",
        "topic_bytes",
        "waiting",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_bytes = topic.encode("ascii")  # legal topic names are ASCII
        self.sync_format = partition_sync_format(self.topic_bytes, partition)
        self.key = (topic, partition)
        self.state = OK
        self.slave_end = -1
        self.acked_end = -1
        self.refusing = False
        self.diverged_at = -1
        self.gated = False
        self.waiting: deque[list] = deque()

    def wait(
        self, reactor: Any, timeout_s: float, entry: Waiting, after: Callable[[], None]
    ) -> None:
        """Hold a put until ``release``; after ``timeout_s`` it fails on its own, and then
        ``after()`` runs (the broker's end of batch: its reply is written)."""
        item: list = [entry, None]
        item[1] = reactor.callLater(timeout_s, self._expired, item, after)
        self.waiting.append(item)

    def _expired(self, item: list, after: Callable[[], None]) -> None:
        self.waiting.remove(item)
        done = item[0][2]
        done(None, None, f"{self.topic}-{self.partition} still catching up")
        after()

    def release(self) -> list[Waiting]:
        """Ungate the partition; return the puts that waited, oldest first."""
        self.gated = False
        released = []
        while self.waiting:
            entry, timer = self.waiting.popleft()
            timer.cancel()
            released.append(entry)
        return released

    def move(self, event: str) -> None:
        """Change ``state`` by ``event`` (``meta.sync.link_states`` owns the transitions)."""
        self.state = next_state(self.state, event)

    def diverge(self, offset: int, refuse: bool) -> None:
        self.move(DIFFERS)
        self.diverged_at = offset
        self.refusing = self.refusing or refuse


def detect_slave(
    link: SlaveLink, detected: Callable[[dict[tuple[str, int], int] | None], None]
) -> None:
    """Ask the slave what it is; ``detected(ends)`` with its partition ends when it is a
    metaq-py broker, ``detected(None)`` when not. Nothing is called when the connection is
    lost first (the master hears of that itself); a slave that does not answer in time is
    disconnected, so the next connection asks again."""

    def offsets_answered(code: int, body: bytes) -> None:
        if code in (DISCONNECTED, TIMED_OUT):
            silent(code)
            return
        if code != 200:
            log.warning("gregor slave answered 'stats offsets' with %d: no catch-up", code)
            detected(None)
            return
        detected(parse_offsets(body))

    def sync_answered(code: int, body: bytes) -> None:
        if code in (DISCONNECTED, TIMED_OUT):
            silent(code)
            return
        if code == 200 and body.split(b"\n", 1)[0].strip() == b"role gregor":
            link.send(lambda opaque: encode(Stats("offsets", opaque)), offsets_answered)
        else:
            detected(None)

    def silent(code: int) -> None:
        # A slave that does not say what it is cannot be taken for a Java one (that would
        # skip its catch-up): start again on a new connection.
        if code == TIMED_OUT:
            log.warning("gregor slave did not answer 'stats'; reconnecting")
            link.reconnect()

    link.send(lambda opaque: encode(Stats("sync", opaque)), sync_answered)


def parse_offsets(body: bytes) -> dict[tuple[str, int], int]:
    """``{(topic, partition): max_offset}`` from a ``stats offsets`` body."""
    ends = {}
    for line in body.decode(errors="replace").splitlines():
        fields = line.split()
        if len(fields) == 7 and fields[1] == "part" and fields[5] == "max_offset":
            try:
                ends[(fields[0], int(fields[2]))] = int(fields[6])
            except ValueError:
                continue
    return ends


def is_record_boundary(partition_log: Any, offset: int) -> bool:
    """Whether a record of ``partition_log`` starts (or the log ends) at ``offset``.

    Walks the record headers of the segment holding ``offset`` from its start (a segment
    starts with a record).
    """
    if offset == partition_log.max_offset:
        return True
    found = partition_log.slice(offset, 0)
    if found.kind != "data":
        return False
    segment, target = found.segment, found.position
    if target == 0:
        return True
    position = 0
    while position < target:
        chunk = segment.read(position, READ_BYTES)
        if len(chunk) < HEADER_SIZE:
            return False
        index = 0
        while index + HEADER_SIZE <= len(chunk) and position + index < target:
            length = HEADER.unpack_from(chunk, index)[0]
            if length < 0:
                return False
            index += HEADER_SIZE + length
        position += index
    return position == target


class CatchUp:
    """Brings one partition of a metaq-py slave to the master's end (see the module doc)."""

    def __init__(self, master: Any, state: PartitionSync, partition_log: Any, slave_end: int):
        self._master = master
        self._state = state
        self._log = partition_log
        self._offset = slave_end  # the next record to replay
        self._in_flight = 0
        self._cancelled = False
        state.slave_end = slave_end

    def start(self) -> None:
        state, partition_log = self._state, self._log
        state.refusing = False  # compared again at each connection
        state.diverged_at = -1
        master_end = partition_log.max_offset
        start = self._offset
        if start > master_end or start < partition_log.min_offset and start != master_end:
            self._diverged(min(start, master_end), f"its end {start} is outside the master's")
        elif start != state.acked_end and not is_record_boundary(partition_log, start):
            self._diverged(start, f"its end {start} is not a record boundary of the master")
        else:
            state.move(COMPARE)
            state.gated = True
            if start < master_end:
                log.info(
                    "catching up gregor slave on %s-%d: %d bytes from offset %d",
                    state.topic,
                    state.partition,
                    master_end - start,
                    start,
                )
            self._pump()

    def cancel(self) -> None:
        """The connection was lost: stop (the next connection starts a new catch-up)."""
        self._cancelled = True

    def _pump(self) -> None:
        """Send records until the window is full; end when the slave has everything."""
        if self._cancelled:
            return
        partition_log = self._log
        while self._in_flight < REPLAY_WINDOW and self._offset < partition_log.max_offset:
            records = self._read(self._offset)
            if not records:
                self._diverged(self._offset, "the master's records cannot be read there")
                return
            for offset, size, record in records:
                self._replay(offset, size, record)
                self._offset = offset + size
        if self._in_flight:
            return
        if partition_log.next_offset > partition_log.max_offset:
            # Records staged before this connection are still on their way to disk.
            self._master.broker.wait_for_data(partition_log, 0.1, self._pump)
            return
        self._state.move(CAUGHT_UP)
        self._state.slave_end = self._state.acked_end = self._offset
        self._master.caught_up(self._state)

    def _read(self, offset: int) -> list[tuple[int, int, bytes]]:
        """Whole records from ``offset`` (at least one when there is one): (offset, size, bytes)."""
        partition_log = self._log
        data = partition_log.read(partition_log.slice(offset, READ_BYTES))
        if len(data) >= HEADER_SIZE and HEADER_SIZE + HEADER.unpack_from(data)[0] > len(data):
            size = HEADER_SIZE + HEADER.unpack_from(data)[0]
            data = partition_log.read(partition_log.slice(offset, size))
        records = []
        index = 0
        while index + HEADER_SIZE <= len(data):
            size = HEADER_SIZE + HEADER.unpack_from(data, index)[0]
            if size < HEADER_SIZE or index + size > len(data):
                break
            records.append((offset + index, size, data[index : index + size]))
            index += size
        return records

    def _replay(self, offset: int, size: int, record: bytes) -> None:
        _length, crc, msg_id, flag = HEADER.unpack_from(record)
        body = record[HEADER_SIZE:]
        state = self._state

        def build(opaque: int) -> bytes:
            return encode_sync(state.topic_bytes, state.partition, flag, msg_id, crc, opaque, body)

        def answered(code: int, reply: bytes) -> None:
            self._answered(offset, size, code, reply)

        self._in_flight += 1
        if not self._master.link.send(build, answered):
            self._in_flight -= 1
            self._cancelled = True

    def _answered(self, offset: int, size: int, code: int, reply: bytes) -> None:
        self._in_flight -= 1
        if self._cancelled or code == DISCONNECTED:
            return
        if code != 200:
            log.warning(
                "gregor slave answered a replayed record of %s-%d with %d; reconnecting",
                self._state.topic,
                self._state.partition,
                code,
            )
            self._cancelled = True
            self._master.link.reconnect()
            return
        try:
            slave_offset = decode_put_reply(reply)[2]
        except ValueError:
            slave_offset = -1
        if slave_offset != offset:
            self._diverged(offset, f"it stored the record at {offset} at {slave_offset}")
            return
        self._state.slave_end = self._state.acked_end = offset + size
        self._pump()

    def _diverged(self, offset: int, reason: str) -> None:
        self._cancelled = True
        state = self._state
        log.error(
            "gregor slave diverged on %s-%d at offset %d: %s; puts to it are refused",
            state.topic,
            state.partition,
            offset,
            reason,
        )
        state.diverge(offset, refuse=True)
        self._master.caught_up(state)
