"""The outcome of a replicated put on a samsa master: its local append and its slave's reply.

``PutOutcome`` (one put) and ``RunOutcome`` (a run of puts of one partition, staged as one
entry and sent as one write) collect both halves, whichever comes first; once both are in,
they report every slave reply to the master (``slave_answered``: the failure threshold and
the latency), compare each slave offset with the master's (``offsets_differ``), and call the
put's ``done``. Reactor thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from meta.protocol.message import HEADER_SIZE
from meta.sync.slave_link import DISCONNECTED, TIMED_OUT

if TYPE_CHECKING:
    from meta.sync.samsa import SamsaMaster
    from meta.sync.samsa_catchup import PartitionSync

SLAVE_DISCONNECTED = "Slave is disconnected "
"""The refusal of a put while the link is down (Java's text, trailing space included)."""

# done(master_offset, master_error, slave_failure): the outcome of one replicated put.
Done = Callable[[int | None, BaseException | None, str | None], None]
# done(first_offset, master_error, slave_codes): the outcome of a run of replicated puts.
RunDone = Callable[[int | None, BaseException | None, list], None]


class PutOutcome:
    """The two halves of one replicated put; ``done`` is called once both are in."""

    __slots__ = (
        "_done",
        "_master",
        "_master_in",
        "_sent_at_s",
        "_size",
        "_state",
        "error",
        "offset",
        "slave",
    )

    def __init__(
        self, master: SamsaMaster, state: PartitionSync, size: int, done: Done, sent_at_s: float
    ) -> None:
        self._sent_at_s = sent_at_s
        self._master = master
        self._state = state
        self._size = size
        self._done = done
        self._master_in = False
        self.offset: int | None = None
        self.error: BaseException | None = None
        self.slave: tuple[int, bytes] | None = None

    def master_done(self, offset: int | None, error: BaseException | None) -> None:
        self.offset, self.error = offset, error
        self._master_in = True
        slave = self.slave
        if slave is not None:
            self._finish(slave[0], slave[1])

    def slave_done(self, code: int, body: bytes) -> None:
        if self._master_in:  # the usual order: the master's write came first
            self._finish(code, body)
        else:
            self.slave = (code, body)

    def _finish(self, code: int, body: bytes) -> None:
        master = self._master
        if code != 200:
            master.slave_answered(False, self._sent_at_s)
            self._done(self.offset, self.error, failure_reason(code, body))
            return
        master.slave_answered(True, self._sent_at_s)
        offset = self.offset
        # Compare the copies; a body that is no put reply has nothing to compare.
        slave_offset = None if offset is None else _reply_offset_at(body, offset)
        if offset is not None and slave_offset is not None:
            state = self._state
            if slave_offset != offset:
                master.offsets_differ(state, offset, slave_offset)
            else:
                end = offset + self._size
                state.acked_end = end
                if state.slave_end < end:
                    state.slave_end = end
        self._done(offset, self.error, None)


class RunOutcome:
    """The two halves of a run of replicated puts of one partition: one local stage, one
    slave reply per put; ``done`` is called once all are in."""

    __slots__ = (
        "_bodies",
        "_codes",
        "_done",
        "_master",
        "_master_in",
        "_pending",
        "_replies",
        "_sent_at_s",
        "_state",
        "error",
        "offset",
    )

    def __init__(
        self,
        master: Any,
        state: PartitionSync,
        bodies: list,
        done: RunDone,
        sent_at_s: float,
    ) -> None:
        self._master = master
        self._state = state
        self._bodies = bodies
        self._done = done
        self._sent_at_s = sent_at_s
        count = len(bodies)
        self._codes: list = [None] * count
        self._replies: list = [b""] * count
        self._pending = count
        self._master_in = False
        self.offset: int | None = None
        self.error: BaseException | None = None

    def slave_dones(self) -> list[Callable[[int, bytes], None]]:
        return [partial(self.slave_done, index) for index in range(len(self._bodies))]

    def slave_done(self, index: int, code: int, body: bytes) -> None:
        self._codes[index] = code
        self._replies[index] = body
        self._pending -= 1
        if not self._pending and self._master_in:
            self._finish()

    def all_failed(self, code: int) -> None:
        for index in range(len(self._bodies)):
            self.slave_done(index, code, b"")

    def master_done(self, offset: int | None, error: BaseException | None) -> None:
        self.offset, self.error = offset, error
        self._master_in = True
        if not self._pending:
            self._finish()

    def _finish(self) -> None:
        master, state, sent_at_s = self._master, self._state, self._sent_at_s
        codes = self._codes
        if codes.count(200) == len(codes):
            master.slave_answered(True, sent_at_s, len(codes))
        else:
            for code in codes:
                master.slave_answered(code == 200, sent_at_s)
        offset = self.offset
        if offset is not None:
            for code, reply, body in zip(codes, self._replies, self._bodies, strict=True):
                size = HEADER_SIZE + len(body)
                if code == 200:
                    slave_offset = _reply_offset(reply, offset)
                    if slave_offset != offset:
                        master.offsets_differ(state, offset, slave_offset)
                    elif state.slave_end < offset + size:
                        state.slave_end = state.acked_end = offset + size
                offset += size
        self._done(self.offset, self.error, codes)


def _reply_offset(reply: bytes, otherwise: int | None) -> int | None:
    """The offset of a put reply's body (``<msgId> <partition> <offset>``; the last field of
    ``decode_put_reply``), or ``otherwise`` when the body is not a put reply."""
    try:
        return int(reply[reply.rindex(b" ") + 1 :])
    except ValueError:
        return otherwise


def _reply_offset_at(reply: bytes, offset: int) -> int | None:
    """``_reply_offset(reply, None)`` for a record the master stored at ``offset``: a reply
    that ends with that offset (the usual one: the copies agree) gives it without a parse."""
    if reply.endswith(b" %d" % offset):
        return offset
    return _reply_offset(reply, None)


def failure_reason(code: int, body: bytes) -> str:
    if code == TIMED_OUT:
        return "no reply within sendToSlaveTimeoutInMills"
    if code == DISCONNECTED:
        return SLAVE_DISCONNECTED
    return f"slave answered {code}: {body.decode(errors='replace')}"
